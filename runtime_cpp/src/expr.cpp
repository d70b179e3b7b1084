#include "expr.hpp"

#include <algorithm>
#include <limits>

namespace aotpack {
namespace {

constexpr int kMaxDepth = 64;

struct OpName {
  const char* name;
  Expr::Op op;
  size_t min_args, max_args;
};

constexpr size_t kMany = std::numeric_limits<size_t>::max();
constexpr OpName kOps[] = {
    {"+", Expr::Op::kAdd, 1, kMany},      {"*", Expr::Op::kMul, 1, kMany}, {"//", Expr::Op::kFloorDiv, 2, 2},
    {"%", Expr::Op::kMod, 2, 2},          {"max", Expr::Op::kMax, 2, kMany}, {"min", Expr::Op::kMin, 2, kMany},
};

const char* op_name(Expr::Op op) {
  for (const OpName& o : kOps) {
    if (o.op == op) return o.name;
  }
  return "?";
}

Status parse_at(const json::Value& v, const std::vector<std::string>& symbols, const JsonReader& reader,
                const std::string& path, int depth, Expr* out) {
  if (depth > kMaxDepth) return reader.error(path, "size expression nested too deeply");
  if (v.is_int()) {
    out->op = Expr::Op::kConst;
    out->value = v.as_int();
    return Status();
  }
  if (v.is_string()) {
    auto it = std::find(symbols.begin(), symbols.end(), v.as_string());
    if (it == symbols.end())
      return reader.error(path, str_cat("size expression names ", quoted(v.as_string()),
                                        ", which is not a symbol of the program"));
    out->op = Expr::Op::kSymbol;
    out->value = it - symbols.begin();
    return Status();
  }
  if (!v.is_array() || v.as_array().empty() || !v.as_array()[0].is_string())
    return reader.error(path, str_cat("a size expression must be an integer, a symbol name or [op, args...], not ",
                                      json::type_name(v.type())));
  const std::vector<json::Value>& items = v.as_array();
  const std::string& name = items[0].as_string();
  const OpName* op = nullptr;
  for (const OpName& o : kOps) {
    if (name == o.name) op = &o;
  }
  if (!op) return reader.error(path, str_cat("unknown size operator ", quoted(name), " (known: + * // % max min)"));
  size_t n = items.size() - 1;
  if (n < op->min_args || n > op->max_args)
    return reader.error(path, str_cat("operator ", quoted(name), " takes ",
                                      op->min_args == op->max_args ? "exactly " : "at least ", op->min_args,
                                      " arguments, got ", n));
  out->op = op->op;
  out->args.resize(n);
  for (size_t i = 0; i < n; ++i)
    AOTPACK_RETURN_IF_ERROR(parse_at(items[i + 1], symbols, reader, JsonReader::join(path, i + 1), depth + 1, &out->args[i]));
  return Status();
}

Status overflow(const Expr& e) {
  return invalid_argument("size expression operator ", quoted(op_name(e.op)), " overflows int64");
}

}  // namespace

Status parse_expr(const json::Value& v, const std::vector<std::string>& symbols, const JsonReader& reader,
                  const std::string& path, Expr* out) {
  *out = Expr();
  return parse_at(v, symbols, reader, path, 0, out);
}

Status eval_expr(const Expr& e, const int64_t* symbols, int64_t* out) {
  switch (e.op) {
    case Expr::Op::kConst: *out = e.value; return Status();
    case Expr::Op::kSymbol: *out = symbols[e.value]; return Status();
    default: break;
  }
  int64_t acc = 0;
  AOTPACK_RETURN_IF_ERROR(eval_expr(e.args[0], symbols, &acc));
  for (size_t i = 1; i < e.args.size(); ++i) {
    int64_t b = 0;
    AOTPACK_RETURN_IF_ERROR(eval_expr(e.args[i], symbols, &b));
    switch (e.op) {
      case Expr::Op::kAdd:
        if (__builtin_add_overflow(acc, b, &acc)) return overflow(e);
        break;
      case Expr::Op::kMul:
        if (__builtin_mul_overflow(acc, b, &acc)) return overflow(e);
        break;
      case Expr::Op::kFloorDiv: {  // Python's //: rounds toward negative infinity
        if (b == 0) return invalid_argument("size expression divides by zero (\"//\")");
        if (acc == std::numeric_limits<int64_t>::min() && b == -1) return overflow(e);
        int64_t q = acc / b;
        if ((acc % b != 0) && ((acc < 0) != (b < 0))) --q;
        acc = q;
        break;
      }
      case Expr::Op::kMod: {  // Python's %: the result has the divisor's sign
        if (b == 0) return invalid_argument("size expression divides by zero (\"%\")");
        if (b == -1) {
          acc = 0;
          break;
        }
        int64_t r = acc % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        acc = r;
        break;
      }
      case Expr::Op::kMax: acc = std::max(acc, b); break;
      case Expr::Op::kMin: acc = std::min(acc, b); break;
      default: return internal_error("unknown size operator");
    }
  }
  *out = acc;
  return Status();
}

std::string expr_to_string(const Expr& e, const std::vector<std::string>& symbols) {
  switch (e.op) {
    case Expr::Op::kConst: return std::to_string(e.value);
    case Expr::Op::kSymbol:
      return e.value >= 0 && static_cast<size_t>(e.value) < symbols.size() ? json::quote(symbols[e.value]) : "?";
    default: break;
  }
  std::string out = str_cat("[", json::quote(op_name(e.op)));
  for (const Expr& a : e.args) out += ", " + expr_to_string(a, symbols);
  return out + "]";
}

bool same_expr(const Expr& a, const Expr& b) {
  if (a.op != b.op || a.value != b.value || a.args.size() != b.args.size()) return false;
  for (size_t i = 0; i < a.args.size(); ++i) {
    if (!same_expr(a.args[i], b.args[i])) return false;
  }
  return true;
}

}  // namespace aotpack
