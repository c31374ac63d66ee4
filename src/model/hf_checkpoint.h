// A Hugging Face checkpoint folder as a TensorSource: config.json (arch/hf_config.cpp)
// and model.safetensors, or the shards that model.safetensors.index.json lists, each
// mapped once. Tensor names are mapped onto the GGUF names the loaders use
// (arch/hf_names.cpp); every tensor must be one the architecture's recipe reads, and in
// F32, F16 or BF16, or quantized as config.json's quantization_config says
// (model/hf_quant_format.h: each format's layers converted to a block type when a loader
// asks for the matrix). llama3 RoPE scaling adds rope_freqs.weight, computed from
// config.json as llama.cpp's converter computes it.
//
// The tensors stay in the shards' mappings: a loader copies (or converts) each into the
// backend's memory and releases its pages, so the host holds about one tensor of the
// checkpoint beyond what the backend keeps.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/tensor_source.h"

namespace pagoda {

Result<std::unique_ptr<TensorSource>> open_hf_checkpoint(const std::string& dir);

}  // namespace pagoda
