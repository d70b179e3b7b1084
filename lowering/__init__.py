"""The compiler: a captured ATen graph to kernels and a plan; stages.py lists its stages."""
