#include "model/bnb_nf4.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "model/hf_json.h"

namespace pagoda {

void bnb_nf4_to_blocks(const uint8_t* packed, const float* absmax, int64_t blocksize, int64_t rows,
                       int64_t cols, uint8_t* out) {
  // Element e's code: byte e / 2, the high nibble for even e (bitsandbytes packs
  // q[0::2] << 4 | q[1::2]).
  auto code = [&](int64_t e) -> uint8_t {
    const uint8_t b = packed[e / 2];
    return (e & 1) != 0 ? b & 15 : b >> 4;
  };
  auto* blk = reinterpret_cast<cpu::BlockNF4*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += cpu::kQK, ++blk) {
      const int64_t e0 = r * cols + c;  // a 32-run lies in one bitsandbytes block
      // round(127 c) * d = c * absmax up to the table's rounding and d's f16 rounding.
      blk->d = f32_to_fp16(absmax[e0 / blocksize] / 127.0f);
      for (int j = 0; j < 16; ++j)
        blk->qs[j] = static_cast<uint8_t>(code(e0 + j) | code(e0 + j + 16) << 4);
    }
}

namespace {

using nlohmann::json;

bool flag(const json& j, const char* key, const char* alt) {
  for (const char* k : {key, alt})
    if (const json* v = find_key(j, k); v != nullptr && v->is_boolean() && v->get<bool>())
      return true;
  return false;
}

// One llm_int8_skip_modules entry: the text (matched as a suffix) and, compiled once at
// parse, the pattern transformers also tries from the start up to a module boundary.
struct SkipPattern {
  std::string text;
  std::regex prefix;
};

struct BnbConfig {
  bool double_quant = false;
  std::vector<SkipPattern> skip;  // llm_int8_skip_modules
};

Result<BnbConfig> parse_config(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  const std::string where = "config.json quantization_config (bitsandbytes)";
  if (j.is_discarded() || !j.is_object()) return corrupt(where + " is not an object");
  if (flag(j, "load_in_8bit", "_load_in_8bit"))
    return unsupported(where +
                       ": load_in_8bit (LLM.int8 8-bit weights with fp16 outliers) is "
                       "not supported; 4-bit NF4 is");
  if (!flag(j, "load_in_4bit", "_load_in_4bit"))
    return unsupported(where + " sets neither load_in_4bit nor load_in_8bit");
  const json* qt = find_key(j, "bnb_4bit_quant_type");
  const std::string type = qt != nullptr ? json_text(*qt) : "fp4";  // transformers' default
  if (type != "nf4")
    return unsupported(where + ": bnb_4bit_quant_type '" + type +
                       "' is not supported (nf4 is; fp4's code book is not read)");
  if (const json* s = find_key(j, "bnb_4bit_quant_storage");
      s != nullptr && json_text(*s) != "uint8")
    return unsupported(where + ": bnb_4bit_quant_storage '" + json_text(*s) +
                       "' (codes packed into another dtype) is not supported (uint8 is)");
  // The dtype bitsandbytes dequantizes to before its matmul: a precision choice that the
  // stored codes do not depend on; Pagoda multiplies with its own activation scheme.
  if (const json* d = find_key(j, "bnb_4bit_compute_dtype")) {
    const std::string dt = json_text(*d);
    if (dt != "float32" && dt != "float16" && dt != "bfloat16" && dt != "torch.float32" &&
        dt != "torch.float16" && dt != "torch.bfloat16")
      return unsupported(where + ": bnb_4bit_compute_dtype '" + dt +
                         "' is not supported (float32, float16, bfloat16 are)");
  }
  BnbConfig c;
  c.double_quant = flag(j, "bnb_4bit_use_double_quant", "bnb_4bit_use_double_quant");
  if (const json* s = find_key(j, "llm_int8_skip_modules")) {
    if (!s->is_array()) return corrupt(where + " llm_int8_skip_modules is not a list");
    for (const json& e : *s) {
      if (!e.is_string()) return corrupt(where + " llm_int8_skip_modules holds a non-string");
      const std::string p = e.get<std::string>();
      try {
        c.skip.push_back({p, std::regex("(?:" + p + ")(?=\\.|$)")});
      } catch (const std::regex_error&) {
        return unsupported("bitsandbytes llm_int8_skip_modules entry '" + p +
                           "' is not a pattern Pagoda can read");
      }
    }
  }
  return c;
}

// transformers' should_convert_module: a pattern matches from the start up to a module
// boundary (also as a regex), or as a suffix of the name.
bool skipped(const std::vector<SkipPattern>& patterns, const std::string& module) {
  for (const SkipPattern& p : patterns) {
    const std::string& t = p.text;
    if (module.size() >= t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0)
      return true;
    std::smatch m;
    if (std::regex_search(module, m, p.prefix, std::regex_constants::match_continuous)) return true;
  }
  return false;
}

const char* kQuantState = "weight.quant_state.bitsandbytes__nf4";

class BnbLayer : public QuantLayer {
 public:
  std::vector<uint8_t> convert() const override {
    std::vector<uint8_t> out(row_bytes(type, cols) * static_cast<size_t>(rows));
    if (type != DType::kNF4) {  // a Linear stored unquantized
      std::memcpy(out.data(), weight.data(), out.size());
      return out;
    }
    std::vector<float> am(static_cast<size_t>(n_absmax));
    for (int64_t i = 0; i < n_absmax; ++i) {
      if (!nested) {
        am[i] = quant_float_at(absmax, i);
        continue;
      }
      // bitsandbytes' dequantize_blockwise of the absmax codes, then + offset (f32).
      const uint8_t q = absmax.data()[i];
      am[i] = quant_float_at(*nested_map, q) * quant_float_at(*nested_absmax, i / nested_block) +
              nested_offset;
    }
    bnb_nf4_to_blocks(weight.data(), am.data(), blocksize, rows, cols, out.data());
    return out;
  }

