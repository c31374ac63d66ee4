#include "model/awq_gptq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/cpu/quant_blocks.h"
#include "core/dtype.h"
#include "model/hf_json.h"

namespace pagoda {
namespace {

using nlohmann::json;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Keys that only steer quantizing, fusing or kernel choice: the stored tensors and
// their meaning are the same whatever they say.
const std::set<std::string>& harmless_keys(bool awq) {
  static const std::set<std::string> kAwq = {"quant_method",
                                             "version",
                                             "bits",
                                             "w_bit",
                                             "group_size",
                                             "q_group_size",
                                             "zero_point",
                                             "modules_to_not_convert",
                                             "do_fuse",
                                             "fuse_max_seq_len",
                                             "modules_to_fuse",
                                             "backend",
                                             "exllama_config"};
  static const std::set<std::string> kGptq = {"quant_method",
                                              "bits",
                                              "group_size",
                                              "desc_act",
                                              "sym",
                                              "checkpoint_format",
                                              "format",
                                              "lm_head",
                                              "dynamic",
                                              "pack_dtype",
                                              "true_sequential",
                                              "damp_percent",
                                              "damp_auto_increment",
                                              "static_groups",
                                              "model_name_or_path",
                                              "model_file_base_name",
                                              "meta",
                                              "is_marlin_format",
                                              "use_exllama",
                                              "exllama_config",
                                              "use_cuda_fp16",
                                              "disable_exllama",
                                              "backend",
                                              "max_input_length",
                                              "cache_block_outputs",
                                              "batch_size",
                                              "tokenizer",
                                              "dataset",
                                              "module_name_preceding_first_block",
                                              "block_name_to_quantize",
                                              "modules_in_block_to_quantize",
                                              "mse",
                                              "model_seqlen",
                                              "pad_token_id"};
  return awq ? kAwq : kGptq;
}

Result<int> int_key(const json& j, const char* a, const char* b, int fallback,
                    const std::string& where) {
  const json* v = find_key(j, a);
  if (v == nullptr && b != nullptr) v = find_key(j, b);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) return corrupt(where + " " + a + " is not an integer");
  return v->get<int>();
}

Result<bool> bool_key(const json& j, const char* key, bool fallback, const std::string& where) {
  const json* v = find_key(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return corrupt(where + " " + key + " is not a boolean");
  return v->get<bool>();
}

}  // namespace

Result<AgConfig> parse_awq_gptq_config(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return corrupt("config.json quantization_config is not an object");
  const json* m = find_key(j, "quant_method");
  const std::string method = m != nullptr ? lower(json_text(*m)) : "";
  AgConfig c;
  c.awq = method == "awq";
  if (!c.awq && method != "gptq")
    return unsupported("quant_method '" + method + "' is not awq or gptq");
  const std::string where = "config.json quantization_config (" + method + ")";
  for (auto it = j.begin(); it != j.end(); ++it)
    if (harmless_keys(c.awq).count(it.key()) == 0 && !it.value().is_null())
      return unsupported(where + " key '" + it.key() + "' (" + json_text(it.value()) +
                         ") is not one Pagoda reads; refusing rather than guess its effect on "
                         "the weights");
  PAGODA_ASSIGN_OR_RETURN(c.bits, int_key(j, "bits", "w_bit", 4, where));
  PAGODA_ASSIGN_OR_RETURN(c.group_size, int_key(j, "group_size", "q_group_size", 128, where));
  if (c.group_size == 0 || c.group_size < -1 || c.group_size > (1 << 24))
    return corrupt(where + str_format(" group_size %d is not -1 or positive", c.group_size));
  if (c.awq) {
    const json* v = find_key(j, "version");
    const std::string version = v != nullptr ? lower(json_text(*v)) : "gemm";
    if (version != "gemm")
      return unsupported(where + " version '" + version +
                         "' is not supported (Pagoda reads AWQ gemm checkpoints)");
    if (c.bits != 4)
      return unsupported(where +
                         str_format(" bits %d is not supported (AWQ gemm is 4-bit)", c.bits));
    PAGODA_ASSIGN_OR_RETURN(const bool zp, bool_key(j, "zero_point", true, where));
    if (!zp)
      return unsupported(where +
                         " zero_point false is not supported (AWQ gemm layers store "
                         "zero points)");
    if (const json* n = find_key(j, "modules_to_not_convert")) {
      if (!n->is_array()) return corrupt(where + " modules_to_not_convert is not a list");
      for (const json& e : *n) {
        if (!e.is_string()) return corrupt(where + " modules_to_not_convert holds a non-string");
        c.not_convert.push_back(e.get<std::string>());
      }
    }
    return c;
  }
  if (c.bits != 4 && c.bits != 8)
    return unsupported(where + str_format(" bits %d is not supported (4 and 8 are)", c.bits));
  PAGODA_ASSIGN_OR_RETURN(c.desc_act, bool_key(j, "desc_act", false, where));
  PAGODA_ASSIGN_OR_RETURN(const bool sym, bool_key(j, "sym", true, where));
  (void)sym;  // the zero points say it; a sym layer converts exactly either way
  const json* f = find_key(j, "checkpoint_format");
  if (f == nullptr) f = find_key(j, "format");
  const std::string format = f != nullptr ? lower(json_text(*f)) : "gptq";
  if (format != "gptq" && format != "gptq_v2")
    return unsupported(where + " checkpoint_format '" + format +
                       "' is not supported (gptq and gptq_v2 are)");
  c.v1_zeros = format == "gptq";
  PAGODA_ASSIGN_OR_RETURN(const bool lm_head, bool_key(j, "lm_head", false, where));
  if (lm_head) return unsupported(where + " lm_head true (a quantized lm_head) is not supported");
  PAGODA_ASSIGN_OR_RETURN(const bool marlin, bool_key(j, "is_marlin_format", false, where));
  if (marlin) return unsupported(where + " is_marlin_format true is not supported");
  if (const json* d = find_key(j, "dynamic"); d != nullptr && !(d->is_object() && d->empty()))
    return unsupported(where + " dynamic (per-module overrides " + json_text(*d) +
                       ") is not supported");
  if (const json* p = find_key(j, "pack_dtype");
      p != nullptr && lower(json_text(*p)) != "int32" && lower(json_text(*p)) != "torch.int32")
    return unsupported(where + " pack_dtype '" + json_text(*p) + "' is not supported (int32 is)");
  return c;
}

namespace {

// Whether every run of n columns lies in one group (cols a multiple of n).
bool runs_whole(const std::vector<int32_t>& group, int64_t cols, int64_t n) {
  if (cols % n != 0) return false;
  for (int64_t c = 0; c < cols; c += n)
    for (int64_t k = 1; k < n; ++k)
      if (group[c + k] != group[c]) return false;
  return true;
}

}  // namespace

AgPlan ag_plan(int bits, const std::vector<uint8_t>& zero, const std::vector<int32_t>& group,
               int64_t cols) {
  const bool blocks_whole = runs_whole(group, cols, cpu::kQK);
  const uint8_t mid = static_cast<uint8_t>(1 << (bits - 1));
  const bool all_mid = std::all_of(zero.begin(), zero.end(), [&](uint8_t z) { return z == mid; });
  AgPlan p;
  if (bits == 4 && runs_whole(group, cols, 128)) {
    p.type = DType::kQ4_G128;
  } else if (bits == 4 && runs_whole(group, cols, 64)) {
    p.type = DType::kQ4_G64;
  } else if (blocks_whole && bits == 4) {
    p.type = all_mid ? DType::kQ4_0 : DType::kQ4_1;
  } else {
    p.type = DType::kQ8_0;
    p.requantized = !(blocks_whole && all_mid);
  }
  return p;
}

namespace {

// Q4_G64/Q4_G128 rows: each run of 32 S columns is one group, its scale and zero point as
// they are (the scale rounded to f16).
template <int S>
void ag_convert_q4g(const AgCodes& k, uint8_t* out) {
  auto* b = reinterpret_cast<cpu::BlockQ4G<S>*>(out);
  for (int64_t r = 0; r < k.rows; ++r) {
    const uint8_t* q = k.q.data() + r * k.cols;
    for (int64_t c = 0; c < k.cols; c += 32 * S, ++b) {
      const int64_t g = k.group[c];
      b->d = f32_to_fp16(k.scale[g * k.rows + r]);
      b->z = k.zero[g * k.rows + r];
      b->pad = 0;
      for (int j = 0; j < S; ++j)
        for (int l = 0; l < 16; ++l)
          b->qs[16 * j + l] = static_cast<uint8_t>(q[c + 32 * j + l] | q[c + 32 * j + l + 16] << 4);
    }
  }
}

}  // namespace

void ag_convert(const AgCodes& k, int bits, const AgPlan& plan, uint8_t* out) {
  if (plan.type == DType::kQ4_G128) return ag_convert_q4g<4>(k, out);
  if (plan.type == DType::kQ4_G64) return ag_convert_q4g<2>(k, out);
  const size_t block_bytes = plan.type == DType::kQ4_0   ? sizeof(cpu::BlockQ4_0)
                             : plan.type == DType::kQ4_1 ? sizeof(cpu::BlockQ4_1)
                                                         : sizeof(cpu::BlockQ8_0);
  const int mid = 1 << (bits - 1);
  for (int64_t r = 0; r < k.rows; ++r) {
    const uint8_t* q = k.q.data() + r * k.cols;
    for (int64_t c = 0; c < k.cols; c += cpu::kQK, out += block_bytes) {
      const int64_t g = k.group[c];
      const float s = k.scale[g * k.rows + r];
      const int z = k.zero[g * k.rows + r];
      if (plan.type == DType::kQ4_0 || plan.type == DType::kQ4_1) {
        uint8_t qs[16];
        for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[c + j] | q[c + j + 16] << 4);
        if (plan.type == DType::kQ4_0) {
          auto* b = reinterpret_cast<cpu::BlockQ4_0*>(out);
          b->d = f32_to_fp16(s);
          std::memcpy(b->qs, qs, 16);
        } else {
          auto* b = reinterpret_cast<cpu::BlockQ4_1*>(out);
          b->d = f32_to_fp16(s);
          b->m = f32_to_fp16(-s * static_cast<float>(z));
          std::memcpy(b->qs, qs, 16);
        }
        continue;
      }
      auto* b = reinterpret_cast<cpu::BlockQ8_0*>(out);
      if (!plan.requantized) {
        b->d = f32_to_fp16(s);
        for (int j = 0; j < cpu::kQK; ++j) b->qs[j] = static_cast<int8_t>(q[c + j] - mid);
        continue;
      }
      float w[cpu::kQK];
      float amax = 0;
      for (int j = 0; j < cpu::kQK; ++j) {
        const int64_t gj = k.group[c + j];
        w[j] = k.scale[gj * k.rows + r] *
               static_cast<float>(static_cast<int>(q[c + j]) - k.zero[gj * k.rows + r]);
        amax = std::max(amax, std::fabs(w[j]));
      }
      b->d = f32_to_fp16(amax / 127.0f);
      const float d = fp16_to_f32(b->d);
      const float id = d != 0 ? 1.0f / d : 0.0f;
      for (int j = 0; j < cpu::kQK; ++j)
        b->qs[j] = static_cast<int8_t>(std::clamp(std::lround(w[j] * id), -127L, 127L));
    }
  }
}

}  // namespace pagoda

