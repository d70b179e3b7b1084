// A small C++ service over an aotpack package: one loaded model shared by N worker threads, each with its own
// session, serving requests of several shapes across the declared ranges. It checks itself the way a service
// must be able to trust its runtime: every worker's outputs are bit-for-bit those of a serial run of the same
// requests (sessions run one thread each, so the kernels' arithmetic order is fixed).
//
//   cpp_service PACKAGE [--threads N] [--rounds R] [--dump DIR]
//
// The requests are made here from the model's signature: each input symbol at its minimum, maximum and inner
// values, random data (seeded, so a run is repeatable). --dump DIR writes each request's inputs and the serial
// outputs as raw little-endian files with an index, cases.txt, so a test can compare them with PyTorch.
// Exit status: 0 all outputs identical, 1 a mismatch, 2 a usage, load or run error.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "aotpack.hpp"

namespace {

struct Options {
  std::string package;
  int threads = 4;
  int rounds = 20;
  std::string dump_dir;
};

// A tensor that owns its shape and bytes: a request's input, or an output copied out of a session.
struct Tensor {
  aotpack_dtype_t dtype = AOTPACK_DTYPE_FLOAT32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  aotpack_tensor_t view() {
    return {dtype, static_cast<int32_t>(shape.size()), shape.data(), bytes.data()};
  }
};

struct Request {
  std::map<std::string, int64_t> symbols;
  std::vector<Tensor> inputs;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "cpp_service: %s\nusage: cpp_service PACKAGE [--threads N] [--rounds R] [--dump DIR]\n",
               message.c_str());
  std::exit(2);
}

int positive_int(const std::string& flag, const char* text) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < 1 || value > 1024)
    usage_error(flag + " takes an integer from 1 to 1024, not \"" + text + "\"");
  return static_cast<int>(value);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if ((arg == "--threads" || arg == "--rounds" || arg == "--dump") && !has_value) usage_error(arg + " needs a value");
    if (arg == "--threads") {
      options.threads = positive_int(arg, argv[++i]);
    } else if (arg == "--rounds") {
      options.rounds = positive_int(arg, argv[++i]);
    } else if (arg == "--dump") {
      options.dump_dir = argv[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      usage_error("unknown option " + arg);
    } else if (options.package.empty()) {
      options.package = arg;
    } else {
      usage_error("one package only (got " + options.package + " and " + arg + ")");
    }
  }
  if (options.package.empty()) usage_error("no package given");
  return options;
}

// splitmix64: a tiny, well-mixed generator, so the requests are the same on every run and platform.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) / 9007199254740992.0; }  // [0, 1)
};

// Random values of each dtype: floats in (-1, 1), written bit by bit for the 16-bit ones (a sign, an exponent
// for magnitudes 2^-7 .. 2^-1, a random mantissa); integers 0 or 1, valid indices for any embedding table.
void fill_random(Tensor* t, Random* rng) {
  size_t n = t->bytes.size() / aotpack_dtype_size(t->dtype);
  for (size_t i = 0; i < n; ++i) {
    void* at = t->bytes.data() + i * aotpack_dtype_size(t->dtype);
    uint64_t bits = rng->next();
    switch (t->dtype) {
      case AOTPACK_DTYPE_FLOAT32: { float v = static_cast<float>(2 * rng->uniform() - 1); std::memcpy(at, &v, 4); break; }
      case AOTPACK_DTYPE_FLOAT64: { double v = 2 * rng->uniform() - 1; std::memcpy(at, &v, 8); break; }
      case AOTPACK_DTYPE_FLOAT16: {  // exponent 8..14 of bias 15
        uint16_t v = static_cast<uint16_t>((bits & 0x8000) | ((8 + bits % 7) << 10) | ((bits >> 16) & 0x3FF));
        std::memcpy(at, &v, 2);
        break;
      }
      case AOTPACK_DTYPE_BFLOAT16: {  // exponent 120..126 of bias 127
        uint16_t v = static_cast<uint16_t>((bits & 0x8000) | ((120 + bits % 7) << 7) | ((bits >> 16) & 0x7F));
        std::memcpy(at, &v, 2);
        break;
      }
      case AOTPACK_DTYPE_INT64: { int64_t v = bits & 1; std::memcpy(at, &v, 8); break; }
      case AOTPACK_DTYPE_INT32: { int32_t v = bits & 1; std::memcpy(at, &v, 4); break; }
      case AOTPACK_DTYPE_INT16: { int16_t v = bits & 1; std::memcpy(at, &v, 2); break; }
      case AOTPACK_DTYPE_INT8:
      case AOTPACK_DTYPE_UINT8:
      case AOTPACK_DTYPE_BOOL: { uint8_t v = bits & 1; std::memcpy(at, &v, 1); break; }
      default: throw std::runtime_error(std::string("input dtype ") + aotpack_dtype_name(t->dtype) + " is not supported here");
    }
  }
}

