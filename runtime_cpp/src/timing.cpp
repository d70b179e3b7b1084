#include "timing.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace aotpack {

bool timings_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("AOTPACK_TIMINGS");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

void report_timing(const char* part, double ms, const std::string& detail) {
  if (!timings_enabled()) return;
  // One fprintf per line, so lines of concurrent sessions do not interleave within a line.
  if (detail.empty())
    std::fprintf(stderr, "aotpack timing: %s: %.3f ms\n", part, ms);
  else
    std::fprintf(stderr, "aotpack timing: %s: %.3f ms (%s)\n", part, ms, detail.c_str());
}

}  // namespace aotpack
