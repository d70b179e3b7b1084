// The runtime's thread-safety contract, through the C API (aotpack.h):
//
//   aotpack-concurrency-test sessions PACKAGE THREADS RUNS
//       THREADS threads, one session each on one shared model, each making RUNS runs of mixed shapes (every
//       symbol drawn from its declared range); every output must be bit-identical to a serial run of the
//       same inputs. Run under TSan by scripts/sanitize.sh, and plainly by the tests.
//   aotpack-concurrency-test race PACKAGE ROUNDS VALUE_A VALUE_B
//       misuse: two threads run one session at once (every symbol at VALUE_A for one, VALUE_B for the other,
//       clamped to its range), ROUNDS times from a common start. A call that finds the session busy must fail
//       with the runtime's "another thread is using this session" error, and the session's outputs must then
//       be exactly the winner's (no mix of the two runs). Needs a package whose run outlasts a thread's start
//       (the tests' sleeping kernel), so that the calls overlap.
//   aotpack-concurrency-test leaks PACKAGE RUNS
//       RUNS runs of mixed shapes on one session, a new session every 100 runs, for LeakSanitizer to check.
//
// Prints one summary line; exits 0 when every check held, 1 otherwise (naming the first failure).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "aotpack.h"

namespace {

std::mutex g_failure_mu;
std::string g_failure;  // the first failed check

void fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_failure_mu);
  if (g_failure.empty()) g_failure = what;
}

bool failed() {
  std::lock_guard<std::mutex> lock(g_failure_mu);
  return !g_failure.empty();
}

// Takes a status; true when OK, else records the message (prefixed) and frees it.
bool ok(aotpack_status_t st, const std::string& what) {
  if (!st) return true;
  fail(what + ": " + aotpack_status_message(st));
  aotpack_status_free(st);
  return false;
}

// One run's inputs and, once run serially, its outputs.
struct Case {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<uint8_t>> data;
  std::vector<aotpack_tensor_t> tensors;
  std::vector<std::vector<int64_t>> out_shapes;
  std::vector<std::vector<uint8_t>> out_data;
};

// Random inputs for `model` with each symbol at value_of(min, max).
template <typename ValueOf>
Case make_case(const aotpack_model_t* model, std::mt19937_64& rng, ValueOf value_of) {
  Case c;
  std::vector<std::pair<std::string, int64_t>> symbols;
  auto symbol_value = [&](const aotpack_dim_info_t& dim) {
    for (const auto& s : symbols) {
      if (s.first == dim.symbol) return s.second;
    }
    symbols.emplace_back(dim.symbol, value_of(dim.min, dim.max));
    return symbols.back().second;
  };
  for (size_t i = 0; i < aotpack_model_num_inputs(model); ++i) {
    aotpack_tensor_info_t info;
    ok(aotpack_model_input_info(model, i, &info), "input info");
    std::vector<int64_t> shape;
    size_t count = 1;
    for (int d = 0; d < info.rank; ++d) {
      shape.push_back(info.dims[d].symbol ? symbol_value(info.dims[d]) : info.dims[d].size);
      count *= static_cast<size_t>(shape.back());
    }
    size_t element = aotpack_dtype_size(info.dtype);
    std::vector<uint8_t> bytes(count * element + 1);
    for (size_t e = 0; e < count; ++e) {
      if (info.dtype == AOTPACK_DTYPE_FLOAT32) {
        float f = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
        std::memcpy(&bytes[e * 4], &f, 4);
      } else {  // integer and other inputs: small values, valid as indices of any table
        std::memset(&bytes[e * element], 0, element);
        bytes[e * element] = static_cast<uint8_t>(rng() & 1);
      }
    }
    c.shapes.push_back(std::move(shape));
    c.data.push_back(std::move(bytes));
    c.tensors.push_back({info.dtype, info.rank, nullptr, nullptr});
  }
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    c.tensors[i].shape = c.shapes[i].data();
    c.tensors[i].data = c.data[i].data();
  }
  return c;
}

