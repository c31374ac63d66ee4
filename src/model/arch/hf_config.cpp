// Hugging Face config.json -> ModelConfig for the architectures Pagoda runs. The keys are
// transformers' (LlamaConfig, Qwen2Config); both the 4.x spelling (rope_theta and
// rope_scaling, torch_dtype) and 5.x's (rope_parameters, dtype) are read. A key that would
// change the math in a way the recipe cannot say is refused by name rather than ignored.
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"
#include "model/hf_json.h"

namespace pagoda {
namespace {

using nlohmann::json;

Status read_int(const json& j, const char* key, int64_t lo, int64_t hi, int* out, bool required) {
  const json* v = find_key(j, key);
  if (v == nullptr)
    return required ? corrupt(std::string("config.json has no '") + key + "'") : Status::ok();
  if (!v->is_number_integer())
    return corrupt(std::string("config.json '") + key + "' is not an integer");
  const int64_t x =
      v->is_number_unsigned()
          ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), uint64_t{1} << 62))
          : v->get<int64_t>();
  if (x < lo || x > hi)
    return corrupt(str_format("config.json '%s' = %lld is out of range [%lld, %lld]", key,
                              static_cast<long long>(x), static_cast<long long>(lo),
                              static_cast<long long>(hi)));
  *out = static_cast<int>(x);
  return Status::ok();
}

Status read_number(const json& j, const char* key, double* out) {
  const json* v = find_key(j, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_number()) return corrupt(std::string("config.json '") + key + "' is not a number");
  *out = v->get<double>();
  if (!std::isfinite(*out)) return corrupt(std::string("config.json '") + key + "' is not finite");
  return Status::ok();
}

