// Typed access to the fields of a parsed JSON document, with the document name and JSON path in every
// error ("program.json: buffers[3].offset: expected an integer, got a string"). Errors are DATA_LOSS.
#ifndef AOTPACK_SRC_JSON_READER_HPP_
#define AOTPACK_SRC_JSON_READER_HPP_

#include <cstdint>
#include <string>
#include <vector>

#include "json.hpp"
#include "status.hpp"

namespace aotpack {

class JsonReader {
 public:
  explicit JsonReader(std::string document) : document_(std::move(document)) {}

  // "path.key", or "key" at the top level; "path[index]".
  static std::string join(const std::string& path, const std::string& key);
  static std::string join(const std::string& path, size_t index);

  // A DATA_LOSS status: "<document>: <path>: <what>".
  Status error(const std::string& path, const std::string& what) const;

  Status expect_object(const json::Value& v, const std::string& path) const;
  // Required fields of the object `obj` found at `path`.
  Status field(const json::Value& obj, const std::string& path, const char* key, const json::Value** out) const;
  Status int_field(const json::Value& obj, const std::string& path, const char* key, int64_t* out) const;
  Status string_field(const json::Value& obj, const std::string& path, const char* key, std::string* out) const;
  Status array_field(const json::Value& obj, const std::string& path, const char* key,
                     const std::vector<json::Value>** out) const;
  Status object_field(const json::Value& obj, const std::string& path, const char* key,
                      const json::Value** out) const;

 private:
  Status wrong_type(const std::string& path, const char* expected, const json::Value& got) const;

  std::string document_;
};

}  // namespace aotpack

#endif  // AOTPACK_SRC_JSON_READER_HPP_