  QuantPiece weight, absmax;
  std::optional<QuantPiece> nested_absmax, nested_map;
  bool nested = false;
  int64_t blocksize = 64, nested_block = 256, n_absmax = 0;
  float nested_offset = 0;
};

bool is_float(const SafetensorsTensor& t) {
  return t.type && (*t.type == DType::kF32 || *t.type == DType::kF16 || *t.type == DType::kBF16);
}

Result<json> quant_state(const std::string& module, const QuantPiece& p) {
  const SafetensorsTensor& t = *p.tensor;
  const std::string what = quant_piece_name(module, kQuantState);
  if (t.dtype != "U8") return corrupt(what + " is " + t.dtype + ", not uint8 JSON text");
  const char* s = reinterpret_cast<const char*>(p.data());
  const json j = json::parse(s, s + t.n_elements(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt(what + " is not a JSON object");
  return j;
}

Result<int64_t> int_field(const json& j, const char* key, const std::string& what) {
  const json* v = find_key(j, key);
  if (v == nullptr || !v->is_number_integer() || v->get<int64_t>() <= 0)
    return corrupt(what + " has no positive integer '" + key + "'");
  return v->get<int64_t>();
}

Status check_f32(const std::string& module, const char* param, const QuantPiece& p, int64_t n) {
  const SafetensorsTensor& t = *p.tensor;
  if (t.dtype != "F32" || t.n_elements() != n)
    return corrupt(quant_piece_name(module, param) + " is " + t.dtype +
                   str_format(" with %lld values; f32 [%lld] expected",
                              static_cast<long long>(t.n_elements()), static_cast<long long>(n)));
  return Status::ok();
}

Result<std::unique_ptr<QuantLayer>> make_bnb_layer(const std::string& module,
                                                   const std::map<std::string, QuantPiece>& params,
                                                   bool double_quant) {
  auto layer = std::make_unique<BnbLayer>();
  BnbLayer& l = *layer;
  l.module = module;
  std::optional<QuantPiece> state, qmap, absmax, weight;
  for (const auto& [param, piece] : params) {
    l.all.push_back(piece);
    if (param == "weight")
      weight = piece;
    else if (param == kQuantState)
      state = piece;
    else if (param == "weight.quant_map")
      qmap = piece;
    else if (param == "weight.absmax")
      absmax = piece;
    else if (param == "weight.nested_absmax")
      l.nested_absmax = piece;
    else if (param == "weight.nested_quant_map")
      l.nested_map = piece;
    else if (param == "weight.quant_state.bitsandbytes__fp4")
      return unsupported(quant_piece_name(module, param) +
                         ": FP4 weights are not supported (NF4 are)");
    else
      return unsupported("tensor " + quant_piece_name(module, param) +
                         " has no place in a bitsandbytes NF4 layer as Pagoda loads it");
  }
  if (!weight) return not_found("checkpoint has no " + quant_piece_name(module, "weight"));
  const SafetensorsTensor& w = *weight->tensor;
  // A Linear left unquantized (lm_head by transformers' default): as it is.
  if (params.size() == 1 && is_float(w) && w.shape.size() == 2) {
    l.weight = *weight;
    l.type = *w.type;
    l.rows = w.shape[0];
    l.cols = w.shape[1];
    return std::unique_ptr<QuantLayer>(std::move(layer));
  }
  for (const auto& [have, name] :
       {std::pair{state.has_value(), kQuantState}, std::pair{qmap.has_value(), "weight.quant_map"},
        std::pair{absmax.has_value(), "weight.absmax"}})
    if (!have) return not_found("checkpoint has no " + quant_piece_name(module, name));
  const std::string what = quant_piece_name(module, kQuantState);
  PAGODA_ASSIGN_OR_RETURN(const json qs, quant_state(module, *state));
  if (const json* t = find_key(qs, "quant_type"); t == nullptr || json_text(*t) != "nf4")
    return unsupported(what + " quant_type " + (t ? json_text(*t) : std::string("(none)")) +
                       " is not supported (nf4 is)");
  const json* shape = find_key(qs, "shape");
  if (shape == nullptr || !shape->is_array() || shape->size() != 2 ||
      !(*shape)[0].is_number_integer() || !(*shape)[1].is_number_integer())
    return corrupt(what + " has no 2-D shape");
  l.rows = (*shape)[0].get<int64_t>();
  l.cols = (*shape)[1].get<int64_t>();
  if (l.rows <= 0 || l.cols <= 0 || l.rows > (int64_t{1} << 24) || l.cols > (int64_t{1} << 24))
    return corrupt(what + " shape is out of range");
  PAGODA_ASSIGN_OR_RETURN(l.blocksize, int_field(qs, "blocksize", what));
  if (l.blocksize % 32 != 0)
    return unsupported(what + str_format(" blocksize %lld is not a multiple of 32 (Pagoda's NF4 "
                                         "blocks take one absmax per 32 weights)",
                                         static_cast<long long>(l.blocksize)));
  if (l.cols % 32 != 0)
    return unsupported(quant_piece_name(module, "weight") +
                       str_format(" rows of %lld weights are not whole 32-element blocks",
                                  static_cast<long long>(l.cols)));
  const int64_t n = l.rows * l.cols;
  if (w.dtype != "U8" || w.n_elements() != n / 2)
    return corrupt(quant_piece_name(module, "weight") + " is " + w.dtype +
                   str_format(" with %lld values; %lld uint8 (two codes a byte) expected",
                              static_cast<long long>(w.n_elements()),
                              static_cast<long long>(n / 2)));
  l.type = DType::kNF4;
  l.weight = *weight;
  l.absmax = *absmax;
  l.n_absmax = (n + l.blocksize - 1) / l.blocksize;
  // The code book: bitsandbytes' NF4, which round(127 c) stands for.
  PAGODA_RETURN_IF_ERROR(check_f32(module, "weight.quant_map", *qmap, 16));
  for (int i = 0; i < 16; ++i)
    if (std::fabs(quant_float_at(*qmap, i) - cpu::kNf4Code[i]) > 1e-6f)
      return unsupported(quant_piece_name(module, "weight.quant_map") +
                         str_format(" entry %d is %g, not NF4's %g: another code book is not "
                                    "supported",
                                    i, quant_float_at(*qmap, i), cpu::kNf4Code[i]));
  l.nested = absmax->tensor->dtype == "U8";
  if (l.nested != double_quant || l.nested != l.nested_absmax.has_value() ||
      l.nested != l.nested_map.has_value())
    return corrupt(quant_piece_name(module, "weight.absmax") + " is " + absmax->tensor->dtype +
                   (double_quant ? " but bnb_4bit_use_double_quant is set"
                                 : " but bnb_4bit_use_double_quant is not set") +
                   " (or nested_absmax / nested_quant_map do not match it)");
  if (!l.nested) {
    PAGODA_RETURN_IF_ERROR(check_f32(module, "weight.absmax", *absmax, l.n_absmax));
    return std::unique_ptr<QuantLayer>(std::move(layer));
  }
  if (absmax->tensor->n_elements() != l.n_absmax)
    return corrupt(quant_piece_name(module, "weight.absmax") +
                   str_format(" holds %lld codes; %lld blocks expected",
                              static_cast<long long>(absmax->tensor->n_elements()),
                              static_cast<long long>(l.n_absmax)));
  PAGODA_ASSIGN_OR_RETURN(l.nested_block, int_field(qs, "nested_blocksize", what));
  const json* off = find_key(qs, "nested_offset");
  if (off == nullptr || !off->is_number()) return corrupt(what + " has no nested_offset");
  l.nested_offset = off->get<float>();
  PAGODA_RETURN_IF_ERROR(check_f32(module, "weight.nested_quant_map", *l.nested_map, 256));
  PAGODA_RETURN_IF_ERROR(check_f32(module, "weight.nested_absmax", *l.nested_absmax,
                                   (l.n_absmax + l.nested_block - 1) / l.nested_block));
  return std::unique_ptr<QuantLayer>(std::move(layer));
}

class BnbNf4Format : public HfQuantFormat {
 public:
  explicit BnbNf4Format(BnbConfig c) : config_(std::move(c)) {}
  std::string_view method() const override { return "bitsandbytes"; }

  // "x.weight.absmax" and "x.weight.quant_state.bitsandbytes__nf4" belong to module x.
  std::pair<std::string, std::string> split(const std::string& name) const override {
    const size_t at = name.find(".weight.");
    if (at != std::string::npos) return {name.substr(0, at), name.substr(at + 1)};
    return HfQuantFormat::split(name);
  }

  Result<bool> holds(const std::string& module, const std::string& param, bool known,
                     bool linear) const override {
    if (param.rfind("weight.", 0) == 0) return true;  // make_layer names a stray one
    if (param != "weight" || !known || !linear) return false;
    return !skipped(config_.skip, module);
  }

  Result<std::unique_ptr<QuantLayer>> make_layer(const std::string& module,
                                                 const std::map<std::string, QuantPiece>& params,
                                                 bool linear) const override {
    if (skipped(config_.skip, module) || !linear)
      return unsupported("'" + module +
                         "' has bitsandbytes quantized tensors, but quantization_config leaves "
                         "it unquantized (llm_int8_skip_modules, or not a Linear)");
    return make_bnb_layer(module, params, config_.double_quant);
  }

 private:
  BnbConfig config_;
};

}  // namespace

Result<std::unique_ptr<HfQuantFormat>> open_bnb_nf4_format(std::string_view json_text) {
  PAGODA_ASSIGN_OR_RETURN(BnbConfig c, parse_config(json_text));
  return std::unique_ptr<HfQuantFormat>(std::make_unique<BnbNf4Format>(std::move(c)));
}

}  // namespace pagoda
