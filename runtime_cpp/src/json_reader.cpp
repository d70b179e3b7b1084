#include "json_reader.hpp"

namespace aotpack {

std::string JsonReader::join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string JsonReader::join(const std::string& path, size_t index) { return str_cat(path, "[", index, "]"); }

Status JsonReader::error(const std::string& path, const std::string& what) const {
  if (path.empty()) return data_loss(document_, ": ", what);
  return data_loss(document_, ": ", path, ": ", what);
}

Status JsonReader::wrong_type(const std::string& path, const char* expected, const json::Value& got) const {
  return error(path, str_cat("expected ", expected, ", got ", json::type_name(got.type())));
}

Status JsonReader::expect_object(const json::Value& v, const std::string& path) const {
  if (!v.is_object()) return wrong_type(path.empty() ? "(top level)" : path, "an object", v);
  return Status();
}

Status JsonReader::field(const json::Value& obj, const std::string& path, const char* key,
                         const json::Value** out) const {
  AOTPACK_RETURN_IF_ERROR(expect_object(obj, path));
  const json::Value* v = obj.find(key);
  if (!v) return error(path.empty() ? "(top level)" : path, str_cat("missing field ", quoted(key)));
  *out = v;
  return Status();
}

Status JsonReader::int_field(const json::Value& obj, const std::string& path, const char* key,
                             int64_t* out) const {
  const json::Value* v;
  AOTPACK_RETURN_IF_ERROR(field(obj, path, key, &v));
  if (!v->is_int()) return wrong_type(join(path, key), "an integer", *v);
  *out = v->as_int();
  return Status();
}

Status JsonReader::string_field(const json::Value& obj, const std::string& path, const char* key,
                                std::string* out) const {
  const json::Value* v;
  AOTPACK_RETURN_IF_ERROR(field(obj, path, key, &v));
  if (!v->is_string()) return wrong_type(join(path, key), "a string", *v);
  *out = v->as_string();
  return Status();
}

Status JsonReader::array_field(const json::Value& obj, const std::string& path, const char* key,
                               const std::vector<json::Value>** out) const {
  const json::Value* v;
  AOTPACK_RETURN_IF_ERROR(field(obj, path, key, &v));
  if (!v->is_array()) return wrong_type(join(path, key), "an array", *v);
  *out = &v->as_array();
  return Status();
}

Status JsonReader::object_field(const json::Value& obj, const std::string& path, const char* key,
                                const json::Value** out) const {
  const json::Value* v;
  AOTPACK_RETURN_IF_ERROR(field(obj, path, key, &v));
  if (!v->is_object()) return wrong_type(join(path, key), "an object", *v);
  *out = v;
  return Status();
}

}  // namespace aotpack
