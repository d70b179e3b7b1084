"""The CPU backend: C++ kernels from templates/cpp/, compiled with the host compiler into one kernels.so."""
