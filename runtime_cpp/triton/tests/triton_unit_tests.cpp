// Unit tests of the backend's pieces that need no server: the JSON document model and the model
// configuration's completion and checks against a signature. Run by tests/serving/test_backend_units.py.
// No framework: each CHECK prints what failed.
#include <cstdio>
#include <string>

#include "json_value.hpp"
#include "model_config.hpp"

using namespace aotpack_triton;

static int g_failures = 0;

#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) {                                                  \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                 \
    }                                                               \
  } while (0)

static JsonValue Parsed(const std::string& text) {
  JsonValue v;
  std::string error;
  bool ok = JsonValue::Parse(text, &v, &error);
  if (!ok) std::printf("parse failed: %s\n", error.c_str());
  CHECK(ok);
  return v;
}

static std::string ParseError(const std::string& text) {
  JsonValue v;
  std::string error;
  CHECK(!JsonValue::Parse(text, &v, &error));
  return error;
}

static void test_json() {
  JsonValue v = Parsed(R"( {"a": [1, -2, "3", 4.5e1, true, null], "s": "q\"\\\/\n\u00e9\ud83d\ude00", "o": {}} )");
  CHECK(v.is_object() && v.members().size() == 3);
  const JsonValue* a = v.Find("a");
  int64_t n = 0;
  CHECK(a && a->is_array() && a->size() == 6);
  CHECK(a->at(0).AsInt(&n) && n == 1);
  CHECK(a->at(1).AsInt(&n) && n == -2);
  CHECK(a->at(2).AsInt(&n) && n == 3);  // protobuf's JSON writes int64 as a string
  CHECK(!a->at(3).AsInt(&n));           // not an integer literal
  CHECK(!a->at(4).AsInt(&n));
  CHECK(v.Find("s")->text() == "q\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.Find("missing") == nullptr);
  // Serialize keeps member order and escapes what must be escaped; a parse of it gives the same text again.
  const std::string text = v.Serialize();
  CHECK(text == "{\"a\":[1,-2,\"3\",4.5e1,true,null],\"s\":\"q\\\"\\\\/\\n\xc3\xa9\xf0\x9f\x98\x80\",\"o\":{}}");
  CHECK(Parsed(text).Serialize() == text);
  JsonValue o = JsonValue::Object();
  o.Set("x", JsonValue::Number(1));
  o.Set("x", JsonValue::String("\x01"));
  CHECK(o.Serialize() == "{\"x\":\"\\u0001\"}");
  o.Set("y", JsonValue::Bool(false));
  CHECK(o.Serialize() == "{\"x\":\"\\u0001\",\"y\":false}");

  CHECK(ParseError("{\"a\": }").find("byte 6") != std::string::npos);
  CHECK(ParseError("[1, 2").find("unterminated array") != std::string::npos);
  CHECK(ParseError("\"abc").find("unterminated string") != std::string::npos);
  CHECK(ParseError("\"\\ud800x\"").find("lone high surrogate") != std::string::npos);
  CHECK(ParseError("{} x").find("trailing characters") != std::string::npos);
  CHECK(ParseError("-").find("needs digits") != std::string::npos);
  CHECK(ParseError(std::string(300, '[') + std::string(300, ']')).find("deeper than 256") != std::string::npos);
  CHECK(ParseError("").find("end of text") != std::string::npos);
}

// batch 1..64 on dim 0 of "input" [batch, 32] and "output" [batch, seq-expr]; seq 1..16.
static Signature MlpSignature(bool with_batch) {
  Signature sig;
  TensorSpec in{"input", AOTPACK_DTYPE_FLOAT32, TRITONSERVER_TYPE_FP32, {}};
  DimSpec b;
  b.symbol = "batch";
  b.min = 1;
  b.max = 64;
  DimSpec fixed;
  fixed.size = fixed.min = fixed.max = 32;
  in.dims = {b, fixed};
  TensorSpec out{"output", AOTPACK_DTYPE_FLOAT32, TRITONSERVER_TYPE_FP32, {b, DimSpec()}};
  sig.inputs = {in};
  sig.outputs = {out};
  sig.has_batch = with_batch;
  if (with_batch) sig.batch = {"batch", 1, 64};
  return sig;
}

