// Llama-family checkpoint tensor names against the GGUF names layer_tensors (common.cpp)
// gives the loaders. One table, read both ways.
#include <cctype>
#include <string>

#include "model/arch/arch.h"

namespace pagoda {
namespace {

struct NamePair {
  std::string_view hf, gguf;
};
constexpr NamePair kGlobal[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
// After "model.layers.N." and "blk.N.". Biases the recipe does not read are mapped too,
// so that a checkpoint holding them is refused by name rather than run without them.
constexpr NamePair kLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.bias", "ffn_down.bias"},
};

// "PREFIX<digits>.rest": the layer digits and the rest, or false.
bool split_layer(std::string_view name, std::string_view prefix, std::string_view* layer,
                 std::string_view* rest) {
  if (name.substr(0, prefix.size()) != prefix) return false;
  size_t i = prefix.size();
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  // 1 to 6 digits, no leading zero but for 0 itself: one name per layer.
  const size_t digits = i - prefix.size();
  if (digits == 0 || digits > 6 || i >= name.size() || name[i] != '.') return false;
  if (digits > 1 && name[prefix.size()] == '0') return false;
  *layer = name.substr(prefix.size(), digits);
  *rest = name.substr(i + 1);
  return true;
}

}  // namespace

std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf) {
  for (const NamePair& p : kGlobal)
    if (p.hf == hf) return std::string(p.gguf);
  std::string_view layer, rest;
  if (!split_layer(hf, "model.layers.", &layer, &rest)) return std::nullopt;
  for (const NamePair& p : kLayer)
    if (p.hf == rest) return "blk." + std::string(layer) + "." + std::string(p.gguf);
  return std::nullopt;
}

std::string gguf_to_hf_tensor_name(std::string_view gguf) {
  for (const NamePair& p : kGlobal)
    if (p.gguf == gguf) return std::string(p.hf);
  std::string_view layer, rest;
  if (split_layer(gguf, "blk.", &layer, &rest))
    for (const NamePair& p : kLayer)
      if (p.gguf == rest) return "model.layers." + std::string(layer) + "." + std::string(p.hf);
  return std::string(gguf);
}

bool hf_tensor_ignored(std::string_view hf) {
  std::string_view layer, rest;
  return split_layer(hf, "model.layers.", &layer, &rest) && rest == "self_attn.rotary_emb.inv_freq";
}

}  // namespace pagoda
