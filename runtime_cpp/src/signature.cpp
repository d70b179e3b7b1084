#include "signature.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "json.hpp"
#include "libcrypto.hpp"
#include "sha256.hpp"

namespace aotpack {
namespace {

constexpr const char* kPayloadType = "application/vnd.in-toto+json";
constexpr const char* kStatementType = "https://in-toto.io/Statement/v1";
constexpr const char* kPredicateType = "https://model_signing/signature/v1.0";

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

bool is_hex_digest(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void append_hex_bytes(const std::string& hex, std::string* out) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out->push_back(static_cast<char>(nibble(hex[i]) << 4 | nibble(hex[i + 1])));
}

// A field of an object, of the expected type; DATA_LOSS naming it (by its JSON path) otherwise.
Status field(const json::Value& object, const std::string& where, const char* name, json::Value::Type type,
             const json::Value** out) {
  const json::Value* v = object.find(name);
  std::string path = where.empty() ? std::string(name) : where + "." + name;
  if (!v) return data_loss(path, " is missing");
  if (v->type() != type)
    return data_loss(path, " is ", json::type_name(v->type()), ", expected ", json::type_name(type));
  *out = v;
  return Status();
}

Status string_field(const json::Value& object, const std::string& where, const char* name, std::string* out) {
  const json::Value* v;
  AOTPACK_RETURN_IF_ERROR(field(object, where, name, json::Value::Type::kString, &v));
  *out = v->as_string();
  return Status();
}

// The statement's resources, name -> hex sha256, and its subject's root digest checked against them.
Status read_statement(const json::Value& statement, std::map<std::string, std::string>* signed_digests) {
  if (!statement.is_object()) return data_loss("the DSSE payload is ", json::type_name(statement.type()), ", expected an in-toto statement object");
  std::string type, predicate_type;
  AOTPACK_RETURN_IF_ERROR(string_field(statement, "payload", "_type", &type));
  if (type != kStatementType)
    return data_loss("payload._type is ", quoted(type), ", expected ", quoted(kStatementType));
  AOTPACK_RETURN_IF_ERROR(string_field(statement, "payload", "predicateType", &predicate_type));
  if (predicate_type != kPredicateType)
    return data_loss("payload.predicateType is ", quoted(predicate_type), ", expected ", quoted(kPredicateType),
                     " (OpenSSF Model Signing v1.0; re-sign with `aotpack sign`)");
  const json::Value *subjects, *predicate, *serialization, *resources;
  AOTPACK_RETURN_IF_ERROR(field(statement, "payload", "subject", json::Value::Type::kArray, &subjects));
  if (subjects->as_array().size() != 1)
    return data_loss("payload.subject has ", subjects->as_array().size(), " entries, expected 1");
  const json::Value& subject = subjects->as_array()[0];
  if (!subject.is_object()) return data_loss("payload.subject[0] is ", json::type_name(subject.type()), ", expected an object");
  const json::Value* subject_digest;
  std::string root;
  AOTPACK_RETURN_IF_ERROR(field(subject, "payload.subject[0]", "digest", json::Value::Type::kObject, &subject_digest));
  AOTPACK_RETURN_IF_ERROR(string_field(*subject_digest, "payload.subject[0].digest", "sha256", &root));
  AOTPACK_RETURN_IF_ERROR(field(statement, "payload", "predicate", json::Value::Type::kObject, &predicate));
  AOTPACK_RETURN_IF_ERROR(
      field(*predicate, "payload.predicate", "serialization", json::Value::Type::kObject, &serialization));
  std::string method, hash_type;
  AOTPACK_RETURN_IF_ERROR(string_field(*serialization, "payload.predicate.serialization", "method", &method));
  AOTPACK_RETURN_IF_ERROR(string_field(*serialization, "payload.predicate.serialization", "hash_type", &hash_type));
  if (method != "files" || hash_type != "sha256")
    return unsupported("the signature hashes the model as ", quoted(method), " with ", quoted(hash_type),
                       "; the runtime verifies \"files\" with \"sha256\", what `aotpack sign` writes");
  AOTPACK_RETURN_IF_ERROR(field(*predicate, "payload.predicate", "resources", json::Value::Type::kArray, &resources));
  std::string concatenated;
  for (size_t i = 0; i < resources->as_array().size(); ++i) {
    const json::Value& r = resources->as_array()[i];
    std::string where = str_cat("payload.predicate.resources[", i, "]");
    if (!r.is_object()) return data_loss(where, " is ", json::type_name(r.type()), ", expected an object");
    std::string name, algorithm, digest;
    AOTPACK_RETURN_IF_ERROR(string_field(r, where, "name", &name));
    AOTPACK_RETURN_IF_ERROR(string_field(r, where, "algorithm", &algorithm));
    AOTPACK_RETURN_IF_ERROR(string_field(r, where, "digest", &digest));
    if (algorithm != "sha256")
      return unsupported(where, " (", quoted(name), ") is hashed with ", quoted(algorithm), ", not sha256");
    if (!is_hex_digest(digest))
      return data_loss(where, " (", quoted(name), "): digest is not 64 lowercase hex digits");
    if (!signed_digests->emplace(name, digest).second)
      return data_loss(where, ": member ", name, " is listed twice");
    append_hex_bytes(digest, &concatenated);
  }
  // model-signing's root digest: the sha256 of the resources' digests, in order.
  std::string computed = sha256_hex(reinterpret_cast<const uint8_t*>(concatenated.data()), concatenated.size());
  if (root != computed)
    return data_loss("payload.subject[0].digest.sha256 is ", quoted(root), ", but the listed resources hash to ",
                     quoted(computed), " (the statement is inconsistent)");
  return Status();
}

// ECDSA (DER) `sig` over `message` with the PEM public key.
Status verify_ecdsa(const TrustedKey& key, const std::string& sig, const std::string& message) {
  const crypto::Library* c;
  AOTPACK_RETURN_IF_ERROR(crypto::library(&c));
  if (key.pem.size() > static_cast<size_t>(INT_MAX)) return invalid_argument(key.where, " is too large");
  c->ERR_clear_error();
  crypto::Bio* bio = c->BIO_new_mem_buf(key.pem.data(), static_cast<int>(key.pem.size()));
  if (!bio) return resource_exhausted("out of memory reading ", key.where);
  crypto::Pkey* pkey = c->PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  c->BIO_free(bio);
  if (!pkey) {
    c->ERR_clear_error();
    return invalid_argument(key.where, " is not a PEM public key (\"-----BEGIN PUBLIC KEY-----\", what "
                            "`openssl ec -in key.pem -pubout` writes)");
  }
  std::unique_ptr<crypto::Pkey, void (*)(crypto::Pkey*)> owned(pkey, c->EVP_PKEY_free);
  if (c->EVP_PKEY_id(pkey) != crypto::kPkeyEc)
    return unsupported(key.where, " is not an elliptic-curve key; model-signing signs with ECDSA keys "
                       "(P-256, P-384 or P-521)");
  const crypto::Md* md = nullptr;
  int bits = c->EVP_PKEY_bits(pkey);
  if (bits == 256) md = c->EVP_sha256();
  else if (bits == 384) md = c->EVP_sha384();
  else if (bits == 521) md = c->EVP_sha512();
  else return unsupported(key.where, " is a ", bits, "-bit curve; model-signing signs with P-256, P-384 or P-521");
  std::unique_ptr<crypto::MdCtx, void (*)(crypto::MdCtx*)> ctx(c->EVP_MD_CTX_new(), c->EVP_MD_CTX_free);
  if (!ctx || !md) return resource_exhausted("out of memory verifying the signature");
  int ok = c->EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, pkey);
  if (ok == 1)
    ok = c->EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                             reinterpret_cast<const unsigned char*>(message.data()), message.size());
  c->ERR_clear_error();
  if (ok != 1)
    return data_loss("the signature does not verify with ", key.where,
                     " (signed with another key, or the signature file was changed)");
  return Status();
}

}  // namespace

