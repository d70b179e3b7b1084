#include "plan_check.hpp"

#include <algorithm>
#include <limits>

#include "dtype.hpp"

namespace aotpack {
namespace {

struct Interval {
  int64_t lo = 0, hi = 0;
};

bool mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

Status unbounded(const char* why) { return data_loss("a size expression ", why, " over the declared ranges"); }

Status bound(const Expr& e, const std::vector<Symbol>& symbols, Interval* out) {
  switch (e.op) {
    case Expr::Op::kConst: *out = {e.value, e.value}; return Status();
    case Expr::Op::kSymbol: {
      const Symbol& s = symbols[static_cast<size_t>(e.value)];
      *out = {s.min, s.max};
      return Status();
    }
    default: break;
  }
  std::vector<Interval> args(e.args.size());
  for (size_t i = 0; i < e.args.size(); ++i) AOTPACK_RETURN_IF_ERROR(bound(e.args[i], symbols, &args[i]));
  Interval r = args[0];
  for (size_t i = 1; i < args.size(); ++i) {
    const Interval& b = args[i];
    switch (e.op) {
      case Expr::Op::kAdd:
        if (__builtin_add_overflow(r.lo, b.lo, &r.lo) || __builtin_add_overflow(r.hi, b.hi, &r.hi))
          return unbounded("overflows int64");
        break;
      case Expr::Op::kMul: {
        int64_t p[4];
        if (!mul(r.lo, b.lo, &p[0]) || !mul(r.lo, b.hi, &p[1]) || !mul(r.hi, b.lo, &p[2]) || !mul(r.hi, b.hi, &p[3]))
          return unbounded("overflows int64");
        r = {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
        break;
      }
      case Expr::Op::kFloorDiv: {
        if (b.lo <= 0 && b.hi >= 0) return unbounded("divides by a value that may be 0");
        if (r.lo == std::numeric_limits<int64_t>::min() && b.lo <= -1 && b.hi >= -1) return unbounded("overflows int64");
        int64_t q[4] = {floor_div(r.lo, b.lo), floor_div(r.lo, b.hi), floor_div(r.hi, b.lo), floor_div(r.hi, b.hi)};
        r = {*std::min_element(q, q + 4), *std::max_element(q, q + 4)};
        break;
      }
      case Expr::Op::kMod:  // Python's %: the result has the divisor's sign and is smaller than it
        if (b.lo <= 0 && b.hi >= 0) return unbounded("divides by a value that may be 0");
        if (b.lo > 0 && r.lo >= 0 && r.hi < b.lo) break;  // the dividend is always below the divisor
        r = b.lo > 0 ? Interval{0, b.hi - 1} : Interval{b.lo + 1, 0};
        break;
      case Expr::Op::kMax: r = {std::max(r.lo, b.lo), std::max(r.hi, b.hi)}; break;
      case Expr::Op::kMin: r = {std::min(r.lo, b.lo), std::min(r.hi, b.hi)}; break;
      default: return internal_error("unknown size expression op");
    }
  }
  *out = r;
  return Status();
}

std::string shape_string(const Program& p, const std::vector<Expr>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + expr_to_string(shape[i], p.symbol_names);
  return s + "]";
}

std::string symbols_at(const Program& p, bool maxima) {
  std::string s;
  for (size_t i = 0; i < p.symbols.size(); ++i)
    s += str_cat(i ? ", " : "", p.symbols[i].name, "=", maxima ? p.symbols[i].max : p.symbols[i].min);
  return s.empty() ? "(no symbols)" : s;
}

std::string buffer_label(const Program& p, size_t index) {
  const Buffer& b = p.buffers[index];
  return str_cat("buffer ", b.id, " (", buffer_kind_name(b.kind), " ", dtype_name(b.dtype), " ",
                 shape_string(p, b.shape), ")");
}

int64_t align_up(int64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// The bytes every arena or output buffer may take: at least what its shape needs at the declared maxima and
// minima, and not far more than its shape can ever need (so a plan cannot make a session allocate gigabytes
// its model never uses).
Status check_buffer_sizes(const Program& p) {
  std::vector<int64_t> maxima, minima;
  for (const Symbol& s : p.symbols) {
    maxima.push_back(s.max);
    minima.push_back(s.min);
  }
  maxima.push_back(0);  // never an empty array
  minima.push_back(0);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    if (b.kind != BufferKind::kArena && b.kind != BufferKind::kOutput) continue;
    std::string where = str_cat("program.json: buffers[", i, "]: ", buffer_label(p, i));
    for (bool at_max : {true, false}) {
      uint64_t need = 0;
      AOTPACK_RETURN_IF_ERROR(shape_bytes(b.dtype, b.shape, at_max ? maxima.data() : minima.data(), &need)
                                  .prefixed(where));
      if (need > static_cast<uint64_t>(b.max_bytes))
        return data_loss(where, " takes ", need, " bytes at ", symbols_at(p, at_max), ", more than its max_bytes ",
                         b.max_bytes);
    }
    uint64_t most = dtype_size(b.dtype);
    for (const Expr& d : b.shape) {
      int64_t hi = 0;
      AOTPACK_RETURN_IF_ERROR(expr_upper_bound(d, p.symbols, &hi).prefixed(where));
      if (__builtin_mul_overflow(most, static_cast<uint64_t>(std::max<int64_t>(hi, 0)), &most)) most = UINT64_MAX;
    }
    // Slack for bounds computed differently at export (a looser interval there); a plan asking for more is
    // not one aotpack wrote.
    if (most < (UINT64_MAX - 4096) / 2 && static_cast<uint64_t>(b.max_bytes) > 2 * most + 4096)
      return data_loss(where, ": max_bytes ", b.max_bytes, " is far more than the at most ", most,
                       " bytes its shape takes within the declared ranges");
  }
  return Status();
}

}  // namespace

Status expr_upper_bound(const Expr& e, const std::vector<Symbol>& symbols, int64_t* out) {
  Interval r;
  AOTPACK_RETURN_IF_ERROR(bound(e, symbols, &r));
  *out = r.hi;
  return Status();
}

Status shape_bytes(aotpack_dtype_t dtype, const std::vector<Expr>& shape, const int64_t* symbols, uint64_t* out) {
  uint64_t bytes = dtype_size(dtype);
  for (const Expr& d : shape) {
    int64_t v = 0;
    AOTPACK_RETURN_IF_ERROR(eval_expr(d, symbols, &v));
    if (v < 0) return data_loss("a dim is negative (", v, ")");
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(v), &bytes)) bytes = UINT64_MAX;
  }
  *out = bytes;
  return Status();
}

