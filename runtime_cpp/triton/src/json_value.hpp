// A small JSON document model for the two JSON texts the backend handles: Triton's model configuration
// (read, then completed and written back through TRITONBACKEND_ModelSetConfig) and the package's
// manifest.json (read). Written by hand because the backend depends on nothing but aotpack's C API and the
// C++ standard library (the runtime's own JSON reader is internal to libaotpack.so, not part of its API).
// Objects keep their members' order, so a configuration is written back as Triton gave it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace aotpack_triton {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;
  static JsonValue Bool(bool value);
  static JsonValue Number(int64_t value);
  static JsonValue String(std::string value);
  static JsonValue Array();
  static JsonValue Object();

  // Parses `text`; on failure returns false with *error saying where (byte offset) and what.
  static bool Parse(const std::string& text, JsonValue* out, std::string* error);
  std::string Serialize() const;

  Kind kind() const { return kind_; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_string() const { return kind_ == Kind::kString; }
  const std::string& text() const { return text_; }  // a string's value, or a number's literal

  // An integer: a JSON number without fraction, or a string holding one (protobuf's JSON form of int64).
  bool AsInt(int64_t* out) const;

  // Arrays.
  size_t size() const { return items_.size(); }
  const JsonValue& at(size_t i) const { return items_[i].second; }
  JsonValue& at(size_t i) { return items_[i].second; }
  void Append(JsonValue value) { items_.emplace_back(std::string(), std::move(value)); }

  // Objects: the member named `key`, or nullptr.
  const JsonValue* Find(const std::string& key) const;
  JsonValue* Find(const std::string& key);
  // Sets (adding or replacing) the member named `key`.
  void Set(const std::string& key, JsonValue value);
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return items_; }

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  std::string text_;
  std::vector<std::pair<std::string, JsonValue>> items_;  // array items (empty keys) or object members
  friend class JsonParser;
};

}  // namespace aotpack_triton
