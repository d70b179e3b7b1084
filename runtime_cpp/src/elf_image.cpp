#include "elf_image.hpp"

#include <elf.h>

#include <cstring>

namespace aotpack {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
constexpr const char* kHostMachineName = "x86-64";
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
constexpr const char* kHostMachineName = "aarch64";
#else
#error "add this architecture's ELF machine here"
#endif
constexpr uint16_t kCudaMachine = 190;  // EM_CUDA, which older elf.h files lack

// [offset, offset + length) inside [0, size), with no overflow.
bool inside(uint64_t offset, uint64_t length, size_t size) { return offset <= size && length <= size - offset; }

}  // namespace

ElfKind host_shared_library() { return {kHostMachine, ET_DYN, "kernel library", kHostMachineName}; }
ElfKind cuda_cubin() { return {kCudaMachine, ET_EXEC, "cubin", "CUDA"}; }

Status check_elf_image(const std::string& member, const ElfKind& kind, const uint8_t* data, size_t size) {
  auto bad = [&](const auto&... what) { return data_loss(member, " is not a whole ", kind.what, ": ", what...); };
  Elf64_Ehdr eh;
  if (size < sizeof(eh)) return bad(size, " bytes, less than an ELF header");
  std::memcpy(&eh, data, sizeof(eh));  // copies: the member's bytes need not be aligned for the struct
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return bad("no ELF magic number");
  if ((eh.e_ident[EI_CLASS] != ELFCLASS32 && eh.e_ident[EI_CLASS] != ELFCLASS64) ||
      (eh.e_ident[EI_DATA] != ELFDATA2LSB && eh.e_ident[EI_DATA] != ELFDATA2MSB))
    return bad("ELF class ", int{eh.e_ident[EI_CLASS]}, " and data encoding ", int{eh.e_ident[EI_DATA]}, " are not ELF's");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return unsupported(member, " is a 32-bit or big-endian ELF file; this runtime loads 64-bit little-endian ones");
  if (eh.e_machine != kind.machine)
    return unsupported(member, " is built for ELF machine ", eh.e_machine, ", not ", kind.machine_name, " (",
                       kind.machine, ")");
  if (eh.e_type != kind.type) return bad("ELF type ", eh.e_type, ", expected ", kind.type);
  if (eh.e_ehsize != sizeof(Elf64_Ehdr)) return bad("ELF header size ", eh.e_ehsize);
  if (eh.e_phnum > 0 && eh.e_phentsize != sizeof(Elf64_Phdr))
    return bad(eh.e_phnum, " program headers of ", eh.e_phentsize, " bytes");
  if (!inside(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr), size))
    return bad("its ", eh.e_phnum, " program headers at ", eh.e_phoff, " run past its ", size, " bytes");
  bool loads = false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, data + eh.e_phoff + uint64_t{i} * sizeof(ph), sizeof(ph));
    if (ph.p_type == PT_LOAD) loads = true;
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC && ph.p_type != PT_NOTE && ph.p_type != PT_INTERP &&
        ph.p_type != PT_GNU_EH_FRAME)
      continue;  // segments the loader does not read from the file (GNU_STACK, GNU_RELRO: within a LOAD)
    if (!inside(ph.p_offset, ph.p_filesz, size))
      return bad("segment ", i, " (type ", ph.p_type, ") takes bytes ", ph.p_offset, "..", ph.p_offset + ph.p_filesz,
                 " of a file of ", size);
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz)
      return bad("segment ", i, " has more file bytes (", ph.p_filesz, ") than memory (", ph.p_memsz, ")");
  }
  if (!loads && kind.type == ET_DYN) return bad("no loadable segment");
  if (eh.e_shnum > 0) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr)) return bad("section header size ", eh.e_shentsize);
    if (!inside(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), size))
      return bad("its ", eh.e_shnum, " section headers at ", eh.e_shoff, " run past its ", size, " bytes");
    for (uint16_t i = 0; i < eh.e_shnum; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, data + eh.e_shoff + uint64_t{i} * sizeof(sh), sizeof(sh));
      if (sh.sh_type == SHT_NOBITS || sh.sh_type == SHT_NULL) continue;
      if (!inside(sh.sh_offset, sh.sh_size, size))
        return bad("section ", i, " takes bytes ", sh.sh_offset, "..", sh.sh_offset + sh.sh_size, " of a file of ", size);
    }
  }
  return Status();
}

}  // namespace aotpack
