#include "model/fp8_checkpoint.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "core/fp8.h"
#include "core/log.h"
#include "model/hf_json.h"

namespace pagoda {

void fp8_e4m3_blocks_to_bf16(const uint8_t* w, int64_t rows, int64_t cols, const float* scales,
                             int64_t bn, int64_t bk, uint16_t* out) {
  static const std::array<double, 256> kValue = [] {
    std::array<double, 256> v{};
    for (int b = 0; b < 256; ++b) v[b] = e4m3_to_f32(static_cast<uint8_t>(b));
    return v;
  }();
  const int64_t n_col_blocks = (cols + bk - 1) / bk;
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = scales + (r / bn) * n_col_blocks;
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = f64_to_bf16(kValue[w[r * cols + c]] * static_cast<double>(s[c / bk]));
  }
}

void fp8_e4m3_blocks_to_fp8(const uint8_t* w, int64_t rows, int64_t cols, const float* scales,
                            int64_t bn, int64_t bk, cpu::BlockFP8* out) {
  const int64_t n_col_blocks = (cols + bk - 1) / bk;
  pack_fp8_blocks(
      w, rows, cols, [&](int64_t r, int64_t c) { return scales[(r / bn) * n_col_blocks + c / bk]; },
      out);
}

Status check_e4m3_finite(const std::string& what, const uint8_t* w, int64_t n) {
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) nan |= (w[i] & 0x7F) == 0x7F;
  if (!nan) return Status::ok();
  for (int64_t i = 0; i < n; ++i)
    if ((w[i] & 0x7F) == 0x7F)
      return corrupt(what + str_format(" element %lld is an e4m3fn NaN (byte 0x%02X)",
                                       static_cast<long long>(i), w[i]));
  return Status::ok();
}

namespace {

using nlohmann::json;

const char* const kWhere = "config.json quantization_config (fp8)";
// The quantization_config keys transformers' FineGrainedFP8Config and vLLM's Fp8Config
// write (ignored_layers: vLLM's and MiniMax's name for modules_to_not_convert).
constexpr std::string_view kKnownKeys[] = {"quant_method",      "fmt",
                                           "activation_scheme", "weight_block_size",
                                           "dequantize",        "modules_to_not_convert",
                                           "ignored_layers",    "modules_to_convert",
                                           "scale_fmt",         "expert_dtype"};

// One modules_to_not_convert / ignored_layers entry: the text and the same text compiled.
struct SkipPattern {
  std::string text;
  std::regex re;
};

struct Fp8Config {
  bool block = false;  // weight_block_size given
  int64_t bn = 0, bk = 0;
  bool static_activations = false;
  std::vector<SkipPattern> skip;
};

// transformers' should_convert_module: the pattern, as a regex, matches the name from its
// start up to a module boundary (just before a dot, just after one, or the end); or the
// name ends with the pattern's text.
bool skipped(const std::vector<SkipPattern>& patterns, const std::string& module) {
  for (const SkipPattern& p : patterns) {
    const std::string& t = p.text;
    if (module.size() >= t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0)
      return true;
    for (size_t end = 1; end <= module.size(); ++end) {
      const bool boundary = end == module.size() || module[end] == '.' || module[end - 1] == '.';
      if (boundary && std::regex_match(module.begin(), module.begin() + end, p.re)) return true;
    }
  }
  return false;
}

Status read_skip_list(const json& j, const char* key, std::vector<SkipPattern>* out) {
  const json* v = find_key(j, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_array()) return corrupt(std::string(kWhere) + " " + key + " is not a list");
  for (const json& e : *v) {
    if (!e.is_string()) return corrupt(std::string(kWhere) + " " + key + " holds a non-string");
    const std::string p = e.get<std::string>();
    try {
      out->push_back({p, std::regex(p)});
    } catch (const std::regex_error&) {
      return unsupported(std::string(kWhere) + " " + key + " entry '" + p +
                         "' is not a pattern Pagoda can read");
    }
  }
  return Status::ok();
}

Result<Fp8Config> parse_config(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  const std::string where = kWhere;
  if (j.is_discarded() || !j.is_object()) return corrupt(where + " is not an object");
  // Every key either library writes; anything else may change what the tensors mean.
  for (const auto& item : j.items())
    if (std::find(std::begin(kKnownKeys), std::end(kKnownKeys), item.key()) == std::end(kKnownKeys))
      return unsupported(where + ": key '" + item.key() + "' is not one Pagoda reads");
  Fp8Config c;
  if (const json* f = find_key(j, "fmt"); f != nullptr && json_text(*f) != "e4m3")
    return unsupported(where + ": fmt '" + json_text(*f) + "' is not supported (e4m3 weights are)");
  if (const json* a = find_key(j, "activation_scheme")) {
    std::string s = json_text(*a);
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s != "dynamic" && s != "static")
      return unsupported(where + ": activation_scheme '" + json_text(*a) +
                         "' is not supported (dynamic and static are)");
    c.static_activations = s == "static";
  }
  if (const json* b = find_key(j, "weight_block_size")) {
    const auto positive = [](const json& v) {
      return v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= (1 << 20);
    };
    if (!b->is_array() || b->size() != 2 || !positive((*b)[0]) || !positive((*b)[1]))
      return corrupt(where + ": weight_block_size " + json_text(*b) +
                     " is not two positive integers");
    c.block = true;
    c.bn = (*b)[0].get<int64_t>();
    c.bk = (*b)[1].get<int64_t>();
  }
  if (const json* d = find_key(j, "dequantize"); d != nullptr && !d->is_boolean())
    return corrupt(where + ": dequantize is not a boolean");  // a loader option either way
  if (const json* m = find_key(j, "modules_to_convert");
      m != nullptr && !(m->is_array() && m->empty()))
    return unsupported(where + ": modules_to_convert " + json_text(*m) +
                       " (FP8 embeddings) is not supported");
  if (const json* s = find_key(j, "scale_fmt"); s != nullptr && json_text(*s) != "float")
    return unsupported(where + ": scale_fmt '" + json_text(*s) +
                       "' is not supported (float scales are; ue8m0 stores them as E8M0 bytes)");
  if (const json* e = find_key(j, "expert_dtype"); e != nullptr && json_text(*e) != "fp8")
    return unsupported(where + ": expert_dtype '" + json_text(*e) + "' is not supported");
  PAGODA_RETURN_IF_ERROR(read_skip_list(j, "modules_to_not_convert", &c.skip));
  PAGODA_RETURN_IF_ERROR(read_skip_list(j, "ignored_layers", &c.skip));
  return c;
}