// The values each input symbol takes over the requests: its ends, its middle and two more inside.
std::map<std::string, std::vector<int64_t>> symbol_values(const aotpack::Model& model) {
  std::map<std::string, std::vector<int64_t>> values;
  for (size_t i = 0; i < model.num_inputs(); ++i) {
    aotpack_tensor_info_t info = model.input_info(i);
    for (int d = 0; d < info.rank; ++d) {
      const aotpack_dim_info_t& dim = info.dims[d];
      if (!dim.symbol || values.count(dim.symbol)) continue;
      std::vector<int64_t> v = {dim.min, dim.max, dim.min + (dim.max - dim.min) / 2,
                                std::min(dim.min + 1, dim.max), dim.min + (dim.max - dim.min) / 3};
      values[dim.symbol] = v;
    }
  }
  return values;
}

// One request per value index: with several symbols, each takes its k-th value in request k.
std::vector<Request> make_requests(const aotpack::Model& model) {
  std::map<std::string, std::vector<int64_t>> values = symbol_values(model);
  size_t count = 1;
  for (const auto& entry : values) count = std::max(count, entry.second.size());
  std::vector<Request> requests(count);
  for (size_t k = 0; k < count; ++k) {
    Random rng{0x5EED0000u + k};
    for (const auto& entry : values) requests[k].symbols[entry.first] = entry.second[k % entry.second.size()];
    for (size_t i = 0; i < model.num_inputs(); ++i) {
      aotpack_tensor_info_t info = model.input_info(i);
      Tensor t;
      t.dtype = info.dtype;
      size_t elements = 1;
      for (int d = 0; d < info.rank; ++d) {
        int64_t size = info.dims[d].symbol ? requests[k].symbols[info.dims[d].symbol] : info.dims[d].size;
        t.shape.push_back(size);
        elements *= static_cast<size_t>(size);
      }
      t.bytes.resize(elements * aotpack_dtype_size(info.dtype));
      fill_random(&t, &rng);
      requests[k].inputs.push_back(std::move(t));
    }
  }
  return requests;
}

// Runs one request and copies every output out of the session (they are valid only until its next run).
std::vector<Tensor> serve(const aotpack::Model& model, aotpack::Session& session, Request& request) {
  std::vector<aotpack_tensor_t> inputs;
  for (Tensor& t : request.inputs) inputs.push_back(t.view());
  session.run(inputs);
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < model.num_outputs(); ++i) {
    aotpack_tensor_t out = session.output(i);
    Tensor t;
    t.dtype = out.dtype;
    t.shape.assign(out.shape, out.shape + out.rank);
    size_t elements = 1;
    for (int64_t s : t.shape) elements *= static_cast<size_t>(s);
    const unsigned char* data = static_cast<const unsigned char*>(out.data);
    t.bytes.assign(data, data + elements * aotpack_dtype_size(out.dtype));
    outputs.push_back(std::move(t));
  }
  return outputs;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s.empty() ? "scalar" : s;
}