bool base64_decode(std::string_view in, std::string* out) {
  out->clear();
  size_t n = in.size();
  while (n > 0 && in[n - 1] == '=') --n;
  if (in.size() - n > 2 || n % 4 == 1) return false;
  if (in.size() != n && in.size() % 4 != 0) return false;  // padding, when present, completes the last quad
  out->reserve(n / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    int v = base64_value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return (acc & ((1u << bits) - 1)) == 0;  // no stray bits in the last character
}

std::string dsse_pae(std::string_view payload_type, std::string_view payload) {
  return str_cat("DSSEv1 ", payload_type.size(), " ", payload_type, " ", payload.size(), " ", payload);
}

Status read_small_file(const std::string& path, size_t max_bytes, const char* what, std::string* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found(what, " ", path, " does not exist");
    return invalid_argument("cannot read ", what, " ", path, ": ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return invalid_argument(what, " ", path, " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return invalid_argument(what, " ", path, " is ", st.st_size, " bytes, more than the ", max_bytes, " allowed");
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return invalid_argument("cannot read ", what, " ", path, ": ", std::strerror(errno));
  out->assign(static_cast<size_t>(st.st_size), '\0');
  size_t got = out->empty() ? 0 : std::fread(&(*out)[0], 1, out->size(), f);
  char extra;
  bool longer = std::fread(&extra, 1, 1, f) == 1;  // grew since stat
  std::fclose(f);
  if (got != out->size() || longer) return invalid_argument("cannot read ", what, " ", path, " (it changed while read)");
  return Status();
}

Status verify_package_signature(const TrustedKey& key, const std::string& signature_path, std::string_view bundle,
                                const std::vector<SignedMember>& members,
                                std::map<std::string, std::string>* sha256_by_member) {
  const std::string where = "signature " + signature_path;
  json::Value doc;
  Status st = json::parse(bundle, &doc);
  if (!st.ok()) return data_loss(where, ": not a Sigstore bundle (", st.message(), ")");
  if (!doc.is_object()) return data_loss(where, ": not a Sigstore bundle (", json::type_name(doc.type()), ", expected an object)");
  const json::Value *envelope, *signatures;
  std::string payload_b64, payload_type, sig_b64;
  AOTPACK_RETURN_IF_ERROR(field(doc, "", "dsseEnvelope", json::Value::Type::kObject, &envelope).prefixed(where));
  AOTPACK_RETURN_IF_ERROR(string_field(*envelope, "dsseEnvelope", "payloadType", &payload_type).prefixed(where));
  if (payload_type != kPayloadType)
    return data_loss(where, ": dsseEnvelope.payloadType is ", quoted(payload_type), ", expected ", quoted(kPayloadType));
  AOTPACK_RETURN_IF_ERROR(string_field(*envelope, "dsseEnvelope", "payload", &payload_b64).prefixed(where));
  AOTPACK_RETURN_IF_ERROR(field(*envelope, "dsseEnvelope", "signatures", json::Value::Type::kArray, &signatures).prefixed(where));
  if (signatures->as_array().size() != 1)
    return data_loss(where, ": dsseEnvelope.signatures has ", signatures->as_array().size(),
                     " entries, expected 1 (what model-signing writes)");
  const json::Value& sig_entry = signatures->as_array()[0];
  if (!sig_entry.is_object())
    return data_loss(where, ": dsseEnvelope.signatures[0] is ", json::type_name(sig_entry.type()), ", expected an object");
  AOTPACK_RETURN_IF_ERROR(string_field(sig_entry, "dsseEnvelope.signatures[0]", "sig", &sig_b64).prefixed(where));
  std::string payload, sig;
  if (!base64_decode(payload_b64, &payload)) return data_loss(where, ": dsseEnvelope.payload is not base64");
  if (!base64_decode(sig_b64, &sig) || sig.empty())
    return data_loss(where, ": dsseEnvelope.signatures[0].sig is not base64");

  // The signature first: nothing in the payload is read before it is known to be the signer's.
  AOTPACK_RETURN_IF_ERROR(verify_ecdsa(key, sig, dsse_pae(payload_type, payload)).prefixed(where));

  json::Value statement;
  st = json::parse(payload, &statement);
  if (!st.ok()) return data_loss(where, ": the signed payload is not JSON (", st.message(), ")");
  std::map<std::string, std::string> signed_digests;
  AOTPACK_RETURN_IF_ERROR(read_statement(statement, &signed_digests).prefixed(where));

  // Every member against the statement; every difference named, in name order.
  std::map<std::string, std::string> actual;
  for (const SignedMember& m : members) {
    std::string name(m.name);
    if (!actual.emplace(name, sha256_hex(m.data, m.size)).second)
      return data_loss("member ", name, " appears twice in the package");
  }
  std::vector<std::string> problems;
  for (const auto& [name, digest] : signed_digests) {
    auto it = actual.find(name);
    if (it == actual.end()) problems.push_back(str_cat("member ", name, " was signed but is missing"));
    else if (it->second != digest) problems.push_back(str_cat("member ", name, " was changed after signing"));
  }
  for (const auto& [name, digest] : actual) {
    if (!signed_digests.count(name)) problems.push_back(str_cat("member ", name, " was not signed"));
  }
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    return data_loss("does not match ", where, ": ", all);
  }
  *sha256_by_member = std::move(actual);
  return Status();
}

}  // namespace aotpack