namespace pagoda {
namespace {

// One code of `bits` from word `w` at position `slot` (AWQ's 4-bit order is applied by
// the caller).
inline uint8_t field(int64_t w, int slot, int bits) {
  return static_cast<uint8_t>((static_cast<uint32_t>(w) >> (slot * bits)) & ((1u << bits) - 1));
}

// AWQ's interleave: output column 8j + k lives in nibble kAwqSlot[k] of word j.
constexpr int kAwqSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

class AgLayer : public QuantLayer {
 public:
  std::vector<uint8_t> convert() const override {
    AgCodes k;
    k.rows = rows;
    k.cols = cols;
    k.n_groups = n_groups;
    k.zero = zero;
    k.group = group;
    k.scale.resize(static_cast<size_t>(n_groups * rows));
    for (int64_t i = 0; i < n_groups * rows; ++i) k.scale[i] = quant_float_at(scales, i);
    k.q.resize(static_cast<size_t>(rows * cols));
    if (config->awq) {
      // qweight [in, out / 8]: word (i, j) holds output columns 8j..8j+7 of input i.
      const int64_t words = rows / 8;
      for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = 0; j < words; ++j) {
          const int64_t w = quant_int_at(qweight, i * words + j);
          for (int s = 0; s < 8; ++s) k.q[(8 * j + s) * cols + i] = field(w, kAwqSlot[s], 4);
        }
    } else {
      // qweight [in * bits / 32, out]: word (p, o) holds inputs p*per .. p*per+per-1.
      const int per = 32 / config->bits;
      for (int64_t p = 0; p < cols / per; ++p)
        for (int64_t o = 0; o < rows; ++o) {
          const int64_t w = quant_int_at(qweight, p * rows + o);
          for (int s = 0; s < per; ++s) k.q[o * cols + p * per + s] = field(w, s, config->bits);
        }
    }
    std::vector<uint8_t> out(row_bytes(type, cols) * static_cast<size_t>(rows));
    ag_convert(k, config->bits, plan, out.data());
    return out;
  }

