"""The frontend: the captured ATen graph walked into kernel IR (graph.py), one lowering per op (ops/).

Importing the package registers every op lowering, so `GraphLowering` is usable from any import of it.
"""

from . import ops  # noqa: F401  (registration)
