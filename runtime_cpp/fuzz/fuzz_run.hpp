// What both fuzz targets do with a package once they have its bytes: load it (digests verified) and, when it
// loads, run it with every symbol at its minimum and at its maximum. Any outcome but a crash, a sanitizer
// report or a leak is fine: the runtime must turn every bad package into a status.
#ifndef AOTPACK_FUZZ_FUZZ_RUN_HPP_
#define AOTPACK_FUZZ_FUZZ_RUN_HPP_

#include <cstddef>
#include <cstdint>

namespace aotpack_fuzz {

void load_and_run(const uint8_t* data, size_t size);

}  // namespace aotpack_fuzz

#endif  // AOTPACK_FUZZ_FUZZ_RUN_HPP_
