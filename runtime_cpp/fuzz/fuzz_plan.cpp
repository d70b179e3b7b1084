// libFuzzer target: bytes as program.json, put into a base package whose manifest records their digest and
// size (as an attacker who edits the plan and recomputes the digests would), then load -> run at the minima
// and maxima. Everything past the digests sees the edited plan: the program parser, plan_check, the kernel
// table checks and the kernels themselves.
//
// AOTPACK_FUZZ_BASE names a folder with the base package's members as files (manifest.json, weights, the
// kernel library, ...) and members.txt listing them in package order; scripts/fuzz.sh makes it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_run.hpp"
#include "sha256.hpp"

namespace {

struct Member {
  std::string name;
  std::string data;
};

std::vector<Member> g_base;  // in package order; manifest.json first

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void put16(std::string* s, uint32_t v) { s->append({char(v & 0xff), char((v >> 8) & 0xff)}); }
void put32(std::string* s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}

uint32_t crc32(const std::string& d) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : d) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A stored zip with every member's data 64-byte aligned (an extra field pads the local header), as the writer.
std::string zip(const std::vector<Member>& members) {
  std::string out, central;
  for (const Member& m : members) {
    uint32_t offset = static_cast<uint32_t>(out.size());
    size_t pad = (64 - (out.size() + 30 + m.name.size() + 4) % 64) % 64;
    uint32_t crc = crc32(m.data), size = static_cast<uint32_t>(m.data.size());
    std::string extra;
    put16(&extra, 0xA0A0);
    put16(&extra, static_cast<uint32_t>(pad));
    extra.append(pad, '\0');
    put32(&out, 0x04034b50);
    put16(&out, 20); put16(&out, 0); put16(&out, 0); put16(&out, 0); put16(&out, 0x21);
    put32(&out, crc); put32(&out, size); put32(&out, size);
    put16(&out, static_cast<uint32_t>(m.name.size())); put16(&out, static_cast<uint32_t>(extra.size()));
    out += m.name + extra + m.data;
    put32(&central, 0x02014b50);
    put16(&central, 20); put16(&central, 20); put16(&central, 0); put16(&central, 0); put16(&central, 0);
    put16(&central, 0x21); put32(&central, crc); put32(&central, size); put32(&central, size);
    put16(&central, static_cast<uint32_t>(m.name.size())); put16(&central, 0); put16(&central, 0);
    put16(&central, 0); put16(&central, 0); put32(&central, 0); put32(&central, offset);
    central += m.name;
  }
  uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  put32(&out, 0x06054b50);
  put16(&out, 0); put16(&out, 0);
  put16(&out, static_cast<uint32_t>(members.size())); put16(&out, static_cast<uint32_t>(members.size()));
  put32(&out, static_cast<uint32_t>(central.size())); put32(&out, cd_offset); put16(&out, 0);
  return out;
}

// The manifest's record of program.json ("sha256": "<hex>", "size": N) rewritten for `program`.
std::string with_program_digest(std::string manifest, const std::string& program) {
  size_t at = manifest.find("\"program.json\": {");
  if (at == std::string::npos) return manifest;
  size_t sha = manifest.find("\"sha256\": \"", at);
  size_t size = manifest.find("\"size\": ", at);
  if (sha == std::string::npos || size == std::string::npos) return manifest;
  sha += 11;
  manifest.replace(sha, 64, aotpack::sha256_hex(reinterpret_cast<const uint8_t*>(program.data()), program.size()));
  size = manifest.find("\"size\": ", at) + 8;
  size_t end = manifest.find_first_not_of("0123456789", size);
  manifest.replace(size, end - size, std::to_string(program.size()));
  return manifest;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* base = std::getenv("AOTPACK_FUZZ_BASE");
  if (!base) {
    std::fprintf(stderr, "fuzz_plan: set AOTPACK_FUZZ_BASE to a folder of a package's members (scripts/fuzz.sh)\n");
    std::exit(2);
  }
  std::ifstream list(std::string(base) + "/members.txt");
  for (std::string name; std::getline(list, name);) {
    if (!name.empty()) g_base.push_back({name, read_file(std::string(base) + "/" + name)});
  }
  if (g_base.empty() || g_base[0].name != "manifest.json") {
    std::fprintf(stderr, "fuzz_plan: %s/members.txt must list manifest.json first\n", base);
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string program(reinterpret_cast<const char*>(data), size);
  std::vector<Member> members = g_base;
  for (Member& m : members) {
    if (m.name == "program.json") m.data = program;
  }
  members[0].data = with_program_digest(members[0].data, program);
  std::string bytes = zip(members);
  aotpack_fuzz::load_and_run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}
