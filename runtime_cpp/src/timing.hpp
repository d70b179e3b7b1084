// Where the time from opening a package to its first result goes, for measuring cold starts: with the
// environment variable AOTPACK_TIMINGS=1 (aotpack-run --timings) each part of loading and session creation
// prints one line on stderr, "aotpack timing: <part>: <ms> ms[ (<detail>)]". Off by default, and then free
// (one cached check): nothing is printed and nothing allocated.
#ifndef AOTPACK_SRC_TIMING_HPP_
#define AOTPACK_SRC_TIMING_HPP_

#include <chrono>
#include <string>

namespace aotpack {

// AOTPACK_TIMINGS is set to something other than "" or "0" (read once per process).
bool timings_enabled();

// Prints one part's line (when enabled).
void report_timing(const char* part, double ms, const std::string& detail = std::string());

// Times a scope: reports `part` when it ends (or at stop()), when timings are enabled.
class PartTimer {
 public:
  explicit PartTimer(const char* part) : part_(part), on_(timings_enabled()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  PartTimer(const PartTimer&) = delete;
  PartTimer& operator=(const PartTimer&) = delete;
  ~PartTimer() { stop(); }
  // Reports now, with `detail` after the time; later calls do nothing.
  void stop(const std::string& detail = std::string()) {
    if (!on_) return;
    on_ = false;
    report_timing(part_, ms(), detail);
  }
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  const char* part_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_TIMING_HPP_
