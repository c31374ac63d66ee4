// The architectures Pagoda can run. Each lives in its own file in this folder: how its
// GGUF metadata maps onto ModelConfig, and its layer recipe (recipe.h), which both
// backends execute (model/forward.cpp on the CPU, model/cuda/cuda_forward.cpp).
// README.md says how to add one.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace pagoda {

struct Architecture {
  std::string_view name;     // general.architecture
  std::string_view hf_name;  // its entry in a Hugging Face config.json's "architectures"
  // Fills the hyperparameters and config->recipe from the file's metadata.
  Status (*read_config)(const GgufFile& file, ModelConfig* config);
  // The same from a checkpoint's config.json (arch/hf_config.cpp). Its recipe is the
  // checkpoint's: Hugging Face Q/K rows are not permuted for RoPE on adjacent pairs as
  // llama.cpp's converter permutes them, so every HF layout rotates halves (NeoX).
  Status (*read_hf_config)(const nlohmann::json& config, ModelConfig* out);
};

// nullptr for architectures Pagoda does not support.
const Architecture* find_architecture(std::string_view name);
// By the config.json name ("LlamaForCausalLM"); nullptr when unsupported.
const Architecture* find_hf_architecture(std::string_view hf_name);
// Comma-separated config.json names, for error messages.
std::string_view supported_hf_architectures();
// Comma-separated list for error messages.
std::string_view supported_architectures();

// Reads the keys every llama-like architecture stores under "<arch>.": block_count,
// embedding_length, feed_forward_length, attention.head_count[_kv], rms epsilon,
// context_length, rope.freq_base, rope.dimension_count, attention.key_length, rope
// scaling (none or linear; others are refused with a clear error).
Status read_llama_like_config(const GgufFile& file, std::string_view arch, ModelConfig* config);

// A GGUF model's whole configuration, as every backend and the ledger take it: the
// architecture's read_config, the vocabulary size from token_embd.weight, whether the output
// is tied to the embedding, whether llama3 RoPE factors are present.
Result<ModelConfig> read_model_config(const GgufFile& file);

// The GGUF tensors a recipe reads, by role; stacked products list their parts in order.
struct MatrixParts {
  std::vector<std::string> names;
  std::vector<int64_t> rows;  // of each part
  int64_t cols = 0;
};
// A product of one matrix ([cols] x rows).
struct MatrixTensor {
  std::string name;
  int64_t rows = 0, cols = 0;
};
struct LayerTensors {
  std::string attn_norm, ffn_norm;  // vectors of dim
  MatrixParts qkv, gate_up;         // stacked where the types agree
  MatrixTensor wo, down;
  std::vector<std::string> qkv_bias;  // q, k, v biases; empty without
  std::string q_norm, k_norm;         // per-head RMSNorm weights (head_dim); empty without
};
LayerTensors layer_tensors(const ModelConfig& c, int layer);
// Every tensor the loaders read for `c`: the embedding, output norm, output matrix unless
// tied, RoPE factors when present, and each layer's layer_tensors.
std::vector<std::string> model_tensor_names(const ModelConfig& c);
inline constexpr const char* kTokEmbdTensor = "token_embd.weight";
inline constexpr const char* kOutputNormTensor = "output_norm.weight";
inline constexpr const char* kOutputTensor = "output.weight";
inline constexpr const char* kRopeFreqsTensor = "rope_freqs.weight";

// Hugging Face checkpoints (config.json, arch/hf_config.cpp).
struct HfModelConfig {
  ModelConfig config;  // n_vocab from vocab_size; recipe.tied_output from tie_word_embeddings
  // llama3 RoPE scaling: the per-dimension divisors llama.cpp's converter stores as
  // rope_freqs.weight (rope_dims / 2 of them), computed from rope_scaling; empty without.
  std::vector<float> rope_freq_factors;
  std::string dtype;  // torch_dtype (or dtype), "" when absent
  // quantization_config as JSON text when config.json has one (its quant_method is then
  // "compressed-tensors": others are refused), "" without.
  std::string quantization_config;
};
// Reads config.json's text: the architecture from "architectures" (refused by name when
// unsupported), the hyperparameters, and any key that would change the math in a way
// Pagoda does not run (sliding windows, o_proj/MLP biases, unknown RoPE scaling,
// quantization_config) refused by name. `where` names the file in messages.
Result<HfModelConfig> read_hf_model_config(std::string_view json_text, const std::string& where);
// The config.json keys every llama-like architecture shares (hidden_size,
// num_hidden_layers, ..., rope_theta / rope_scaling or transformers 5's rope_parameters).
Status read_llama_like_hf_config(const nlohmann::json& config, ModelConfig* out);

// Qwen's config.json switch for sliding-window layers: refused when true (the recipe's
// sliding window is not run yet), fine when false or absent.
Status refuse_use_sliding_window(const nlohmann::json& config);

// Llama-family checkpoint tensor names (Llama, Qwen2, Qwen3) and the GGUF names the loaders use:
// model.embed_tokens.weight <-> token_embd.weight, model.layers.N.self_attn.q_proj.weight
// <-> blk.N.attn_q.weight, ... nullopt for a name outside the family's set.
std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf_name);
// Backwards, for messages; the name itself when it has no checkpoint counterpart.
std::string gguf_to_hf_tensor_name(std::string_view gguf_name);
// Tensors a checkpoint may hold that change nothing (saved RoPE inverse frequencies).
bool hf_tensor_ignored(std::string_view hf_name);

Status llama_read_config(const GgufFile& file, ModelConfig* config);
Status qwen2_read_config(const GgufFile& file, ModelConfig* config);
Status qwen3_read_config(const GgufFile& file, ModelConfig* config);
Status llama_read_hf_config(const nlohmann::json& config, ModelConfig* out);
Status qwen2_read_hf_config(const nlohmann::json& config, ModelConfig* out);
Status qwen3_read_hf_config(const nlohmann::json& config, ModelConfig* out);

}  // namespace pagoda