// llama3 RoPE scaling as transformers' _compute_llama3_parameters states it, turned into
// the divisors of each frequency that llama.cpp's converter writes as rope_freqs.weight:
// high frequencies kept, low ones divided by `factor`, the band between blended.
Result<std::vector<float>> llama3_freq_factors(const json& rope, const ModelConfig& c) {
  double factor = 0, low = 0, high = 0;
  int orig = 0;
  PAGODA_RETURN_IF_ERROR(read_number(rope, "factor", &factor));
  PAGODA_RETURN_IF_ERROR(read_number(rope, "low_freq_factor", &low));
  PAGODA_RETURN_IF_ERROR(read_number(rope, "high_freq_factor", &high));
  PAGODA_RETURN_IF_ERROR(
      read_int(rope, "original_max_position_embeddings", 1, 1 << 24, &orig, true));
  if (!(factor > 0) || !(low > 0) || !(high > low))
    return corrupt(
        "config.json llama3 rope_scaling needs factor > 0 and high_freq_factor > "
        "low_freq_factor > 0");
  const double low_wavelen = orig / low, high_wavelen = orig / high;
  std::vector<float> out;
  for (int i = 0; i < c.rope_dims / 2; ++i) {
    const double inv_freq = 1.0 / std::pow(static_cast<double>(c.rope_theta),
                                           2.0 * i / static_cast<double>(c.rope_dims));
    const double wavelen = 2 * M_PI / inv_freq;
    double f = 1.0;
    if (wavelen > low_wavelen) {
      f = factor;
    } else if (!(wavelen < high_wavelen)) {
      const double smooth = (orig / wavelen - low) / (high - low);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

// Reads the RoPE keys into c (theta, linear scale) and, for llama3 scaling, `factors`.
Status read_rope(const json& j, ModelConfig* c, std::vector<float>* factors) {
  // transformers 5 keeps everything in rope_parameters; 4.x has rope_theta and
  // rope_scaling beside the other keys.
  const json* params = find_key(j, "rope_parameters");
  if (params != nullptr && !params->is_object())
    return corrupt("config.json rope_parameters is not an object");
  const json* scaling = params != nullptr ? params : find_key(j, "rope_scaling");
  if (scaling != nullptr && !scaling->is_object())
    return corrupt("config.json rope_scaling is not an object");
  double theta = 10000.0;
  PAGODA_RETURN_IF_ERROR(read_number(j, "rope_theta", &theta));
  if (params != nullptr) PAGODA_RETURN_IF_ERROR(read_number(*params, "rope_theta", &theta));
  if (!(theta > 1)) return corrupt("config.json rope_theta must be > 1");
  c->rope_theta = static_cast<float>(theta);
  if (const json* p = find_key(j, "partial_rotary_factor")) {
    if (!p->is_number() || p->get<double>() != 1.0)
      return unsupported("config.json partial_rotary_factor other than 1 is not supported yet");
  }
  if (scaling == nullptr) return Status::ok();
  std::string type = "default";
  for (const char* key : {"rope_type", "type"})
    if (const json* t = find_key(*scaling, key); t != nullptr && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  if (type == "default") return Status::ok();
  if (type == "linear") {
    double factor = 0;
    PAGODA_RETURN_IF_ERROR(read_number(*scaling, "factor", &factor));
    if (!(factor > 0)) return corrupt("config.json linear rope_scaling needs a positive factor");
    c->rope_freq_scale = static_cast<float>(1.0 / factor);
    return Status::ok();
  }
  if (type == "llama3") {
    PAGODA_ASSIGN_OR_RETURN(*factors, llama3_freq_factors(*scaling, *c));
    c->rope_has_freq_factors = true;
    return Status::ok();
  }
  return unsupported("config.json RoPE scaling type '" + type + "' is not supported yet");
}

}  // namespace

Status read_llama_like_hf_config(const json& j, ModelConfig* c) {
  constexpr int64_t kMaxDim = 1 << 20;
  PAGODA_RETURN_IF_ERROR(read_int(j, "num_hidden_layers", 1, 4096, &c->n_layers, true));
  PAGODA_RETURN_IF_ERROR(read_int(j, "hidden_size", 1, kMaxDim, &c->dim, true));
  PAGODA_RETURN_IF_ERROR(read_int(j, "intermediate_size", 1, kMaxDim, &c->ffn_dim, true));
  PAGODA_RETURN_IF_ERROR(read_int(j, "num_attention_heads", 1, 4096, &c->n_heads, true));
  c->n_kv_heads = c->n_heads;
  PAGODA_RETURN_IF_ERROR(read_int(j, "num_key_value_heads", 1, c->n_heads, &c->n_kv_heads, false));
  if (c->n_heads % c->n_kv_heads != 0)
    return corrupt(str_format("config.json: %d attention heads are not a multiple of %d KV heads",
                              c->n_heads, c->n_kv_heads));
  if (find_key(j, "head_dim") == nullptr && c->dim % c->n_heads != 0)
    return corrupt(str_format("config.json: hidden_size %d is not a multiple of %d heads", c->dim,
                              c->n_heads));
  c->head_dim = c->dim / c->n_heads;
  PAGODA_RETURN_IF_ERROR(read_int(j, "head_dim", 2, 4096, &c->head_dim, false));
  if (c->head_dim % 2 != 0) return corrupt(str_format("odd head size %d", c->head_dim));
  c->rope_dims = c->head_dim;
  c->context_length = 2048;
  PAGODA_RETURN_IF_ERROR(
      read_int(j, "max_position_embeddings", 1, 1 << 24, &c->context_length, false));
  PAGODA_RETURN_IF_ERROR(read_int(j, "vocab_size", 1, 1 << 24, &c->n_vocab, true));
  double eps = 1e-6;
  PAGODA_RETURN_IF_ERROR(read_number(j, "rms_norm_eps", &eps));
  if (!(eps > 0 && eps < 1)) return corrupt("config.json rms_norm_eps out of range");
  c->rms_eps = static_cast<float>(eps);
  if (const json* act = find_key(j, "hidden_act");
      act != nullptr && !(act->is_string() && act->get<std::string>() == "silu"))
    return unsupported("config.json hidden_act '" +
                       (act->is_string() ? act->get<std::string>() : act->dump()) +
                       "' is not supported (the recipe's feed-forward is SwiGLU: silu)");
  if (const json* t = find_key(j, "tie_word_embeddings")) {
    if (!t->is_boolean()) return corrupt("config.json tie_word_embeddings is not a boolean");
    c->recipe.tied_output = t->get<bool>();
  }
  // Sliding windows: Qwen2 writes sliding_window with use_sliding_window false (checked
  // by its reader); transformers 5 lists each layer's kind.
  if (const json* types = find_key(j, "layer_types")) {
    if (!types->is_array()) return corrupt("config.json layer_types is not a list");
    for (const json& t : *types)
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        return unsupported("config.json layer_types lists '" +
                           (t.is_string() ? t.get<std::string>() : t.dump()) +
                           "' layers: sliding-window attention is not supported yet");
  }
  return Status::ok();
}

Status refuse_use_sliding_window(const json& j) {
  const json* sw = find_key(j, "use_sliding_window");
  if (sw != nullptr && !sw->is_null() && !(sw->is_boolean() && !sw->get<bool>()))
    return unsupported("config.json use_sliding_window: " + sw->dump() +
                       " (sliding-window attention) is not supported yet");
  return Status::ok();
}

Result<HfModelConfig> read_hf_model_config(std::string_view text, const std::string& where) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt("'" + where + "' is not a JSON object");
  const json* archs = find_key(j, "architectures");
  if (archs == nullptr || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    return not_found("'" + where + "' names no architecture (\"architectures\": [...])");
  const std::string name = (*archs)[0].get<std::string>();
  const Architecture* arch = find_hf_architecture(name);
  if (arch == nullptr)
    return unsupported(
        "architecture '" + name + "' in '" + where +
        "' is not supported (supported: " + std::string(supported_hf_architectures()) + ")");
  HfModelConfig out;
  ModelConfig& c = out.config;
  Status s = arch->read_hf_config(j, &c);
  if (s) s = read_rope(j, &c, &out.rope_freq_factors);
  if (!s) return s.with_context("'" + where + "'");
  if (const json* q = find_key(j, "quantization_config")) out.quantization_config = q->dump();
  for (const char* key : {"torch_dtype", "dtype"})
    if (const json* d = find_key(j, key); d != nullptr && d->is_string()) {
      out.dtype = d->get<std::string>();
      break;
    }
  return out;
}

}  // namespace pagoda
