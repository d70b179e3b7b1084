"""The codegen core every backend renders through: one sympy printer (printer.py), one kernel-body writer
(body.py) and one render chain (library.py), each driven by a backend's spellings of its language."""