// The session's outputs, copied.
bool read_outputs(const aotpack_model_t* model, const aotpack_session_t* session,
                  std::vector<std::vector<int64_t>>* shapes, std::vector<std::vector<uint8_t>>* data) {
  shapes->clear();
  data->clear();
  for (size_t i = 0; i < aotpack_model_num_outputs(model); ++i) {
    aotpack_tensor_t t;
    if (!ok(aotpack_session_output(session, i, &t), "output")) return false;
    size_t count = 1;
    for (int d = 0; d < t.rank; ++d) count *= static_cast<size_t>(t.shape[d]);
    shapes->emplace_back(t.shape, t.shape + t.rank);
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    data->emplace_back(p, p + count * aotpack_dtype_size(t.dtype));
  }
  return true;
}

bool same_outputs(const Case& c, const std::vector<std::vector<int64_t>>& shapes,
                  const std::vector<std::vector<uint8_t>>& data) {
  return shapes == c.out_shapes && data == c.out_data;
}

aotpack_session_t* new_session(const aotpack_model_t* model) {
  aotpack_session_t* session = nullptr;
  ok(aotpack_session_create(model, nullptr, &session), "session create");
  return session;
}

bool run_serially(const aotpack_model_t* model, aotpack_session_t* session, Case* c) {
  if (!ok(aotpack_session_run(session, c->tensors.data(), c->tensors.size()), "serial run")) return false;
  return read_outputs(model, session, &c->out_shapes, &c->out_data);
}

int sessions_mode(const aotpack_model_t* model, int threads, int runs) {
  std::mt19937_64 rng(7);
  std::vector<Case> cases;
  aotpack_session_t* serial = new_session(model);
  if (!serial) return 1;
  for (int i = 0; i < 24; ++i) {  // mixed shapes: the range's ends and random values inside it
    int kind = i % 3;
    cases.push_back(make_case(model, rng, [&](int64_t lo, int64_t hi) {
      if (kind == 0) return lo;
      if (kind == 1) return hi;
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    }));
    if (!run_serially(model, serial, &cases.back())) return 1;
  }
  aotpack_session_destroy(serial);
  std::atomic<long> mismatches{0}, done{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      aotpack_session_t* session = new_session(model);
      if (!session) return;
      std::vector<std::vector<int64_t>> shapes;
      std::vector<std::vector<uint8_t>> data;
      for (int r = 0; r < runs && !failed(); ++r) {
        Case& c = cases[(static_cast<size_t>(t) * 7 + static_cast<size_t>(r) * 5) % cases.size()];
        if (!ok(aotpack_session_run(session, c.tensors.data(), c.tensors.size()), "run")) break;
        if (!read_outputs(model, session, &shapes, &data)) break;
        if (!same_outputs(c, shapes, data)) {
          if (mismatches.fetch_add(1) == 0) fail("thread " + std::to_string(t) + " run " + std::to_string(r) +
                                                 ": outputs differ from the serial run's");
        }
        done.fetch_add(1);
      }
      aotpack_session_destroy(session);
    });
  }
  for (std::thread& th : pool) th.join();
  std::printf("sessions: %d threads x %d runs, %ld runs compared, %ld mismatches\n", threads, runs, done.load(),
              mismatches.load());
  return failed() || done.load() != static_cast<long>(threads) * runs ? 1 : 0;
}

