// The architectures Pagoda can run. Each lives in its own file in this folder: how its
// GGUF metadata maps onto ModelConfig, and its layer recipe (recipe.h), which both
// backends execute (model/forward.cpp on the CPU, model/cuda/cuda_forward.cpp).
// README.md says how to add one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace pagoda {

struct Architecture {
  std::string_view name;  // general.architecture
  // Fills the hyperparameters and config->recipe from the file's metadata.
  Status (*read_config)(const GgufFile& file, ModelConfig* config);
};

// nullptr for architectures Pagoda does not support.
const Architecture* find_architecture(std::string_view name);
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
struct LayerTensors {
  std::string attn_norm, ffn_norm;  // vectors of dim
  MatrixParts qkv, wo, gate_up, down;
  std::vector<std::string> qkv_bias;  // q, k, v biases; empty without
};
LayerTensors layer_tensors(const ModelConfig& c, int layer);
inline constexpr const char* kTokEmbdTensor = "token_embd.weight";
inline constexpr const char* kOutputNormTensor = "output_norm.weight";
inline constexpr const char* kOutputTensor = "output.weight";
inline constexpr const char* kRopeFreqsTensor = "rope_freqs.weight";

Status llama_read_config(const GgufFile& file, ModelConfig* config);
Status qwen2_read_config(const GgufFile& file, ModelConfig* config);

}  // namespace pagoda
