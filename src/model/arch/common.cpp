#include <string>

#include "model/arch/arch.h"

namespace pagoda {
namespace {

constexpr Architecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", llama_read_config, llama_read_hf_config},
    {"qwen2", "Qwen2ForCausalLM", qwen2_read_config, qwen2_read_hf_config},
    {"qwen3", "Qwen3ForCausalLM", qwen3_read_config, qwen3_read_hf_config},
};

Status require_int(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi, int* out) {
  const auto v = f.get_int(key);
  if (!v) return corrupt("missing or non-integer metadata '" + key + "'");
  if (*v < lo || *v > hi)
    return corrupt(str_format("metadata '%s' = %lld is out of range [%lld, %lld]", key.c_str(),
                              static_cast<long long>(*v), static_cast<long long>(lo),
                              static_cast<long long>(hi)));
  *out = static_cast<int>(*v);
  return Status::ok();
}

}  // namespace

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture& a : kArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

std::string_view supported_architectures() {
  return "llama, qwen2, qwen3";
}

const Architecture* find_hf_architecture(std::string_view hf_name) {
  for (const Architecture& a : kArchitectures)
    if (a.hf_name == hf_name) return &a;
  return nullptr;
}

std::string_view supported_hf_architectures() {
  return "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
}

Result<ModelConfig> read_model_config(const GgufFile& f) {
  const auto arch_name = f.get_string("general.architecture");
  if (!arch_name) return corrupt("model file has no general.architecture");
  const Architecture* arch = find_architecture(*arch_name);
  if (arch == nullptr)
    return unsupported("architecture '" + std::string(*arch_name) +
                       "' is not supported (supported: " + std::string(supported_architectures()) +
                       ")");
  ModelConfig c;
  PAGODA_RETURN_IF_ERROR(arch->read_config(f, &c));
  const GgufTensorInfo* embd = f.find_tensor(kTokEmbdTensor);
  if (embd == nullptr)
    return f.tensors().empty()
               ? invalid_argument("the file has no tensors (a vocabulary-only file?)")
               : not_found(std::string("model file has no tensor '") + kTokEmbdTensor + "'");
  if (embd->ne[0] != c.dim || embd->ne[1] <= 0 || embd->ne[1] > (1 << 24))
    return corrupt(std::string(kTokEmbdTensor) + " has shape " + tensor_shape(*embd));
  c.n_vocab = static_cast<int>(embd->ne[1]);
  c.recipe.tied_output = f.find_tensor(kOutputTensor) == nullptr;
  c.rope_has_freq_factors = f.find_tensor(kRopeFreqsTensor) != nullptr;
  return c;
}

