#include "program.hpp"

#include <unordered_map>

#include "dtype.hpp"
#include "json_reader.hpp"

namespace aotpack {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? ", " : "", shape[i]);
  return s + "]";
}

class ProgramParser {
 public:
  ProgramParser(const json::Value& doc, const std::vector<safetensors::TensorView>& weights)
      : doc_(doc), weights_(weights), r_("program.json") {}

  Status parse(Program* p) {
    AOTPACK_RETURN_IF_ERROR(r_.expect_object(doc_, ""));
    AOTPACK_RETURN_IF_ERROR(r_.int_field(doc_, "", "arena_bytes", &p->arena_bytes));
    if (p->arena_bytes < 0) return r_.error("arena_bytes", "must not be negative");
    AOTPACK_RETURN_IF_ERROR(parse_symbols(p));
    AOTPACK_RETURN_IF_ERROR(parse_ports("inputs", &p->inputs));
    AOTPACK_RETURN_IF_ERROR(parse_ports("outputs", &p->outputs));
    AOTPACK_RETURN_IF_ERROR(parse_buffers(p));
    AOTPACK_RETURN_IF_ERROR(link_ports(p, "inputs", BufferKind::kInput, &p->inputs));
    AOTPACK_RETURN_IF_ERROR(link_ports(p, "outputs", BufferKind::kOutput, &p->outputs));
    AOTPACK_RETURN_IF_ERROR(bind_symbols(p));
    AOTPACK_RETURN_IF_ERROR(parse_steps(p));
    return Status();
  }

