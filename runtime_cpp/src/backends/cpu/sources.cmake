# The CPU backend: the package's kernels.so, loaded from memory and run on a thread pool.
list(APPEND AOTPACK_BACKEND_SOURCES
  src/backends/cpu/cpu_features.cpp
  src/backends/cpu/kernel_library.cpp
  src/backends/cpu/kernel_contracts.cpp
  src/backends/cpu/thread_pool.cpp
  src/backends/cpu/cpu_executable.cpp
  src/backends/cpu/cpu_workspace.cpp
  src/backends/cpu/cpu_backend.cpp
)
