"""aotpack: export a PyTorch model once, run it from C++ with no Python and no libtorch."""

__version__ = "0.1.0"