 private:
  Status parse_symbols(Program* p) {
    const std::vector<json::Value>* items;
    AOTPACK_RETURN_IF_ERROR(r_.array_field(doc_, "", "symbols", &items));
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = JsonReader::join("symbols", i);
      const json::Value& item = (*items)[i];
      Symbol s;
      AOTPACK_RETURN_IF_ERROR(r_.string_field(item, path, "name", &s.name));
      AOTPACK_RETURN_IF_ERROR(r_.int_field(item, path, "min", &s.min));
      AOTPACK_RETURN_IF_ERROR(r_.int_field(item, path, "max", &s.max));
      if (s.name.empty()) return r_.error(path, "empty symbol name");
      for (const Symbol& other : p->symbols) {
        if (other.name == s.name) return r_.error(path, str_cat("symbol ", quoted(s.name), " is declared twice"));
      }
      if (s.min < 0 || s.min > s.max)
        return r_.error(path, str_cat("symbol ", quoted(s.name), " has range ", s.min, "..", s.max,
                                      "; expected 0 <= min <= max"));
      p->symbol_names.push_back(s.name);
      p->symbols.push_back(std::move(s));
    }
    return Status();
  }

  Status parse_ports(const char* key, std::vector<Port>* ports) {
    const std::vector<json::Value>* items;
    AOTPACK_RETURN_IF_ERROR(r_.array_field(doc_, "", key, &items));
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = JsonReader::join(key, i);
      Port port;
      int64_t buffer_id;
      AOTPACK_RETURN_IF_ERROR(r_.string_field((*items)[i], path, "name", &port.name));
      AOTPACK_RETURN_IF_ERROR(r_.int_field((*items)[i], path, "buffer", &buffer_id));
      for (const Port& other : *ports) {
        if (other.name == port.name) return r_.error(path, str_cat("name ", quoted(port.name), " is used twice"));
      }
      port_buffer_ids_[key].push_back(buffer_id);
      ports->push_back(std::move(port));
    }
    return Status();
  }

  Status parse_shape(const json::Value& buffer, const std::string& path, const Program& p, Buffer* b) {
    const std::vector<json::Value>* dims;
    AOTPACK_RETURN_IF_ERROR(r_.array_field(buffer, path, "shape", &dims));
    if (dims->size() > AOTPACK_MAX_RANK)
      return r_.error(JsonReader::join(path, "shape"),
                      str_cat("rank ", dims->size(), " is more than this runtime's maximum, ", AOTPACK_MAX_RANK));
    b->shape.resize(dims->size());
    for (size_t d = 0; d < dims->size(); ++d) {
      std::string dim_path = JsonReader::join(JsonReader::join(path, "shape"), d);
      AOTPACK_RETURN_IF_ERROR(parse_expr((*dims)[d], p.symbol_names, r_, dim_path, &b->shape[d]));
      const Expr& e = b->shape[d];
      if (e.is_const() && e.value < 0) return r_.error(dim_path, "negative size");
      if (b->kind == BufferKind::kInput && !e.is_const() && !e.is_symbol())
        return r_.error(dim_path, "an input's dim must be an integer or a symbol name, not an expression");
      if (b->kind == BufferKind::kWeight && !e.is_const())
        return r_.error(dim_path, "a weight's dim must be an integer");
    }
    return Status();
  }

  Status parse_buffers(Program* p) {
    const std::vector<json::Value>* items;
    AOTPACK_RETURN_IF_ERROR(r_.array_field(doc_, "", "buffers", &items));
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = JsonReader::join("buffers", i);
      const json::Value& item = (*items)[i];
      Buffer b;
      std::string kind, dtype;
      AOTPACK_RETURN_IF_ERROR(r_.int_field(item, path, "id", &b.id));
      if (b.id < 0) return r_.error(JsonReader::join(path, "id"), "must not be negative");
      if (!index_of_id_.emplace(b.id, i).second)
        return r_.error(JsonReader::join(path, "id"), str_cat("buffer id ", b.id, " is used twice"));
      AOTPACK_RETURN_IF_ERROR(r_.string_field(item, path, "kind", &kind));
      AOTPACK_RETURN_IF_ERROR(r_.string_field(item, path, "dtype", &dtype));
      if (!dtype_from_name(dtype, &b.dtype))
        return r_.error(JsonReader::join(path, "dtype"), str_cat("unknown dtype ", quoted(dtype)));
      if (kind == "input") {
        b.kind = BufferKind::kInput;
        AOTPACK_RETURN_IF_ERROR(port_index(item, path, "input", p->inputs.size(), &b.port));
      } else if (kind == "weight") {
        b.kind = BufferKind::kWeight;
      } else if (kind == "arena") {
        b.kind = BufferKind::kArena;
      } else if (kind == "output") {
        b.kind = BufferKind::kOutput;
        AOTPACK_RETURN_IF_ERROR(port_index(item, path, "output", p->outputs.size(), &b.port));
      } else {
        return r_.error(JsonReader::join(path, "kind"),
                        str_cat("unknown buffer kind ", quoted(kind), " (known: input weight arena output)"));
      }
      AOTPACK_RETURN_IF_ERROR(parse_shape(item, path, *p, &b));
      if (b.kind == BufferKind::kWeight) AOTPACK_RETURN_IF_ERROR(check_weight(item, path, &b));
      if (b.kind == BufferKind::kArena || b.kind == BufferKind::kOutput) {
        AOTPACK_RETURN_IF_ERROR(r_.int_field(item, path, "max_bytes", &b.max_bytes));
        if (b.max_bytes < 0) return r_.error(JsonReader::join(path, "max_bytes"), "must not be negative");
      }
      if (b.kind == BufferKind::kArena) {
        AOTPACK_RETURN_IF_ERROR(r_.int_field(item, path, "offset", &b.offset));
        if (b.offset < 0 || b.offset % kArenaAlignment != 0)
          return r_.error(JsonReader::join(path, "offset"),
                          str_cat("buffer ", b.id, ": arena offset ", b.offset, " is not a non-negative multiple of ",
                                  kArenaAlignment));
        if (b.offset > p->arena_bytes || b.max_bytes > p->arena_bytes - b.offset)
          return r_.error(path, str_cat("buffer ", b.id, ": offset ", b.offset, " + max_bytes ", b.max_bytes,
                                        " is past the end of the arena (arena_bytes ", p->arena_bytes, ")"));
      }
      p->buffers.push_back(std::move(b));
    }
    return Status();
  }

  Status port_index(const json::Value& item, const std::string& path, const char* key, size_t count, size_t* out) {
    int64_t index;
    AOTPACK_RETURN_IF_ERROR(r_.int_field(item, path, key, &index));
    if (index < 0 || static_cast<uint64_t>(index) >= count)
      return r_.error(JsonReader::join(path, key),
                      str_cat(key, " index ", index, " is out of range (the program has ", count, " ", key, "s)"));
    *out = static_cast<size_t>(index);
    return Status();
  }

  Status check_weight(const json::Value& item, const std::string& path, Buffer* b) {
    std::string name;
    AOTPACK_RETURN_IF_ERROR(r_.string_field(item, path, "weight", &name));
    const safetensors::TensorView* t = nullptr;
    for (size_t w = 0; w < weights_.size(); ++w) {
      if (weights_[w].name == name) {
        t = &weights_[w];
        b->weight = w;
      }
    }
    if (!t)
      return r_.error(JsonReader::join(path, "weight"),
                      str_cat("weight ", quoted(name), " is not in weights.safetensors"));
    std::vector<int64_t> shape;
    for (const Expr& e : b->shape) shape.push_back(e.value);
    if (t->dtype != b->dtype || t->shape != shape)
      return r_.error(path, str_cat("weight ", quoted(name), " is ", dtype_name(t->dtype), " ", shape_to_string(t->shape),
                                    " in weights.safetensors, but the program expects ", dtype_name(b->dtype), " ",
                                    shape_to_string(shape)));
    return Status();
  }

  Status link_ports(Program* p, const char* key, BufferKind kind, std::vector<Port>* ports) {
    const std::vector<int64_t>& ids = port_buffer_ids_[key];
    for (size_t i = 0; i < ports->size(); ++i) {
      std::string path = JsonReader::join(JsonReader::join(key, i), "buffer");
      auto it = index_of_id_.find(ids[i]);
      if (it == index_of_id_.end()) return r_.error(path, str_cat("buffer id ", ids[i], " does not exist"));
      const Buffer& b = p->buffers[it->second];
      if (b.kind != kind || b.port != i)
        return r_.error(path, str_cat("buffer ", ids[i], " is not the ", buffer_kind_name(kind), " buffer of ",
                                      key, "[", i, "]"));
      (*ports)[i].buffer = it->second;
    }
    // Every input or output buffer must be the one its port names, so that each port has exactly one buffer.
    for (const Buffer& b : p->buffers) {
      if (b.kind == kind && (*ports)[b.port].buffer != index_of_id_[b.id])
        return r_.error("buffers", str_cat("buffer ", b.id, " claims to be ", key, "[", b.port, "], which uses buffer ",
                                           p->buffers[(*ports)[b.port].buffer].id));
    }
    return Status();
  }

  Status bind_symbols(Program* p) {
    for (size_t s = 0; s < p->symbols.size(); ++s) {
      bool bound = false;
      for (size_t i = 0; i < p->inputs.size() && !bound; ++i) {
        const Buffer& b = p->buffers[p->inputs[i].buffer];
        for (size_t d = 0; d < b.shape.size() && !bound; ++d) {
          if (b.shape[d].is_symbol() && b.shape[d].value == static_cast<int64_t>(s)) {
            p->symbols[s].input = i;
            p->symbols[s].dim = d;
            bound = true;
          }
        }
      }
      if (!bound)
        return r_.error(JsonReader::join("symbols", s),
                        str_cat("symbol ", quoted(p->symbols[s].name),
                                " is not a whole dim of any input, so a run could not bind it"));
    }
    return Status();
  }

  Status parse_steps(Program* p) {
    const std::vector<json::Value>* items;
    AOTPACK_RETURN_IF_ERROR(r_.array_field(doc_, "", "steps", &items));
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = JsonReader::join("steps", i);
      Step step;
      const std::vector<json::Value>* args;
      AOTPACK_RETURN_IF_ERROR(r_.string_field((*items)[i], path, "kernel", &step.kernel));
      if (!is_identifier(step.kernel))
        return r_.error(JsonReader::join(path, "kernel"), str_cat(quoted(step.kernel), " is not a C identifier"));
      AOTPACK_RETURN_IF_ERROR(r_.array_field((*items)[i], path, "args", &args));
      for (size_t a = 0; a < args->size(); ++a) {
        std::string arg_path = JsonReader::join(JsonReader::join(path, "args"), a);
        const json::Value& arg = (*args)[a];
        if (!arg.is_int()) return r_.error(arg_path, str_cat("expected a buffer id, got ", json::type_name(arg.type())));
        auto it = index_of_id_.find(arg.as_int());
        if (it == index_of_id_.end())
          return r_.error(arg_path, str_cat("buffer id ", arg.as_int(), " does not exist"));
        step.args.push_back(it->second);
      }
      p->steps.push_back(std::move(step));
    }
    return Status();
  }

  const json::Value& doc_;
  const std::vector<safetensors::TensorView>& weights_;
  JsonReader r_;
  std::unordered_map<int64_t, size_t> index_of_id_;
  std::unordered_map<std::string, std::vector<int64_t>> port_buffer_ids_;
};

}  // namespace

const char* buffer_kind_name(BufferKind kind) {
  switch (kind) {
    case BufferKind::kInput: return "input";
    case BufferKind::kWeight: return "weight";
    case BufferKind::kArena: return "arena";
    case BufferKind::kOutput: return "output";
  }
  return "unknown";
}

Status parse_program(const json::Value& doc, const std::vector<safetensors::TensorView>& weights, Program* out) {
  Program p;
  AOTPACK_RETURN_IF_ERROR(ProgramParser(doc, weights).parse(&p));
  *out = std::move(p);
  return Status();
}

}  // namespace aotpack
