#include "kernel_library.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "dtype.hpp"
#include "elf_image.hpp"

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
  AOTPACK_RETURN_IF_ERROR(check_elf_image(member, host_shared_library(), data, size));
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
  lib->path_ = path;
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
  AOTPACK_RETURN_IF_ERROR(lib->load_table());
  *out = std::move(lib);
  return Status();
}

bool KernelLibrary::defines(const void* address, std::string* where) const {
  Dl_info info;
  if (!address || !dladdr(address, &info) || !info.dli_fname) {
    *where = "no loaded library";
    return false;
  }
  *where = info.dli_fname;
  return path_ == info.dli_fname;
}

Status KernelLibrary::load_table() {
  dlerror();
  const void* symbol = dlsym(handle_, "aotpack_kernel_table");
  if (!symbol) return Status();  // exported before tables existed: see legacy_kernel
  std::string where;
  if (!defines(symbol, &where))
    return data_loss("the CPU kernel library ", member_, " does not define aotpack_kernel_table itself (", where,
                     " does)");
  const auto* table = static_cast<const aotpack_kernel_table_t*>(symbol);
  auto bad = [&](const auto&... what) { return data_loss("the CPU kernel library ", member_, "'s kernel table: ", what...); };
  if (table->version != AOTPACK_KERNEL_TABLE_VERSION)
    return unsupported("the CPU kernel library ", member_, " has a kernel table of version ", table->version,
                       ", but this runtime reads version ", AOTPACK_KERNEL_TABLE_VERSION,
                       "; re-export the model with a matching aotpack");
  constexpr int32_t kMaxEntries = 1 << 20, kMaxArgs = 1 << 12;
  if (table->num_kernels < 0 || table->num_kernels > kMaxEntries || (table->num_kernels > 0 && !table->kernels))
    return bad(table->num_kernels, " kernels");
  if (table->num_symbols < 0 || table->num_symbols > kMaxArgs || (table->num_symbols > 0 && !table->symbols))
    return bad(table->num_symbols, " symbols");
  for (int32_t i = 0; i < table->num_symbols; ++i) {
    if (!table->symbols[i].name) return bad("symbols[", i, "] has no name");
  }
  for (int32_t i = 0; i < table->num_kernels; ++i) {
    const aotpack_kernel_entry_t& e = table->kernels[i];
    if (!e.name) return bad("kernels[", i, "] has no name");
    if (!defines(reinterpret_cast<const void*>(e.fn), &where))
      return bad("kernel ", e.name, "'s function is not in the library (", where, ")");
    if (e.num_args < 0 || e.num_args > kMaxArgs || (e.num_args > 0 && !e.args))
      return bad("kernel ", e.name, " has ", e.num_args, " arguments");
    for (int32_t a = 0; a < e.num_args; ++a) {
      const aotpack_kernel_arg_t& arg = e.args[a];
      if (arg.access != AOTPACK_ACCESS_READ && arg.access != AOTPACK_ACCESS_WRITE)
        return bad("kernel ", e.name, " argument ", a, ": unknown access ", arg.access);
      aotpack_dtype_t dtype;
      if (!dtype_from_code(arg.dtype, &dtype))
        return bad("kernel ", e.name, " argument ", a, ": unknown dtype ", arg.dtype);
      if (!arg.shape) return bad("kernel ", e.name, " argument ", a, " has no shape");
    }
    if (e.scratch_bytes < 0 || e.scratch_bytes > scratch_bytes_)
      return bad("kernel ", e.name, " uses ", e.scratch_bytes, " bytes of scratch per thread, but the library "
                 "provides ", scratch_bytes_, " (aotpack_kernel_scratch_bytes)");
    if (!entries_.emplace(e.name, &e).second) return bad("kernel ", e.name, " is listed twice");
  }
  table_ = table;
  return Status();
}

Status KernelLibrary::entry(const std::string& name, const aotpack_kernel_entry_t** out) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return not_found("kernel ", name, " is not in the kernel table of the CPU kernel library ", member_);
  *out = it->second;
  return Status();
}

// Format-1 packages exported before kernel tables name kernels k_<hash> (the tests' hand-written ones k_<what>);
// nothing else the library defines (the ABI's own functions, C++ helpers) is a kernel.
Status KernelLibrary::legacy_kernel(const std::string& name, aotpack_kernel_fn* out) const {
  if (name.rfind("k_", 0) != 0)
    return not_found("kernel ", name, " is not a kernel of the CPU kernel library ", member_,
                     " (it has no kernel table, and its kernels are named k_...)");
  dlerror();
  void* sym = dlsym(handle_, name.c_str());
  if (!sym) return not_found("kernel ", name, " is not exported by the CPU kernel library ", member_);
  std::string where;
  if (!defines(sym, &where))
    return not_found("kernel ", name, " is not defined by the CPU kernel library ", member_, " (only ", where,
                     ", a library it depends on, has it)");
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