  const AgConfig* config = nullptr;
  AgPlan plan;
  int64_t n_groups = 1;
  QuantPiece qweight, scales;
  std::vector<uint8_t> zero;   // n_groups x rows, decoded (v1 offset undone)
  std::vector<int32_t> group;  // cols
};

std::string dims(const SafetensorsTensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

Status want_shape(const std::string& module, const char* param, const SafetensorsTensor& t,
                  const std::vector<const char*>& dtypes, int64_t d0, int64_t d1) {
  const bool dtype_ok =
      std::any_of(dtypes.begin(), dtypes.end(), [&](const char* d) { return t.dtype == d; });
  const bool shape_ok = d1 < 0 ? (t.shape.size() == 1 && t.shape[0] == d0)
                               : (t.shape.size() == 2 && t.shape[0] == d0 && t.shape[1] == d1);
  if (dtype_ok && shape_ok) return Status::ok();
  std::string want =
      d1 < 0 ? str_format("[%lld]", static_cast<long long>(d0))
             : str_format("[%lld, %lld]", static_cast<long long>(d0), static_cast<long long>(d1));
  return corrupt(quant_piece_name(module, param) + " is " + t.dtype + " " + dims(t) +
                 "; the layer's qweight needs " + dtypes[0] + " " + want);
}

class AwqGptqFormat : public HfQuantFormat {
 public:
  explicit AwqGptqFormat(AgConfig c) : config_(std::move(c)) {}
  std::string_view method() const override { return config_.awq ? "awq" : "gptq"; }

  Result<bool> holds(const std::string&, const std::string& param, bool, bool) const override {
    return param == "qweight" || param == "qzeros" || param == "scales" || param == "g_idx";
  }

  Result<std::unique_ptr<QuantLayer>> make_layer(const std::string& module,
                                                 const std::map<std::string, QuantPiece>& params,
                                                 bool linear) const override {
    const std::string how = config_.awq ? "AWQ" : "GPTQ";
    if (!linear)
      return unsupported("'" + module + "' has " + how +
                         " tensors, but Pagoda reads quantized Linear layers only");
    for (const std::string& n : config_.not_convert)
      if (module.find(n) != std::string::npos)
        return corrupt("'" + module + "' has AWQ tensors, but modules_to_not_convert ('" + n +
                       "') leaves it 16-bit");
    if (module == "lm_head")
      return unsupported("'" + module + "' is quantized (lm_head); Pagoda reads a 16-bit lm_head");
    auto layer = std::make_unique<AgLayer>();
    AgLayer& l = *layer;
    l.module = module;
    l.config = &config_;
    const QuantPiece* qzeros = nullptr;
    const QuantPiece* g_idx = nullptr;
    for (const auto& [param, piece] : params) {
      l.all.push_back(piece);
      if (param == "qweight") l.qweight = piece;
      if (param == "scales") l.scales = piece;
      if (param == "qzeros") qzeros = &piece;
      if (param == "g_idx") g_idx = &piece;
    }
    if (g_idx != nullptr && config_.awq)
      return unsupported("tensor " + quant_piece_name(module, "g_idx") +
                         " has no place in an AWQ layer");
    for (const auto& [have, name] :
         {std::pair{l.qweight.tensor != nullptr, "qweight"},
          std::pair{l.scales.tensor != nullptr, "scales"}, std::pair{qzeros != nullptr, "qzeros"},
          std::pair{g_idx != nullptr || !config_.desc_act, "g_idx"}})
      if (!have)
        return not_found("checkpoint has no " + quant_piece_name(module, name) + " (" + how +
                         (std::string_view(name) == "g_idx" ? ", desc_act true)" : ")"));
    const SafetensorsTensor& qw = *l.qweight.tensor;
    if (qw.dtype != "I32" || qw.shape.size() != 2 || qw.shape[0] <= 0 || qw.shape[1] <= 0)
      return corrupt(quant_piece_name(module, "qweight") + " is " + qw.dtype + " " + dims(qw) +
                     " (" + how + " stores 2-D I32)");
    const int per = 32 / config_.bits;
    l.cols = config_.awq ? qw.shape[0] : qw.shape[0] * per;
    l.rows = config_.awq ? qw.shape[1] * 8 : qw.shape[1];
    if (l.cols % 32 != 0)
      return unsupported(quant_piece_name(module, "qweight") +
                         str_format(" rows of %lld weights are not whole 32-element blocks",
                                    static_cast<long long>(l.cols)));
    const int64_t g = config_.group_size > 0 ? config_.group_size : l.cols;
    l.n_groups = (l.cols + g - 1) / g;
    if (g_idx != nullptr) {
      // g_idx decides the groups; its largest value sets how many there are.
      const SafetensorsTensor& gt = *g_idx->tensor;
      PAGODA_RETURN_IF_ERROR(want_shape(module, "g_idx", gt, {"I32", "I64"}, l.cols, -1));
      l.group.resize(static_cast<size_t>(l.cols));
      for (int64_t i = 0; i < l.cols; ++i) {
        const int64_t v = quant_int_at(*g_idx, i);
        if (v < 0 || v >= l.n_groups)
          return corrupt(quant_piece_name(module, "g_idx") +
                         str_format(" holds group %lld at column %lld; group_size %d gives %lld "
                                    "groups",
                                    static_cast<long long>(v), static_cast<long long>(i),
                                    config_.group_size, static_cast<long long>(l.n_groups)));
        l.group[i] = static_cast<int32_t>(v);
      }
    } else {
      l.group.resize(static_cast<size_t>(l.cols));
      for (int64_t i = 0; i < l.cols; ++i) l.group[i] = static_cast<int32_t>(i / g);
    }
    PAGODA_RETURN_IF_ERROR(
        want_shape(module, "scales", *l.scales.tensor, {"F16", "BF16", "F32"}, l.n_groups, l.rows));
    const int64_t zero_words = config_.awq ? l.rows / 8 : l.rows / per;
    if (!config_.awq && l.rows % per != 0)
      return corrupt(quant_piece_name(module, "qweight") +
                     str_format(" has %lld output columns, not whole %d-code words of qzeros",
                                static_cast<long long>(l.rows), per));
    PAGODA_RETURN_IF_ERROR(
        want_shape(module, "qzeros", *qzeros->tensor, {"I32"}, l.n_groups, zero_words));
    // Zero points decoded now: they choose the block type.
    const int mask = (1 << config_.bits) - 1;
    l.zero.resize(static_cast<size_t>(l.n_groups * l.rows));
    for (int64_t gi = 0; gi < l.n_groups; ++gi)
      for (int64_t j = 0; j < zero_words; ++j) {
        const int64_t w = quant_int_at(*qzeros, gi * zero_words + j);
        for (int s = 0; s < (config_.awq ? 8 : per); ++s) {
          int z = config_.awq ? field(w, kAwqSlot[s], 4) : field(w, s, config_.bits);
          if (config_.v1_zeros) z = (z + 1) & mask;
          l.zero[gi * l.rows + j * (config_.awq ? 8 : per) + s] = static_cast<uint8_t>(z);
        }
      }
    l.plan = ag_plan(config_.bits, l.zero, l.group, l.cols);
    l.type = l.plan.type;
    return std::unique_ptr<QuantLayer>(std::move(layer));
  }

 private:
  AgConfig config_;
};

}  // namespace

Result<std::unique_ptr<HfQuantFormat>> open_awq_gptq_format(std::string_view json_text) {
  PAGODA_ASSIGN_OR_RETURN(AgConfig c, parse_awq_gptq_config(json_text));
  return std::unique_ptr<HfQuantFormat>(std::make_unique<AwqGptqFormat>(std::move(c)));
}

}  // namespace pagoda