LayerTensors layer_tensors(const ModelConfig& c, int l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  LayerTensors t;
  t.attn_norm = p + "attn_norm.weight";
  t.ffn_norm = p + "ffn_norm.weight";
  t.qkv = {{p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, {q, kv, kv}, c.dim};
  if (c.recipe.qkv_bias) t.qkv_bias = {p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"};
  if (c.recipe.qk_norm) {
    t.q_norm = p + "attn_q_norm.weight";
    t.k_norm = p + "attn_k_norm.weight";
  }
  t.wo = {p + "attn_output.weight", c.dim, q};
  t.gate_up = {{p + "ffn_gate.weight", p + "ffn_up.weight"}, {c.ffn_dim, c.ffn_dim}, c.dim};
  t.down = {p + "ffn_down.weight", c.dim, c.ffn_dim};
  return t;
}

std::vector<std::string> model_tensor_names(const ModelConfig& c) {
  std::vector<std::string> out = {kTokEmbdTensor, kOutputNormTensor};
  if (!c.recipe.tied_output) out.push_back(kOutputTensor);
  if (c.rope_has_freq_factors) out.push_back(kRopeFreqsTensor);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerTensors t = layer_tensors(c, l);
    out.push_back(t.attn_norm);
    out.push_back(t.ffn_norm);
    for (const MatrixParts* m : {&t.qkv, &t.gate_up})
      out.insert(out.end(), m->names.begin(), m->names.end());
    out.push_back(t.wo.name);
    out.push_back(t.down.name);
    out.insert(out.end(), t.qkv_bias.begin(), t.qkv_bias.end());
    for (const std::string* n : {&t.q_norm, &t.k_norm})
      if (!n->empty()) out.push_back(*n);
  }
  return out;
}

Status read_llama_like_config(const GgufFile& f, std::string_view arch_sv, ModelConfig* c) {
  const std::string arch(arch_sv);
  constexpr int64_t kMaxDim = 1 << 20;
  c->arch = arch;
  c->name = std::string(f.get_string("general.name").value_or(arch_sv));
  PAGODA_RETURN_IF_ERROR(require_int(f, arch + ".block_count", 1, 4096, &c->n_layers));
  PAGODA_RETURN_IF_ERROR(require_int(f, arch + ".embedding_length", 1, kMaxDim, &c->dim));
  PAGODA_RETURN_IF_ERROR(require_int(f, arch + ".feed_forward_length", 1, kMaxDim, &c->ffn_dim));
  PAGODA_RETURN_IF_ERROR(require_int(f, arch + ".attention.head_count", 1, 4096, &c->n_heads));
  c->n_kv_heads = c->n_heads;
  if (f.find(arch + ".attention.head_count_kv"))
    PAGODA_RETURN_IF_ERROR(
        require_int(f, arch + ".attention.head_count_kv", 1, c->n_heads, &c->n_kv_heads));
  if (c->n_heads % c->n_kv_heads != 0)
    return corrupt(str_format("%d attention heads are not a multiple of %d KV heads", c->n_heads,
                              c->n_kv_heads));
  c->context_length = 2048;
  if (f.find(arch + ".context_length"))
    PAGODA_RETURN_IF_ERROR(
        require_int(f, arch + ".context_length", 1, 1 << 24, &c->context_length));
  if (c->dim % c->n_heads != 0 && !f.find(arch + ".attention.key_length"))
    return corrupt(
        str_format("embedding width %d is not a multiple of %d heads", c->dim, c->n_heads));
  c->head_dim = c->dim / c->n_heads;
  if (f.find(arch + ".attention.key_length"))
    PAGODA_RETURN_IF_ERROR(require_int(f, arch + ".attention.key_length", 1, 4096, &c->head_dim));
  if (f.find(arch + ".attention.value_length")) {
    int v = 0;
    PAGODA_RETURN_IF_ERROR(require_int(f, arch + ".attention.value_length", 1, 4096, &v));
    if (v != c->head_dim) return unsupported("different key and value head sizes");
  }
  if (c->head_dim % 2 != 0) return corrupt(str_format("odd head size %d", c->head_dim));
  c->rope_dims = c->head_dim;
  if (f.find(arch + ".rope.dimension_count"))
    PAGODA_RETURN_IF_ERROR(
        require_int(f, arch + ".rope.dimension_count", 2, c->head_dim, &c->rope_dims));
  if (c->rope_dims % 2 != 0) return corrupt("odd RoPE dimension count");
  if (auto eps = f.get_float(arch + ".attention.layer_norm_rms_epsilon")) {
    if (!(*eps > 0 && *eps < 1)) return corrupt("RMS norm epsilon out of range");
    c->rms_eps = static_cast<float>(*eps);
  }
  if (auto base = f.get_float(arch + ".rope.freq_base")) {
    if (!(*base > 1)) return corrupt("rope.freq_base must be > 1");
    c->rope_theta = static_cast<float>(*base);
  }
  const auto scaling = f.get_string(arch + ".rope.scaling.type");
  const auto factor = f.get_float(arch + ".rope.scaling.factor");
  if (scaling && *scaling == "linear") {
    if (!factor || !(*factor > 0)) return corrupt("linear RoPE scaling without a positive factor");
    c->rope_freq_scale = static_cast<float>(1.0 / *factor);
  } else if (scaling && *scaling != "none") {
    return unsupported("RoPE scaling type '" + std::string(*scaling) + "' is not supported yet");
  } else if (!scaling) {
    // Older files give only the scale: rope.scale_linear.
    if (auto lin = f.get_float(arch + ".rope.scale_linear"); lin && *lin > 0 && *lin != 1)
      c->rope_freq_scale = static_cast<float>(1.0 / *lin);
  }
  return Status::ok();
}

}  // namespace pagoda
