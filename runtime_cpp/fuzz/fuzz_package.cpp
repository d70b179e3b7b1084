// libFuzzer target: bytes as a whole package file -> load (digests verified) -> run at the symbols' minima and
// maxima. Seeds: whole packages (scripts/fuzz.sh exports them). What it reaches past the digests: the zip
// structure, the manifest, and every member whose bytes happen to keep their digest.
#include <cstddef>
#include <cstdint>

#include "fuzz_run.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  aotpack_fuzz::load_and_run(data, size);
  return 0;
}
