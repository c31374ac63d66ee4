// The architectures Pagoda can run. Each lives in its own file in this folder and says
// how its GGUF metadata maps onto ModelConfig and which optional tensors it uses; the
// layer computation they share is in model/forward.cpp (and model/cuda/cuda_forward.cpp).
#pragma once

#include <string_view>

#include "core/status.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace pagoda {

struct Architecture {
  std::string_view name;  // general.architecture
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

Status llama_read_config(const GgufFile& file, ModelConfig* config);
Status qwen2_read_config(const GgufFile& file, ModelConfig* config);

}  // namespace pagoda