Status check_plan_memory(const Program& p) {
  AOTPACK_RETURN_IF_ERROR(check_buffer_sizes(p));
  // The arena is what its buffers take, as the exporter's planner lays them out (each at least 64 bytes).
  int64_t end = 0;
  for (const Buffer& b : p.buffers) {
    if (b.kind == BufferKind::kArena) end = std::max(end, b.offset + align_up(std::max<int64_t>(b.max_bytes, 1)));
  }
  if (p.arena_bytes > end)
    return data_loss("program.json: arena_bytes ", p.arena_bytes, " is more than its buffers take (", end,
                     " bytes at the declared maxima)");
  // Each arena buffer is live from the first step that uses it to the last; two live at once must not share
  // a byte (the planner gives bytes to a buffer only once their last user is done).
  const size_t none = p.steps.size();
  std::vector<size_t> first(p.buffers.size(), none), last(p.buffers.size(), 0);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (size_t b : p.steps[s].args) {
      if (first[b] == none) first[b] = s;
      last[b] = s;
    }
  }
  std::vector<size_t> arena;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    if (p.buffers[i].kind == BufferKind::kArena && first[i] != none && p.buffers[i].max_bytes > 0) arena.push_back(i);
  }
  std::sort(arena.begin(), arena.end(), [&](size_t a, size_t b) { return p.buffers[a].offset < p.buffers[b].offset; });
  for (size_t x = 0; x < arena.size(); ++x) {
    const Buffer& a = p.buffers[arena[x]];
    for (size_t y = x + 1; y < arena.size(); ++y) {
      const Buffer& b = p.buffers[arena[y]];
      if (b.offset >= a.offset + a.max_bytes) break;  // sorted by offset: no later one overlaps a either
      if (last[arena[x]] < first[arena[y]] || last[arena[y]] < first[arena[x]]) continue;
      return data_loss("program.json: arena buffers ", a.id, " (bytes ", a.offset, "..", a.offset + a.max_bytes,
                       ", used by steps ", first[arena[x]], "..", last[arena[x]], ") and ", b.id, " (bytes ", b.offset,
                       "..", b.offset + b.max_bytes, ", steps ", first[arena[y]], "..", last[arena[y]],
                       ") overlap while both are live");
    }
  }
  return Status();
}

Status check_step(const Program& p, const std::string& where, const Step& step, const KernelContract& kernel) {
  if (step.args.size() != kernel.args.size())
    return data_loss(where, ": kernel ", kernel.name, " takes ", kernel.args.size(), " arguments, the step passes ",
                     step.args.size());
  for (size_t a = 0; a < step.args.size(); ++a) {
    const ArgContract& arg = kernel.args[a];
    const Buffer& b = p.buffers[step.args[a]];
    std::string at = str_cat(where, ".args[", a, "]: kernel ", kernel.name, " ", arg.writes ? "writes" : "reads",
                             " a ", dtype_name(arg.dtype), " ", shape_string(p, arg.shape), " there");
    if (arg.writes && (b.kind == BufferKind::kWeight || b.kind == BufferKind::kInput))
      return data_loss(at, ", but the step passes ", buffer_label(p, step.args[a]),
                       ", which is read-only: a kernel writes only arena and output buffers");
    bool same = arg.dtype == b.dtype && arg.shape.size() == b.shape.size();
    for (size_t d = 0; same && d < arg.shape.size(); ++d) same = same_expr(arg.shape[d], b.shape[d]);
    if (!same) return data_loss(at, ", but the step passes ", buffer_label(p, step.args[a]));
    if (!arg.writes) continue;
    for (size_t o = 0; o < step.args.size(); ++o) {
      if (o != a && step.args[o] == step.args[a])
        return data_loss(at, ", but the step also passes that buffer (", b.id, ") as argument ", o,
                         ": a written argument must not alias another");
    }
  }
  return Status();
}

Status check_outputs_written(const Program& p, const std::vector<std::vector<bool>>& writes) {
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    bool written = false;
    for (size_t s = 0; s < p.steps.size() && !written; ++s) {
      for (size_t a = 0; a < p.steps[s].args.size() && !written; ++a)
        written = writes[s][a] && p.steps[s].args[a] == p.outputs[o].buffer;
    }
    if (!written)
      return data_loss("program.json: output ", quoted(p.outputs[o].name), " (buffer ", p.buffers[p.outputs[o].buffer].id,
                       ") is written by no step, so a run would return memory no kernel computed");
  }
  return Status();
}

}  // namespace aotpack
