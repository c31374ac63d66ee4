// pagoda quantize's Hugging Face outputs: a 16-bit checkpoint folder rewritten in a
// quantization scheme's standard on-disk form, which transformers, vLLM and Pagoda load.
//
//   fp8   compressed-tensors "float-quantized": each linear layer's weight in FP8 E4M3
//         with one F32 scale per output channel (amax / 448), activations quantized
//         dynamically per token at run time (what llm-compressor's FP8_DYNAMIC writes).
//
// The linear layers of the decoder (q/k/v/o, gate/up/down projections) are quantized;
// embeddings, norms and lm_head stay as they are. The folder's other files (tokenizer,
// generation config, chat template) are copied and config.json gains the
// quantization_config.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace pagoda {

// The schemes quantize_hf_folder writes.
const std::vector<std::string>& hf_quant_schemes();

struct HfQuantizeReport {
  int n_quantized = 0;
  int n_copied = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
};

// `progress(done, total, name)` after each tensor.
Result<HfQuantizeReport> quantize_hf_folder(
    const std::string& in_dir, const std::string& out_dir, const std::string& scheme,
    ThreadPool& pool, const std::function<void(size_t, size_t, const std::string&)>& progress);

}  // namespace pagoda
