// Hand-written zip directory reader (stored members only): the runtime uses no library beyond the C++
// standard library. Layout from PKWARE's APPNOTE.TXT, sections 4.3.7 (local header), 4.3.12 (central
// directory header) and 4.3.16 (end of central directory).
#include "zip_reader.hpp"

#include <algorithm>

namespace aotpack {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndOfDirSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndOfDirSize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kMaxCommentSize = 0xFFFF;

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

Status zip64_unsupported() {
  return unsupported("it is a zip64 archive, which aotpack packages never are (no member may reach 4 GiB)");
}

bool bad_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos ||
      name.find('\\') != std::string::npos)
    return true;
  // No ".." path component.
  size_t start = 0;
  for (;;) {
    size_t end = name.find('/', start);
    std::string part = name.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part == "..") return true;
    if (end == std::string::npos) return false;
    start = end + 1;
  }
}

Status find_end_of_directory(const uint8_t* data, size_t size, size_t* out) {
  if (size < kEndOfDirSize) return data_loss("not a zip archive: ", size, " bytes is too short");
  size_t lowest = size > kEndOfDirSize + kMaxCommentSize ? size - kEndOfDirSize - kMaxCommentSize : 0;
  for (size_t pos = size - kEndOfDirSize + 1; pos-- > lowest;) {
    if (u32(data + pos) != kEndOfDirSig) continue;
    // The comment must end exactly at the end of the file, which rules out a signature inside data.
    if (pos + kEndOfDirSize + u16(data + pos + 20) == size) {
      *out = pos;
      return Status();
    }
  }
  return data_loss("not a zip archive, or a truncated one: no end-of-central-directory record");
}

}  // namespace

Status read_zip_directory(const uint8_t* data, size_t size, std::vector<ZipMember>* out) {
  size_t eocd = 0;
  AOTPACK_RETURN_IF_ERROR(find_end_of_directory(data, size, &eocd));
  const uint8_t* e = data + eocd;
  uint16_t disk = u16(e + 4), cd_disk = u16(e + 6), entries_here = u16(e + 8), entries = u16(e + 10);
  uint32_t cd_size = u32(e + 12), cd_offset = u32(e + 16);
  if (eocd >= kZip64LocatorSize && u32(data + eocd - kZip64LocatorSize) == kZip64LocatorSig)
    return zip64_unsupported();
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) return zip64_unsupported();
  if (disk != 0 || cd_disk != 0 || entries_here != entries)
    return unsupported("it is a multi-volume zip archive, which aotpack packages never are");
  if (uint64_t{cd_offset} + cd_size > eocd)
    return data_loss("the zip central directory (offset ", cd_offset, ", ", cd_size,
                     " bytes) runs past the end-of-central-directory record at ", eocd,
                     "; the file is truncated or corrupt");

  std::vector<ZipMember> members;
  members.reserve(entries);
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // [local header, end of data) of each member
  size_t pos = cd_offset;
  const size_t cd_end = size_t{cd_offset} + cd_size;
  for (uint32_t i = 0; i < entries; ++i) {
    if (pos + kCentralHeaderSize > cd_end || u32(data + pos) != kCentralHeaderSig)
      return data_loss("zip central directory entry ", i, " at offset ", pos, " is malformed or truncated");
    const uint8_t* c = data + pos;
    uint16_t flags = u16(c + 8), method = u16(c + 10);
    uint32_t csize = u32(c + 20), usize = u32(c + 24);
    uint16_t name_len = u16(c + 28), extra_len = u16(c + 30), comment_len = u16(c + 32);
    uint32_t local_offset = u32(c + 42);
    size_t entry_size = kCentralHeaderSize + size_t{name_len} + extra_len + comment_len;
    if (pos + entry_size > cd_end)
      return data_loss("zip central directory entry ", i, " at offset ", pos, " runs past the directory");
    ZipMember m;
    m.name.assign(reinterpret_cast<const char*>(c + kCentralHeaderSize), name_len);
    std::string where = str_cat("zip member ", quoted(m.name));
    if (bad_name(m.name))
      return data_loss(where, " has a name aotpack refuses (empty, absolute, with '..', '\\' or NUL)");
    for (const ZipMember& other : members) {
      if (other.name == m.name) return data_loss(where, " appears twice");
    }
    if (csize == 0xFFFFFFFF || usize == 0xFFFFFFFF || local_offset == 0xFFFFFFFF) return zip64_unsupported();
    if (flags & 0x1) return unsupported(where, " is encrypted; aotpack packages never are");
    if (flags & 0x8) return unsupported(where, " uses a data descriptor; aotpack packages never do");
    if (method != 0)
      return unsupported(where, " is compressed (method ", method,
                         "); aotpack packages store every member uncompressed (method 0)");
    if (csize != usize)
      return data_loss(where, " is stored but its sizes differ (", csize, " and ", usize, ")");

    // The local header repeats the name and sizes; the data follows it and its extra field.
    if (uint64_t{local_offset} + kLocalHeaderSize > cd_offset || u32(data + local_offset) != kLocalHeaderSig)
      return data_loss(where, ": no valid local header at offset ", local_offset);
    const uint8_t* l = data + local_offset;
    uint16_t l_flags = u16(l + 6), l_method = u16(l + 8);
    uint32_t l_csize = u32(l + 18), l_usize = u32(l + 22);
    uint16_t l_name_len = u16(l + 26), l_extra_len = u16(l + 28);
    uint64_t data_offset = uint64_t{local_offset} + kLocalHeaderSize + l_name_len + l_extra_len;
    if (data_offset > cd_offset)
      return data_loss(where, ": local header at offset ", local_offset, " runs past the central directory");
    if (l_name_len != name_len || std::string(reinterpret_cast<const char*>(l + kLocalHeaderSize), l_name_len) != m.name)
      return data_loss(where, ": local header at offset ", local_offset, " names another member");
    if ((l_flags & 0x9) != 0 || l_method != method || l_csize != csize || l_usize != usize)
      return data_loss(where, ": local header disagrees with the central directory (flags, method or sizes)");
    if (data_offset + usize > cd_offset)
      return data_loss(where, ": its ", usize, " bytes at offset ", data_offset,
                       " run past the central directory; the file is truncated or corrupt");
    m.offset = data_offset;
    m.size = usize;
    extents.emplace_back(local_offset, data_offset + usize);
    members.push_back(std::move(m));
    pos += entry_size;
  }
  if (pos != cd_end)
    return data_loss("the zip central directory has ", cd_end - pos, " bytes after its last entry");
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) return data_loss("two zip members overlap in the archive");
  }
  *out = std::move(members);
  return Status();
}

}  // namespace aotpack