bool is_float_tensor(const SafetensorsTensor& t) {
  return t.type && (*t.type == DType::kF32 || *t.type == DType::kF16 || *t.type == DType::kBF16);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class Fp8Layer : public QuantLayer {
 public:
  std::vector<uint8_t> convert() const override {
    std::vector<uint8_t> out(row_bytes(type, cols) * static_cast<size_t>(rows));
    if (!quantized) {  // a Linear stored 16-bit
      std::memcpy(out.data(), weight.data(), out.size());
      return out;
    }
    if (type == DType::kFP8) {
      fp8_e4m3_blocks_to_fp8(weight.data(), rows, cols, scales.data(), bn, bk,
                             reinterpret_cast<cpu::BlockFP8*>(out.data()));
      return out;
    }
    fp8_e4m3_blocks_to_bf16(weight.data(), rows, cols, scales.data(), bn, bk,
                            reinterpret_cast<uint16_t*>(out.data()));
    return out;
  }

  QuantPiece weight;
  bool quantized = false;
  std::vector<float> scales;  // [ceil(rows / bn), ceil(cols / bk)]
  int64_t bn = 0, bk = 0;
};

// The scale tensor's values as floats, each finite and not negative.
Result<std::vector<float>> read_scales(const std::string& module, const char* param,
                                       const QuantPiece& p) {
  const SafetensorsTensor& t = *p.tensor;
  const std::string what = quant_piece_name(module, param);
  if (!is_float_tensor(t))
    return unsupported(what + " has dtype " + t.dtype + " (F32, F16 and BF16 scales load)");
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  for (int64_t i = 0; i < t.n_elements(); ++i) {
    v[i] = quant_float_at(p, i);
    if (!std::isfinite(v[i]) || v[i] < 0)
      return corrupt(what + str_format(" value %lld is %g; a weight scale is finite and not "
                                       "negative",
                                       static_cast<long long>(i), v[i]));
  }
  return v;
}

// A static activation scale: one finite, positive float (checked, then not used).
Status check_activation_scale(const std::string& module, const char* param, const QuantPiece& p) {
  const SafetensorsTensor& t = *p.tensor;
  const std::string what = quant_piece_name(module, param);
  if (!is_float_tensor(t) || t.n_elements() != 1 || t.shape.size() > 1)
    return corrupt(what + " is " + t.dtype + " " + shape_text(t.shape) +
                   ", not one float (a static activation scale)");
  const float v = quant_float_at(p, 0);
  if (!(v > 0) || !std::isfinite(v))
    return corrupt(what + str_format(" is %g; an activation scale is positive and finite", v));
  return Status::ok();
}

// The layer's weight scale, its name and shape as weight_block_size says (block:
// weight_scale_inv over the tile grid; per tensor: one float named weight_scale or
// weight_scale_inv), read into l->scales with l->bn x l->bk tiles.
Status read_weight_scale(const Fp8Config& c, const std::string& module,
                         const std::map<std::string, QuantPiece>& scale, Fp8Layer* l) {
  const char* want = c.block ? "weight_scale_inv" : nullptr;
  if (c.block) {
    if (scale.count("weight_scale") != 0)
      return unsupported(quant_piece_name(module, "weight_scale") +
                         " (a per-tensor scale) has no place in a checkpoint with "
                         "weight_block_size; block scales are weight_scale_inv");
  } else if (scale.size() == 2) {
    return corrupt("'" + module +
                   "' holds both weight_scale and weight_scale_inv; a per-tensor checkpoint "
                   "has one scale a layer");
  } else if (!scale.empty()) {
    want = scale.begin()->first == "weight_scale" ? "weight_scale" : "weight_scale_inv";
  }
  if (want == nullptr || scale.count(want) == 0)
    return not_found("checkpoint has no " + quant_piece_name(module, want ? want : "weight_scale") +
                     " (fp8, " + (c.block ? "block" : "per-tensor") + " scales)");
  const QuantPiece& sp = scale.at(want);
  const SafetensorsTensor& st = *sp.tensor;
  if (c.block) {
    l->bn = c.bn;
    l->bk = c.bk;
    const std::vector<int64_t> grid = {(l->rows + l->bn - 1) / l->bn,
                                       (l->cols + l->bk - 1) / l->bk};
    if (st.shape != grid)
      return corrupt(quant_piece_name(module, want) + " is " + shape_text(st.shape) +
                     str_format("; a [%lld, %lld] weight in [%lld, %lld] blocks has ",
                                static_cast<long long>(l->rows), static_cast<long long>(l->cols),
                                static_cast<long long>(l->bn), static_cast<long long>(l->bk)) +
                     shape_text(grid) + " scales");
  } else {
    l->bn = l->rows;
    l->bk = l->cols;
    if (st.n_elements() != 1 || st.shape.size() > 1)
      return corrupt(quant_piece_name(module, want) + " is " + shape_text(st.shape) +
                     "; without weight_block_size the scale is one float a layer");
  }
  PAGODA_ASSIGN_OR_RETURN(l->scales, read_scales(module, want, sp));
  return Status::ok();
}

// The activation scale: one a layer, required by a static scheme, foreign to a dynamic one.
Status check_activation_scales(const Fp8Config& c, const std::string& module,
                               const std::map<std::string, QuantPiece>& act) {
  if (act.size() > 1)
    return corrupt("'" + module +
                   "' holds both input_scale and activation_scale; a static checkpoint has one "
                   "activation scale a layer");
  if (!c.static_activations && !act.empty())
    return unsupported(quant_piece_name(module, act.begin()->first) +
                       " is a static activation scale, but quantization_config's "
                       "activation_scheme is dynamic");
  if (c.static_activations && act.empty())
    return not_found("checkpoint has no " + quant_piece_name(module, "input_scale") +
                     " (activation_scheme static)");
  if (act.empty()) return Status::ok();
  return check_activation_scale(module, act.begin()->first.c_str(), act.begin()->second);
}

class Fp8Format : public HfQuantFormat {
 public:
  explicit Fp8Format(Fp8Config c) : config_(std::move(c)) {}
  std::string_view method() const override { return "fp8"; }

  // A Linear's weight (make_layer decides whether it is FP8 or 16-bit) and every scale
  // tensor, so that make_layer names a stray one.
  Result<bool> holds(const std::string& /*module*/, const std::string& param, bool known,
                     bool linear) const override {
    if (param == "weight_scale" || param == "weight_scale_inv" || param == "input_scale" ||
        param == "activation_scale")
      return true;
    return param == "weight" && known && linear;
  }

  Result<std::unique_ptr<QuantLayer>> make_layer(const std::string& module,
                                                 const std::map<std::string, QuantPiece>& params,
                                                 bool linear) const override;

 private:
  Fp8Config config_;
};

Result<std::unique_ptr<QuantLayer>> Fp8Format::make_layer(
    const std::string& module, const std::map<std::string, QuantPiece>& params, bool linear) const {
  auto layer = std::make_unique<Fp8Layer>();
  Fp8Layer& l = *layer;
  l.module = module;
  std::optional<QuantPiece> weight;
  std::map<std::string, QuantPiece> scale, act;  // by the name the checkpoint uses
  for (const auto& [param, piece] : params) {
    l.all.push_back(piece);
    if (param == "weight")
      weight = piece;
    else if (param == "weight_scale" || param == "weight_scale_inv")
      scale.emplace(param, piece);
    else
      act.emplace(param, piece);  // holds() keeps nothing else
  }
  const bool skip = skipped(config_.skip, module);
  if (!linear)
    return unsupported("'" + module + "' has FP8 scale tensors, but the fp8 method quantizes " +
                       "Linear layers only (FP8 embeddings are not supported)");
  if (!weight) return not_found("checkpoint has no " + quant_piece_name(module, "weight"));
  const SafetensorsTensor& w = *weight->tensor;
  if (w.shape.size() != 2)
    return unsupported(quant_piece_name(module, "weight") +
                       str_format(" has %zu dimensions; a Linear's weight has 2", w.shape.size()));
  l.rows = w.shape[0];
  l.cols = w.shape[1];
  if (l.rows <= 0 || l.cols <= 0)
    return corrupt(quant_piece_name(module, "weight") + " is " + shape_text(w.shape) +
                   ", an empty matrix");
  l.weight = *weight;
  if (is_float_tensor(w)) {
    const std::string what = quant_piece_name(module, "weight");
    if (!scale.empty() || !act.empty())
      return corrupt(what + " is " + w.dtype + ", but the layer also holds " +
                     quant_piece_name(module, (!scale.empty() ? scale : act).begin()->first) +
                     " (scales belong to F8_E4M3 weights)");
    if (!skip && module != "lm_head")
      return unsupported(what + " is " + w.dtype +
                         ", but quantization_config quantizes it (the module is not in "
                         "modules_to_not_convert or ignored_layers)");
    l.type = *w.type;  // left unquantized: loads as stored
    return std::unique_ptr<QuantLayer>(std::move(layer));
  }
  if (w.dtype != "F8_E4M3")
    return unsupported(quant_piece_name(module, "weight") + " is " + w.dtype +
                       "; the fp8 method's weights load as F8_E4M3 (e4m3fn)");
  if (skip)
    return unsupported("'" + module +
                       "' is in quantization_config modules_to_not_convert / ignored_layers "
                       "(left 16-bit), but its weight is F8_E4M3");
  l.quantized = true;

  PAGODA_RETURN_IF_ERROR(read_weight_scale(config_, module, scale, &l));
  PAGODA_RETURN_IF_ERROR(check_activation_scales(config_, module, act));
  PAGODA_RETURN_IF_ERROR(
      check_e4m3_finite(quant_piece_name(module, "weight"), weight->data(), l.rows * l.cols));
  // The checkpoint's bytes and scales where every 32-column run lies under one scale;
  // otherwise (rows not whole 32-blocks, tiles narrower than 32 or not a multiple) the
  // exact products rounded once to BF16.
  l.type = fp8_keeps_blocks(l.cols, l.bk) ? DType::kFP8 : DType::kBF16;
  return std::unique_ptr<QuantLayer>(std::move(layer));
}

}  // namespace

Result<std::unique_ptr<HfQuantFormat>> open_fp8_checkpoint_format(std::string_view json_text) {
  PAGODA_ASSIGN_OR_RETURN(Fp8Config c, parse_config(json_text));
  if (c.static_activations)
    log_warn(
        "fp8 checkpoint with activation_scheme 'static': its input scales (the FP8 "
        "activation ranges) are checked but not used; Pagoda multiplies the weights (FP8 "
        "on the CPU, BF16 on CUDA) with unquantized activations (f32 on the CPU, 16-bit on "
        "CUDA)");
  return std::unique_ptr<HfQuantFormat>(std::make_unique<Fp8Format>(std::move(c)));
}

}  // namespace pagoda
