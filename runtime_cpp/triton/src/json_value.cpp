#include "json_value.hpp"

#include <cerrno>
#include <cstdlib>

namespace aotpack_triton {

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = value;
  v.text_ = value ? "true" : "false";
  return v;
}

JsonValue JsonValue::Number(int64_t value) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.text_ = std::to_string(value);
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.text_ = std::move(value);
  return v;
}

JsonValue JsonValue::Array() {
  JsonValue v;
  v.kind_ = Kind::kArray;
  return v;
}

JsonValue JsonValue::Object() {
  JsonValue v;
  v.kind_ = Kind::kObject;
  return v;
}

bool JsonValue::AsInt(int64_t* out) const {
  if (kind_ != Kind::kNumber && kind_ != Kind::kString) return false;
  if (text_.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text_.c_str(), &end, 10);
  if (errno != 0 || end != text_.c_str() + text_.size()) return false;
  *out = static_cast<int64_t>(value);
  return true;
}

const JsonValue* JsonValue::Find(const std::string& key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (const auto& member : items_) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

JsonValue* JsonValue::Find(const std::string& key) {
  return const_cast<JsonValue*>(static_cast<const JsonValue*>(this)->Find(key));
}

void JsonValue::Set(const std::string& key, JsonValue value) {
  if (JsonValue* existing = Find(key)) {
    *existing = std::move(value);
  } else {
    items_.emplace_back(key, std::move(value));
  }
}

namespace {

void AppendQuoted(const std::string& s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(static_cast<char>(c));  // UTF-8 passes through as is
        }
    }
  }
  out->push_back('"');
}

void SerializeTo(const JsonValue& v, std::string* out) {
  switch (v.kind()) {
    case JsonValue::Kind::kNull: *out += "null"; break;
    case JsonValue::Kind::kBool: *out += v.text(); break;
    case JsonValue::Kind::kNumber: *out += v.text(); break;
    case JsonValue::Kind::kString: AppendQuoted(v.text(), out); break;
    case JsonValue::Kind::kArray:
      out->push_back('[');
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out->push_back(',');
        SerializeTo(v.at(i), out);
      }
      out->push_back(']');
      break;
    case JsonValue::Kind::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& member : v.members()) {
        if (!first) out->push_back(',');
        first = false;
        AppendQuoted(member.first, out);
        out->push_back(':');
        SerializeTo(member.second, out);
      }
      out->push_back('}');
      break;
    }
  }
}

}  // namespace

std::string JsonValue::Serialize() const {
  std::string out;
  SerializeTo(*this, &out);
  return out;
}

// Recursive descent over the RFC 8259 grammar, with a depth limit so a hostile text cannot overflow the stack.
class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}

  bool Run(JsonValue* out, std::string* error) {
    bool ok = ParseValue(out, 0);
    if (ok) {
      SkipSpace();
      if (pos_ != s_.size()) ok = Fail("trailing characters after the JSON value");
    }
    if (!ok) *error = "JSON at byte " + std::to_string(pos_) + ": " + error_;
    return ok;
  }

 private:
  static constexpr int kMaxDepth = 256;

  bool Fail(const std::string& what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool Literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return Fail(std::string("expected ") + word);
    pos_ += n;
    return true;
  }

  bool ParseValue(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested deeper than 256 levels");
    SkipSpace();
    if (pos_ >= s_.size()) return Fail("unexpected end of text");
    char c = s_[pos_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out->kind_ = JsonValue::Kind::kString;
      return ParseString(&out->text_);
    }
    if (c == 't' || c == 'f') {
      out->kind_ = JsonValue::Kind::kBool;
      out->bool_ = c == 't';
      out->text_ = c == 't' ? "true" : "false";
      return Literal(out->text_.c_str());
    }
    if (c == 'n') {
      out->kind_ = JsonValue::Kind::kNull;
      return Literal("null");
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    return Fail(std::string("unexpected character '") + c + "'");
  }

  bool ParseNumber(JsonValue* out) {
    size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (!digits()) return Fail("a number needs digits");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Fail("a fraction needs digits");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return Fail("an exponent needs digits");
    }
    out->kind_ = JsonValue::Kind::kNumber;
    out->text_ = s_.substr(start, pos_ - start);
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Fail("a \\u escape needs 4 hex digits");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= h - '0';
      else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
      else return Fail("a \\u escape needs 4 hex digits");
    }
    *out = v;
    return true;
  }

  bool ParseString(std::string* out) {
    ++pos_;  // the opening quote
    out->clear();
    while (true) {
      if (pos_ >= s_.size()) return Fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return Fail("a control character inside a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            uint32_t low;
            if (s_.compare(pos_, 2, "\\u") != 0) return Fail("a lone high surrogate");
            pos_ += 2;
            if (!Hex4(&low)) return false;
            if (low < 0xDC00 || low >= 0xE000) return Fail("a bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default: return Fail(std::string("unknown escape \\") + e);
      }
    }
  }

  bool ParseArray(JsonValue* out, int depth) {
    ++pos_;
    out->kind_ = JsonValue::Kind::kArray;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      JsonValue item;
      if (!ParseValue(&item, depth + 1)) return false;
      out->items_.emplace_back(std::string(), std::move(item));
      SkipSpace();
      if (pos_ >= s_.size()) return Fail("unterminated array");
      char c = s_[pos_++];
      if (c == ']') return true;
      if (c != ',') return Fail("expected ',' or ']' in an array");
    }
  }

  bool ParseObject(JsonValue* out, int depth) {
    ++pos_;
    out->kind_ = JsonValue::Kind::kObject;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Fail("expected a member name");
      std::string key;
      if (!ParseString(&key)) return false;
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Fail("expected ':' after a member name");
      ++pos_;
      JsonValue value;
      if (!ParseValue(&value, depth + 1)) return false;
      out->items_.emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (pos_ >= s_.size()) return Fail("unterminated object");
      char c = s_[pos_++];
      if (c == '}') return true;
      if (c != ',') return Fail("expected ',' or '}' in an object");
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

bool JsonValue::Parse(const std::string& text, JsonValue* out, std::string* error) {
  *out = JsonValue();
  return JsonParser(text).Run(out, error);
}

}  // namespace aotpack_triton
