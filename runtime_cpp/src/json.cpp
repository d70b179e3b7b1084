// Hand-written strict JSON parser: the runtime uses no library beyond the C++ standard library.
#include "json.hpp"

#include <charconv>
#include <cmath>

namespace aotpack::json {

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.int_ = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.type_ = Type::kDouble;
  v.double_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.string_ = std::move(s);
  return v;
}
Value Value::array(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kArray;
  v.array_ = std::move(items);
  return v;
}
Value Value::object(Object members) {
  Value v;
  v.type_ = Type::kObject;
  v.object_ = std::move(members);
  return v;
}

const Value* Value::find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [name, value] : object_) {
    if (name == key) return &value;
  }
  return nullptr;
}

bool Value::operator==(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_int() && other.is_int()) return int_ == other.int_;
    return as_double() == other.as_double();
  }
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kNull: return true;
    case Type::kBool: return bool_ == other.bool_;
    case Type::kString: return string_ == other.string_;
    case Type::kArray: return array_ == other.array_;
    case Type::kObject: return object_ == other.object_;
    default: return false;
  }
}

const char* type_name(Value::Type type) {
  switch (type) {
    case Value::Type::kNull: return "null";
    case Value::Type::kBool: return "a boolean";
    case Value::Type::kInt: return "an integer";
    case Value::Type::kDouble: return "a number";
    case Value::Type::kString: return "a string";
    case Value::Type::kArray: return "an array";
    case Value::Type::kObject: return "an object";
  }
  return "unknown";
}

namespace {

constexpr int kMaxDepth = 128;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Status parse_document(Value* out) {
    skip_space();
    AOTPACK_RETURN_IF_ERROR(parse_value(out, 0));
    skip_space();
    if (pos_ != text_.size()) return error("unexpected text after the JSON value");
    return Status();
  }

 private:
  Status error(std::string_view what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return data_loss("invalid JSON at line ", line, " column ", column, ": ", what);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status parse_value(Value* out, int depth) {
    if (depth > kMaxDepth) return error("nested more than 128 levels deep");
    if (at_end()) return error("unexpected end of text, expected a value");
    char c = peek();
    if (c == '{') return parse_object(out, depth);
    if (c == '[') return parse_array(out, depth);
    if (c == '"') {
      std::string s;
      AOTPACK_RETURN_IF_ERROR(parse_string(&s));
      *out = Value::string(std::move(s));
      return Status();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
    if (consume_literal("true")) {
      *out = Value::boolean(true);
      return Status();
    }
    if (consume_literal("false")) {
      *out = Value::boolean(false);
      return Status();
    }
    if (consume_literal("null")) {
      *out = Value();
      return Status();
    }
    return error(str_cat("unexpected character '", c, "', expected a value"));
  }

  Status parse_object(Value* out, int depth) {
    ++pos_;  // '{'
    Value::Object members;
    skip_space();
    if (peek() == '}') {
      ++pos_;
      *out = Value::object(std::move(members));
      return Status();
    }
    for (;;) {
      skip_space();
      if (peek() != '"') return error("expected a string key");
      std::string key;
      AOTPACK_RETURN_IF_ERROR(parse_string(&key));
      for (const auto& member : members) {
        if (member.first == key) return error(str_cat("duplicate key ", quote(key)));
      }
      skip_space();
      if (peek() != ':') return error("expected ':' after an object key");
      ++pos_;
      skip_space();
      Value value;
      AOTPACK_RETURN_IF_ERROR(parse_value(&value, depth + 1));
      members.emplace_back(std::move(key), std::move(value));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        *out = Value::object(std::move(members));
        return Status();
      }
      return error("expected ',' or '}' in an object");
    }
  }

  Status parse_array(Value* out, int depth) {
    ++pos_;  // '['
    std::vector<Value> items;
    skip_space();
    if (peek() == ']') {
      ++pos_;
      *out = Value::array(std::move(items));
      return Status();
    }
    for (;;) {
      skip_space();
      Value value;
      AOTPACK_RETURN_IF_ERROR(parse_value(&value, depth + 1));
      items.push_back(std::move(value));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        *out = Value::array(std::move(items));
        return Status();
      }
      return error("expected ',' or ']' in an array");
    }
  }

  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  Status parse_hex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int d = hex_digit(text_[pos_ + i]);
      if (d < 0) return error("invalid \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    pos_ += 4;
    *out = v;
    return Status();
  }

  static void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Status parse_string(std::string* out) {
    ++pos_;  // opening quote
    for (;;) {
      if (at_end()) return error("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return Status();
      }
      if (static_cast<unsigned char>(c) < 0x20) return error("control character in a string");
      if (static_cast<unsigned char>(c) >= 0x80) {
        size_t n = utf8_sequence_length(text_.substr(pos_));
        if (n == 0) return error("invalid UTF-8 in a string");
        out->append(text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      if (c != '\\') {
        *out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) return error("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          AOTPACK_RETURN_IF_ERROR(parse_hex4(&cp));
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (!consume_literal("\\u")) return error("unpaired surrogate in a \\u escape");
            AOTPACK_RETURN_IF_ERROR(parse_hex4(&low));
            if (low < 0xDC00 || low > 0xDFFF) return error("unpaired surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return error("unpaired surrogate in a \\u escape");
          }
          append_utf8(cp, out);
          break;
        }
        default: return error(str_cat("invalid escape '\\", e, "'"));
      }
    }
  }

  // The length of the well-formed UTF-8 sequence `s` starts with (RFC 3629: no overlong forms, no
  // surrogates, nothing above U+10FFFF), or 0.
  static size_t utf8_sequence_length(std::string_view s) {
    auto byte = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
    auto cont = [&](size_t i) { return (byte(i) & 0xC0) == 0x80; };
    unsigned b0 = byte(0), b1 = byte(1);
    if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
    if (b0 >= 0xE0 && b0 <= 0xEF) {
      if (!cont(1) || !cont(2)) return 0;
      if (b0 == 0xE0 && b1 < 0xA0) return 0;  // overlong
      if (b0 == 0xED && b1 >= 0xA0) return 0;  // surrogate
      return 3;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) return 0;
      if (b0 == 0xF0 && b1 < 0x90) return 0;  // overlong
      if (b0 == 0xF4 && b1 >= 0x90) return 0;  // above U+10FFFF
      return 4;
    }
    return 0;
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  Status parse_number(Value* out) {
    size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (is_digit(peek())) {
      while (is_digit(peek())) ++pos_;
    } else {
      return error("invalid number");
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!is_digit(peek())) return error("invalid number: expected a digit after '.'");
      while (is_digit(peek())) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) return error("invalid number: expected a digit in the exponent");
      while (is_digit(peek())) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t i = 0;
      auto [ptr, ec] = std::from_chars(first, last, i);
      if (ec == std::errc() && ptr == last) {
        *out = Value::integer(i);
        return Status();
      }
      // Too large for int64: keep it as a double, as most JSON readers do.
    }
    double d = 0;
    auto [ptr, ec] = std::from_chars(first, last, d);
    if (ptr != last || (ec != std::errc() && ec != std::errc::result_out_of_range) || !std::isfinite(d)) {
      pos_ = start;
      return error("number out of range");
    }
    *out = Value::number(d);
    return Status();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Status parse(std::string_view text, Value* out) {
  Parser parser(text);
  Value value;
  AOTPACK_RETURN_IF_ERROR(parser.parse_document(&value));
  *out = std::move(value);
  return Status();
}

std::string quote(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 15];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace aotpack::json
