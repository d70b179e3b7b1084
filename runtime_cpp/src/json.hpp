// A small strict JSON parser (RFC 8259) and string quoting for writers. Hand-written because the runtime
// depends on nothing beyond the C++ standard library. Strict: no comments, no trailing commas, no NaN,
// no duplicate keys, no control characters in strings, nesting at most 128 deep.
#ifndef AOTPACK_SRC_JSON_HPP_
#define AOTPACK_SRC_JSON_HPP_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "status.hpp"

namespace aotpack::json {

class Value {
 public:
  enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };
  using Object = std::vector<std::pair<std::string, Value>>;  // in document order

  Value() = default;
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value array(std::vector<Value> items);
  static Value object(Object members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }  // a number written without fraction or exponent
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kDouble; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  double as_double() const { return type_ == Type::kInt ? static_cast<double>(int_) : double_; }
  const std::string& as_string() const { return string_; }
  const std::vector<Value>& as_array() const { return array_; }
  const Object& as_object() const { return object_; }

  // The member named `key` of an object; nullptr when absent or when this is not an object.
  const Value* find(std::string_view key) const;

  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::vector<Value> array_;
  Object object_;
};

const char* type_name(Value::Type type);  // "an object", "a string", ... for messages

// Parses `text` as one JSON document. Errors are DATA_LOSS and say "line L column C: what".
Status parse(std::string_view text, Value* out);

// `s` as a JSON string literal, quotes included.
std::string quote(std::string_view s);

}  // namespace aotpack::json

#endif  // AOTPACK_SRC_JSON_HPP_