static std::string CheckError(const Signature& sig, const std::string& config_text) {
  int64_t max_batch_size = 0;
  std::string error;
  CHECK(!CheckConfig(sig, Parsed(config_text), &max_batch_size, &error));
  return error;
}

static void test_model_config() {
  const Signature sig = MlpSignature(true);
  // Completion: inputs, outputs and max_batch_size from the signature, dims without the batch dim.
  JsonValue config = Parsed(R"({"name":"m","max_batch_size":0,"input":[],"parameters":{"aotpack.num_threads":{"string_value":"3"}}})");
  CHECK(CompleteConfig(sig, &config));
  CHECK(config.Serialize() ==
        "{\"name\":\"m\",\"max_batch_size\":64,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[32]}],"
        "\"parameters\":{\"aotpack.num_threads\":{\"string_value\":\"3\"}},"
        "\"output\":[{\"name\":\"output\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}]}");
  int64_t max_batch_size = -1;
  std::string error;
  CHECK(CheckConfig(sig, config, &max_batch_size, &error) && max_batch_size == 64);
  CHECK(!CompleteConfig(sig, &config));  // nothing left to fill in
  CHECK(ConfigParameter(config, "aotpack.num_threads", "1") == "3");
  CHECK(ConfigParameter(config, "aotpack.cuda_graphs", "1") == "1");

  // Without a batch symbol: max_batch_size stays 0 and dims keep every dim.
  JsonValue plain = Parsed(R"({"name":"m"})");
  CHECK(CompleteConfig(MlpSignature(false), &plain));
  CHECK(plain.Find("max_batch_size") == nullptr);
  CHECK(plain.Find("input")->at(0).Find("dims")->Serialize() == "[-1,32]");
  CHECK(CheckConfig(MlpSignature(false), plain, &max_batch_size, &error) && max_batch_size == 0);

  // Checks name the tensor and the field, and say what to write.
  const std::string output = R"(,"output":[{"name":"output","data_type":"TYPE_FP32","dims":["-1"]}])";
  CHECK(CheckError(sig, R"({"max_batch_size":64,"input":[{"name":"input","data_type":"TYPE_FP32","dims":["31"]}])" + output + "}") ==
        "input 'input': dims[0] is 31 but the package's dim 1 is 32: write -1 or a size it allows");
  CHECK(CheckError(sig, R"({"max_batch_size":64,"input":[{"name":"input","data_type":"TYPE_INT8","dims":[32]}])" + output + "}") ==
        "input 'input': data_type TYPE_INT8 but the package's is float32: write data_type: TYPE_FP32");
  CHECK(CheckError(sig, R"({"max_batch_size":128,"input":[{"name":"input","data_type":"TYPE_FP32","dims":[32]}]})")
            .find("allows at most 64: lower max_batch_size") != std::string::npos);
  CHECK(CheckError(MlpSignature(false), R"({"max_batch_size":8})").find("has no batch symbol") != std::string::npos);
  CHECK(CheckError(sig, R"({"max_batch_size":0,"input":[{"name":"input","data_type":"TYPE_FP32","dims":[32]}]})")
            .find("1 dims but the package's input has 2") != std::string::npos);
  CHECK(CheckError(sig, R"({"max_batch_size":64,"input":[{"name":"x","data_type":"TYPE_FP32","dims":[32]}]})") ==
        "input 'x' of the model configuration is not in the package, whose inputs are: input");
  CHECK(CheckError(sig, R"({"max_batch_size":64,"input":[]})").find("is not in the model configuration's inputs") !=
        std::string::npos);
  // A symbol's dim may be fixed to a size inside its range, not outside.
  Signature seq = MlpSignature(false);
  seq.inputs[0].dims[0].min = 1;
  CHECK(CheckConfig(seq, Parsed(R"({"input":[{"name":"input","data_type":"TYPE_FP32","dims":[8,32]}]})"), &max_batch_size, &error));
  CHECK(CheckError(seq, R"({"input":[{"name":"input","data_type":"TYPE_FP32","dims":[65,32]}]})") ==
        "input 'input': dims[0] is 65 but the package's dim 0 is batch in 1..64: write -1 or a size it allows");
}

int main() {
  test_json();
  test_model_config();
  if (g_failures) {
    std::printf("%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("all backend unit tests passed\n");
  return 0;
}
