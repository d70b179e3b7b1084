# The CUDA backend: Triton cubins run through the driver API, libcuda.so.1 opened at run time (no CUDA
# headers or libraries at build time).
list(APPEND AOTPACK_BACKEND_SOURCES
  src/backends/cuda/cuda_driver.cpp
  src/backends/cuda/cuda_plan.cpp
  src/backends/cuda/cuda_executable.cpp
  src/backends/cuda/cuda_weight_upload.cpp
  src/backends/cuda/cuda_workspace.cpp
  src/backends/cuda/cuda_backend.cpp
)