// cases.txt: "<case> <in|out> <index> <name> <dtype> <dims>", and case<k>.<in|out>.<index>.bin beside it.
void dump(const std::string& dir, const aotpack::Model& model, const std::vector<Request>& requests,
          const std::vector<std::vector<Tensor>>& outputs) {
  std::ofstream index(dir + "/cases.txt");
  auto write = [&](size_t k, const char* kind, size_t i, const std::string& name, const Tensor& t) {
    index << k << ' ' << kind << ' ' << i << ' ' << name << ' ' << aotpack_dtype_name(t.dtype) << ' '
          << shape_text(t.shape) << '\n';
    std::ofstream(dir + "/case" + std::to_string(k) + "." + kind + "." + std::to_string(i) + ".bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  };
  for (size_t k = 0; k < requests.size(); ++k) {
    for (size_t i = 0; i < requests[k].inputs.size(); ++i) write(k, "in", i, model.input_info(i).name, requests[k].inputs[i]);
    for (size_t i = 0; i < outputs[k].size(); ++i) write(k, "out", i, model.output_info(i).name, outputs[k][i]);
  }
  if (!index) throw std::runtime_error("cannot write " + dir + "/cases.txt (does the folder exist?)");
}

// Why `got` differs from `want`, or "" when they are identical.
std::string difference(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " outputs, the serial run had " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].shape != want[i].shape)
      return "output " + std::to_string(i) + " has shape " + shape_text(got[i].shape) + ", the serial run " +
             shape_text(want[i].shape);
    if (got[i].bytes != want[i].bytes) {
      size_t at = std::mismatch(got[i].bytes.begin(), got[i].bytes.end(), want[i].bytes.begin()).first -
                  got[i].bytes.begin();
      return "output " + std::to_string(i) + " differs from the serial run from byte " + std::to_string(at);
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse_options(argc, argv);
  // The library this process runs with must be of the header's major version (its SONAME says the same).
  std::string library = aotpack_version();
  if (library.substr(0, library.find('.')) != std::to_string(AOTPACK_VERSION_MAJOR)) {
    std::fprintf(stderr, "cpp_service: built against aotpack %s but runs libaotpack %s\n", AOTPACK_VERSION_STRING,
                 library.c_str());
    return 2;
  }
  try {
    aotpack::Model model(options.package);  // immutable: shared by every worker
    std::vector<Request> requests = make_requests(model);
    std::vector<std::vector<Tensor>> reference;
    {
      aotpack::Session serial(model, 1);
      for (Request& r : requests) reference.push_back(serve(model, serial, r));
    }
    if (!options.dump_dir.empty()) dump(options.dump_dir, model, requests, reference);

    std::atomic<long> runs{0};
    std::mutex failure_mutex;
    std::string failure;  // the first mismatch or error of any worker, and the exit status it gives
    int failure_status = 0;
    auto fail = [&](int status, const std::string& what) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (failure.empty()) failure = what, failure_status = status;
    };
    std::vector<std::thread> workers;
    for (int t = 0; t < options.threads; ++t) {
      workers.emplace_back([&, t] {
        try {
          aotpack::Session session(model, 1);  // one session per thread
          for (int round = 0; round < options.rounds; ++round) {
            for (size_t j = 0; j < requests.size(); ++j) {
              size_t k = (j + t + round) % requests.size();  // workers interleave different shapes
              std::vector<Tensor> got = serve(model, session, requests[k]);
              ++runs;
              std::string why = difference(got, reference[k]);
              if (!why.empty())
                return fail(1, "MISMATCH thread " + std::to_string(t) + " request " + std::to_string(k) + ": " + why);
            }
          }
        } catch (const std::exception& e) {
          fail(2, "thread " + std::to_string(t) + ": " + e.what());
        }
      });
    }
    for (std::thread& w : workers) w.join();
    if (!failure.empty()) {
      std::fprintf(stderr, "cpp_service: %s\n", failure.c_str());
      return failure_status;
    }
    std::printf("cpp_service: aotpack %s, %s: %d threads x %d rounds x %zu shapes = %ld runs, all identical to the "
                "serial run\n", library.c_str(), model.digest().c_str(), options.threads, options.rounds,
                requests.size(), runs.load());
    return 0;
  } catch (const std::exception& e) {  // aotpack::Error (load, run) or a request this example cannot make
    std::fprintf(stderr, "cpp_service: %s\n", e.what());
    return 2;
  }
}
