"""The CUDA backend: Triton kernels from templates/triton/, cross-compiled to cubins with no GPU."""
