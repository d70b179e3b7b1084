#include "kernel_contracts.hpp"

#include <cstring>
#include <string_view>

#include "json.hpp"
#include "json_reader.hpp"

namespace aotpack {

Status check_table_symbols(const std::string& member, const aotpack_kernel_table_t& table, const Program& p) {
  std::string names;
  for (int32_t i = 0; i < table.num_symbols; ++i) names += str_cat(i ? ", " : "", table.symbols[i].name);
  if (static_cast<size_t>(table.num_symbols) != p.symbols.size())
    return data_loss("program.json symbols: the program has ", p.symbols.size(), " symbols, but the kernels of ",
                     member, " were generated for ", table.num_symbols, " (", names.empty() ? "none" : names, ")");
  for (size_t i = 0; i < p.symbols.size(); ++i) {
    const aotpack_kernel_symbol_t& k = table.symbols[i];
    const Symbol& s = p.symbols[i];
    if (s.name != k.name)
      return data_loss("program.json symbols[", i, "] is ", quoted(s.name), ", but the kernels of ", member,
                       " read symbol ", i, " as ", quoted(k.name), " (their symbols: ", names, ")");
    if (s.min < k.min || s.max > k.max)
      return data_loss("program.json symbols[", i, "]: ", s.name, " ranges over ", s.min, "..", s.max,
                       ", wider than the ", k.min, "..", k.max, " the kernels of ", member, " were generated for");
  }
  return Status();
}

Status kernel_contract(const std::string& member, const aotpack_kernel_entry_t& entry, const Program& p,
                       KernelContract* out) {
  KernelContract c;
  c.name = entry.name;
  JsonReader r(str_cat(member, " kernel table"));
  for (int32_t a = 0; a < entry.num_args; ++a) {
    const aotpack_kernel_arg_t& arg = entry.args[a];
    std::string path = str_cat("kernel ", entry.name, " argument ", a, " shape");
    constexpr size_t kMaxShapeText = 1 << 16;
    size_t n = strnlen(arg.shape, kMaxShapeText + 1);
    if (n > kMaxShapeText) return data_loss(member, " kernel table: ", path, " is longer than ", kMaxShapeText, " bytes");
    json::Value shape;
    AOTPACK_RETURN_IF_ERROR(json::parse(std::string_view(arg.shape, n), &shape).prefixed(str_cat(member, " kernel table: ", path)));
    if (!shape.is_array()) return data_loss(member, " kernel table: ", path, " is not a JSON array");
    ArgContract ac;
    ac.writes = arg.access == AOTPACK_ACCESS_WRITE;
    ac.dtype = static_cast<aotpack_dtype_t>(arg.dtype);
    ac.shape.resize(shape.as_array().size());
    for (size_t d = 0; d < ac.shape.size(); ++d)
      AOTPACK_RETURN_IF_ERROR(parse_expr(shape.as_array()[d], p.symbol_names, r, JsonReader::join(path, d), &ac.shape[d]));
    c.args.push_back(std::move(ac));
  }
  *out = std::move(c);
  return Status();
}

}  // namespace aotpack
