// Hand-written safetensors reader and writer: the runtime uses no library beyond the C++ standard library.
#include "safetensors.hpp"

#include <cstdio>
#include <string_view>

#include "dtype.hpp"
#include "json.hpp"

namespace aotpack::safetensors {
namespace {

// The safetensors reference implementation refuses larger headers too.
constexpr uint64_t kMaxHeaderSize = 100 * 1000 * 1000;

Status parse_entry(const std::string& name, const json::Value& entry, const uint8_t* area, uint64_t area_size,
                   TensorView* out) {
  std::string where = str_cat("tensor ", quoted(name));
  if (!entry.is_object()) return data_loss(where, ": header entry is ", json::type_name(entry.type()), ", expected an object");
  const json::Value* dtype = entry.find("dtype");
  const json::Value* shape = entry.find("shape");
  const json::Value* offsets = entry.find("data_offsets");
  if (!dtype || !dtype->is_string()) return data_loss(where, ": \"dtype\" is missing or not a string");
  if (!shape || !shape->is_array()) return data_loss(where, ": \"shape\" is missing or not an array");
  if (!offsets || !offsets->is_array() || offsets->as_array().size() != 2)
    return data_loss(where, ": \"data_offsets\" is missing or not an array of two integers");
  TensorView t;
  t.name = name;
  if (!dtype_from_safetensors_name(dtype->as_string(), &t.dtype))
    return unsupported(where, ": dtype ", quoted(dtype->as_string()),
                       " is not one this runtime supports (F32 F64 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
  uint64_t bytes = dtype_size(t.dtype);
  for (const json::Value& d : shape->as_array()) {
    if (!d.is_int() || d.as_int() < 0) return data_loss(where, ": shape entries must be non-negative integers");
    t.shape.push_back(d.as_int());
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d.as_int()), &bytes))
      return data_loss(where, ": shape is too large");
  }
  const json::Value& begin = offsets->as_array()[0];
  const json::Value& end = offsets->as_array()[1];
  if (!begin.is_int() || !end.is_int() || begin.as_int() < 0 || end.as_int() < begin.as_int())
    return data_loss(where, ": \"data_offsets\" must be two integers 0 <= begin <= end");
  uint64_t b = static_cast<uint64_t>(begin.as_int()), e = static_cast<uint64_t>(end.as_int());
  if (e > area_size)
    return data_loss(where, ": data_offsets [", b, ", ", e, "] run past the ", area_size,
                     "-byte data area; the file is truncated or corrupt");
  if (e - b != bytes)
    return data_loss(where, ": holds ", e - b, " bytes, but dtype ", dtype->as_string(), " and its shape need ",
                     bytes);
  t.data = area + b;
  t.size = bytes;
  *out = std::move(t);
  return Status();
}

}  // namespace

Status parse(const uint8_t* data, size_t size, std::vector<TensorView>* out) {
  if (size < 8) return data_loss("too short for a safetensors file (", size, " bytes)");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | data[i];
  if (header_size > kMaxHeaderSize || header_size > size - 8)
    return data_loss("safetensors header length ", header_size, " runs past the ", size, "-byte file");
  json::Value header;
  Status st = json::parse(std::string_view(reinterpret_cast<const char*>(data + 8), header_size), &header);
  if (!st.ok()) return st.prefixed("safetensors header");
  if (!header.is_object()) return data_loss("safetensors header is not a JSON object");
  const uint8_t* area = data + 8 + header_size;
  uint64_t area_size = size - 8 - header_size;
  std::vector<TensorView> tensors;
  for (const auto& [name, entry] : header.as_object()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return data_loss("safetensors \"__metadata__\" is not an object");
      continue;
    }
    TensorView t;
    AOTPACK_RETURN_IF_ERROR(parse_entry(name, entry, area, area_size, &t));
    tensors.push_back(std::move(t));
  }
  *out = std::move(tensors);
  return Status();
}

Status write_file(const std::string& path, const std::vector<TensorView>& tensors) {
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    if (i) header += ",";
    header += json::quote(t.name);
    header += str_cat(":{\"dtype\":\"", dtype_safetensors_name(t.dtype), "\",\"shape\":[");
    for (size_t d = 0; d < t.shape.size(); ++d) header += str_cat(d ? "," : "", t.shape[d]);
    header += str_cat("],\"data_offsets\":[", offset, ",", offset + t.size, "]}");
    offset += t.size;
  }
  header += "}";
  while (header.size() % 8) header += ' ';

  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return invalid_argument("cannot write ", path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const TensorView& t : tensors) {
    if (ok && t.size) ok = std::fwrite(t.data, 1, t.size, f) == t.size;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return invalid_argument("cannot write ", path, " (disk full?)");
  return Status();
}

}  // namespace aotpack::safetensors
