#include "cpu_features.hpp"

namespace aotpack {

int isa_level(const std::string& isa) {
  if (isa == "generic") return 0;
  if (isa == "x86-64-v2") return 2;
  if (isa == "x86-64-v3") return 3;
  if (isa == "x86-64-v4") return 4;
  return -1;
}

#if defined(__x86_64__)

namespace {

// __builtin_cpu_supports needs a string literal, hence a macro per feature.
#define AOTPACK_FEATURE(name) \
  { name, [] { return __builtin_cpu_supports(name) != 0; } }

struct Feature {
  const char* name;
  bool (*present)();
};

const Feature kV2[] = {AOTPACK_FEATURE("sse3"), AOTPACK_FEATURE("ssse3"), AOTPACK_FEATURE("sse4.1"),
                       AOTPACK_FEATURE("sse4.2"), AOTPACK_FEATURE("popcnt")};
const Feature kV3[] = {AOTPACK_FEATURE("avx"), AOTPACK_FEATURE("avx2"), AOTPACK_FEATURE("bmi"),
                       AOTPACK_FEATURE("bmi2"), AOTPACK_FEATURE("fma")};
const Feature kV4[] = {AOTPACK_FEATURE("avx512f"), AOTPACK_FEATURE("avx512bw"), AOTPACK_FEATURE("avx512dq"),
                       AOTPACK_FEATURE("avx512vl")};
#undef AOTPACK_FEATURE

template <size_t N>
const char* first_missing(const Feature (&features)[N]) {
  for (const Feature& f : features) {
    if (!f.present()) return f.name;
  }
  return nullptr;
}

}  // namespace

Status check_host_supports(const std::string& arch, const std::string& isa) {
  int level = isa_level(isa);
  if (level < 0)
    return unsupported("unknown isa ", quoted(isa), " (known: generic x86-64-v2 x86-64-v3 x86-64-v4)");
  if (arch != "x86_64") return unsupported("the kernels are built for ", quoted(arch), ", but this host is x86_64");
  __builtin_cpu_init();
  const char* missing = nullptr;
  if (level >= 2 && !missing) missing = first_missing(kV2);
  if (level >= 3 && !missing) missing = first_missing(kV3);
  if (level >= 4 && !missing) missing = first_missing(kV4);
  if (missing)
    return unsupported("the kernels are built for ", isa, ", but this CPU lacks ", missing,
                       "; re-export the model for a lower isa (say x86-64-v2) to run it here");
  return Status();
}

#else

Status check_host_supports(const std::string& arch, const std::string& isa) {
  int level = isa_level(isa);
  if (level < 0) return unsupported("unknown isa ", quoted(isa));
  if (level > 0 || arch == "x86_64")
    return unsupported("the kernels are built for ", arch, " ", isa, ", which this host cannot run");
  return Status();
}

#endif

}  // namespace aotpack
