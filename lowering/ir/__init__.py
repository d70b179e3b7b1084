"""The kernel IR (kernels.py, scalar.py, dtypes.py, symbolic.py) and its target-independent passes: the memory
plan (memory.py) and the verifier (verify.py)."""
