// Size expressions (docs/package-format.md, "Size expressions"): parsed from JSON once at load, evaluated
// in int64 with overflow checks at every run.
#ifndef AOTPACK_SRC_EXPR_HPP_
#define AOTPACK_SRC_EXPR_HPP_

#include <cstdint>
#include <string>
#include <vector>

#include "json.hpp"
#include "json_reader.hpp"
#include "status.hpp"

namespace aotpack {

struct Expr {
  enum class Op { kConst, kSymbol, kAdd, kMul, kFloorDiv, kMod, kMax, kMin };
  Op op = Op::kConst;
  int64_t value = 0;  // the literal (kConst) or the symbol's index (kSymbol)
  std::vector<Expr> args;

  bool is_const() const { return op == Op::kConst; }
  bool is_symbol() const { return op == Op::kSymbol; }
};

// Parses the JSON expression at `path`: an integer, a name among `symbols`, or [op, args...].
Status parse_expr(const json::Value& v, const std::vector<std::string>& symbols, const JsonReader& reader,
                  const std::string& path, Expr* out);

// Evaluates `e` with symbol i bound to symbols[i]. Fails (INVALID_ARGUMENT) on int64 overflow or division by
// zero rather than wrapping. Allocates nothing unless it fails.
Status eval_expr(const Expr& e, const int64_t* symbols, int64_t* out);

// Whether two expressions are the same tree (the same JSON form).
bool same_expr(const Expr& a, const Expr& b);

// The expression in its JSON form, for messages.
std::string expr_to_string(const Expr& e, const std::vector<std::string>& symbols);

}  // namespace aotpack

#endif  // AOTPACK_SRC_EXPR_HPP_
