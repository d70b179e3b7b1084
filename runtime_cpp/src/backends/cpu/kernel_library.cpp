#include "kernel_library.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace aotpack {
namespace {

int make_memfd() {
#if defined(SYS_memfd_create)
  // Through syscall() rather than memfd_create() so that older C libraries without the wrapper still build.
  return static_cast<int>(syscall(SYS_memfd_create, "aotpack-kernels", 1u /* MFD_CLOEXEC */));
#else
  errno = ENOSYS;
  return -1;
#endif
}

bool write_all(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Status KernelLibrary::open(const std::string& member, const uint8_t* data, size_t size,
                           std::unique_ptr<KernelLibrary>* out) {
  std::unique_ptr<KernelLibrary> lib(new KernelLibrary());
  lib->member_ = member;
  std::string path;
  int fd = make_memfd();
  if (fd >= 0) {
    path = str_cat("/proc/self/fd/", fd);
  } else {
    // No memfd (old kernel, or a sandbox that forbids it): a private temporary file, unlinked once loaded.
    const char* tmpdir = std::getenv("TMPDIR");
    std::string templ = str_cat(tmpdir && *tmpdir ? tmpdir : "/tmp", "/aotpack-kernels-XXXXXX");
    fd = mkostemp(templ.data(), O_CLOEXEC);
    if (fd < 0)
      return resource_exhausted("cannot create a memfd or a temporary file for ", member, ": ", std::strerror(errno));
    path = templ;
    lib->temp_path_ = templ;
  }
  lib->fd_ = fd;
  if (!write_all(fd, data, size))
    return resource_exhausted("cannot write ", member, " to memory for loading: ", std::strerror(errno));

  // RTLD_LOCAL: two packages may export kernels of the same name.
  lib->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->temp_path_.empty()) {
    unlink(lib->temp_path_.c_str());
    lib->temp_path_.clear();
    ::close(lib->fd_);
    lib->fd_ = -1;
  }
  if (!lib->handle_) {
    const char* why = dlerror();
    return unsupported("cannot load the CPU kernel library ", member, ": ", why ? why : "unknown dlopen error");
  }
  dlerror();
  auto version_fn = reinterpret_cast<aotpack_kernel_abi_version_fn>(dlsym(lib->handle_, "aotpack_kernel_abi_version"));
  if (!version_fn)
    return not_found("the CPU kernel library ", member, " does not export aotpack_kernel_abi_version()");
  int32_t version = version_fn();
  if (version != AOTPACK_KERNEL_ABI_VERSION)
    return unsupported("the CPU kernel library ", member, " was built for kernel ABI version ", version,
                       ", but this runtime implements version ", AOTPACK_KERNEL_ABI_VERSION,
                       "; re-export the model with a matching aotpack");
  auto scratch_fn =
      reinterpret_cast<aotpack_kernel_scratch_bytes_fn>(dlsym(lib->handle_, "aotpack_kernel_scratch_bytes"));
  if (scratch_fn) {
    lib->scratch_bytes_ = scratch_fn();
    if (lib->scratch_bytes_ < 0 || lib->scratch_bytes_ > (int64_t{1} << 32))
      return data_loss("the CPU kernel library ", member, " asks for ", lib->scratch_bytes_,
                       " bytes of scratch per thread, outside 0..4 GiB");
  }
  *out = std::move(lib);
  return Status();
}

Status KernelLibrary::kernel(const std::string& name, aotpack_kernel_fn* out) const {
  dlerror();
  void* sym = dlsym(handle_, name.c_str());
  if (!sym) return not_found("kernel ", name, " is not exported by the CPU kernel library ", member_);
  *out = reinterpret_cast<aotpack_kernel_fn>(sym);
  return Status();
}

KernelLibrary::~KernelLibrary() {
  std::string path = fd_ >= 0 ? str_cat("/proc/self/fd/", fd_) : std::string();
  if (handle_) dlclose(handle_);
  if (fd_ < 0) return;
  // The dynamic loader recognizes an already-loaded library by its path name. If dlclose could not unload
  // the library (some C++ libraries pin themselves), a later library opened through a reused fd number would
  // get the old one; so keep this fd, and its number, for as long as the library stays loaded.
  void* still_loaded = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (still_loaded) {
    dlclose(still_loaded);
    return;
  }
  ::close(fd_);
}

}  // namespace aotpack