// Two threads released together, ROUNDS times.
class StartLine {
 public:
  explicit StartLine(int parties) : parties_(parties) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t gen = generation_;
    if (++waiting_ == parties_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int parties_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
};

int race_mode(const aotpack_model_t* model, int rounds, int64_t value_a, int64_t value_b) {
  std::mt19937_64 rng(11);
  aotpack_session_t* session = new_session(model);
  if (!session) return 1;
  auto clamp_to = [](int64_t v) { return [v](int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); }; };
  Case cases[2] = {make_case(model, rng, clamp_to(value_a)), make_case(model, rng, clamp_to(value_b))};
  for (Case& c : cases) {
    if (!run_serially(model, session, &c)) return 1;
  }
  if (same_outputs(cases[0], cases[1].out_shapes, cases[1].out_data)) {
    std::printf("race: the two inputs give the same outputs; pick other values\n");
    return 1;
  }
  StartLine start(3);
  StartLine finish(3);
  int status[2] = {0, 0};  // per thread, this round: 1 ran, 2 refused as busy
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < 2; ++t) {
    pool.emplace_back([&, t] {
      for (;;) {
        start.arrive_and_wait();
        if (stop.load()) return;
        aotpack_status_t st = aotpack_session_run(session, cases[t].tensors.data(), cases[t].tensors.size());
        if (!st) {
          status[t] = 1;
        } else if (std::strstr(aotpack_status_message(st), "another thread is using this session") &&
                   aotpack_status_code(st) == AOTPACK_INVALID_ARGUMENT) {
          status[t] = 2;
          aotpack_status_free(st);
        } else {
          ok(st, "thread " + std::to_string(t) + ": an unexpected error");
          status[t] = 0;
        }
        finish.arrive_and_wait();
      }
    });
  }
  int refused = 0, both_ran = 0;
  for (int round = 0; round < rounds && !failed(); ++round) {
    start.arrive_and_wait();
    finish.arrive_and_wait();
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<uint8_t>> data;
    if (status[0] == 1 && status[1] == 1) {
      ++both_ran;  // one ended before the other began: the outputs are the later one's, either
      continue;
    }
    if (status[0] + status[1] != 3) {
      fail("round " + std::to_string(round) + ": neither thread's run succeeded");
      break;
    }
    ++refused;
    const Case& winner = cases[status[0] == 1 ? 0 : 1];
    if (!read_outputs(model, session, &shapes, &data)) break;
    if (!same_outputs(winner, shapes, data))
      fail("round " + std::to_string(round) + ": the session's outputs are not the winning run's");
  }
  stop.store(true);
  start.arrive_and_wait();
  for (std::thread& th : pool) th.join();
  aotpack_session_destroy(session);
  std::printf("race: %d rounds, %d with the second caller refused (outputs exactly the winner's), %d not "
              "overlapping\n", rounds, refused, both_ran);
  if (!failed() && refused == 0) fail("the two threads' runs never overlapped; the package's run is too short");
  return failed() ? 1 : 0;
}

int leaks_mode(const aotpack_model_t* model, int runs) {
  std::mt19937_64 rng(5);
  aotpack_session_t* session = nullptr;
  int done = 0;
  for (int r = 0; r < runs && !failed(); ++r) {
    if (r % 100 == 0) {
      aotpack_session_destroy(session);
      session = new_session(model);
      if (!session) break;
    }
    Case c = make_case(model, rng, [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, std::min(hi, lo + 63))(rng);
    });
    if (!ok(aotpack_session_run(session, c.tensors.data(), c.tensors.size()), "run")) break;
    // A failing call every so often: its status (and message) must be freed too.
    if (r % 10 == 0) {
      aotpack_status_t st = aotpack_session_run(session, c.tensors.data(), 0);
      if (!st && !c.tensors.empty()) fail("a run with no inputs succeeded");
      aotpack_status_free(st);
    }
    ++done;
  }
  aotpack_session_destroy(session);
  std::printf("leaks: %d runs\n", done);
  return failed() || done != runs ? 1 : 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: aotpack-concurrency-test sessions PACKAGE THREADS RUNS\n"
               "       aotpack-concurrency-test race PACKAGE ROUNDS VALUE_A VALUE_B\n"
               "       aotpack-concurrency-test leaks PACKAGE RUNS\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  std::string mode = argv[1];
  aotpack_model_t* model = nullptr;
  if (!ok(aotpack_model_load(argv[2], nullptr, &model), "load")) {
    std::fprintf(stderr, "aotpack-concurrency-test: %s\n", g_failure.c_str());
    return 1;
  }
  int rc;
  if (mode == "sessions" && argc == 5) {
    rc = sessions_mode(model, std::atoi(argv[3]), std::atoi(argv[4]));
  } else if (mode == "race" && argc == 6) {
    rc = race_mode(model, std::atoi(argv[3]), std::atoll(argv[4]), std::atoll(argv[5]));
  } else if (mode == "leaks" && argc == 4) {
    rc = leaks_mode(model, std::atoi(argv[3]));
  } else {
    aotpack_model_release(model);
    return usage();
  }
  aotpack_model_release(model);
  if (!g_failure.empty()) std::fprintf(stderr, "aotpack-concurrency-test: %s\n", g_failure.c_str());
  return rc;
}
