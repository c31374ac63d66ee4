// pagoda quantize's Hugging Face outputs: a 16-bit checkpoint folder rewritten in a
// quantization scheme's standard on-disk form, which transformers, vLLM and Pagoda load.
//
//   fp8          compressed-tensors "float-quantized": each linear layer's weight in FP8
//                E4M3 with one F32 scale per output channel (amax / 448), activations
//                quantized dynamically per token at run time (llm-compressor's FP8_DYNAMIC).
//   smoothquant  compressed-tensors "int-quantized" W8A8: first SmoothQuant (Xiao et al.)
//                moves activation outliers into the weights: for the products after each
//                RMSNorm (q/k/v, gate/up), column j of their weights is multiplied and the
//                norm's weight j divided by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha),
//                which leaves the function unchanged; then int8 weights with an F32 scale
//                per output channel (amax / 127), activations int8 per token at run time.
//                max|X_j| comes from a calibration run (model/channel_max.h).
//   gptq         the GPTQ checkpoint format ("gptq", v1): 4-bit (or 8-bit) weights with an
//                f16 scale and a zero point per group of 128 input columns, quantized by
//                GPTQ (model/gptq.h) against each layer input's Hessian from a calibration
//                run (model/hessian.h). The Hessians all come from the 16-bit model in one
//                run, not layer by layer after the layers before were quantized
//                (true_sequential: false in the config).
//   awq          the AWQ GEMM format ("awq", version "gemm") that AutoAWQ, transformers and
//                vLLM read: 4-bit weights with an f16 scale and a zero point per group of
//                `group_size` input columns (128 unless asked; every layer's input size must
//                be whole groups), after AWQ (model/awq.h, model/hf_awq.h): per-column
//                scales searched against the output error the calibration Hessian
//                measures, folded into the norms and the products before, and a clip
//                search per row and group. Statistics from one calibration run: mean |x|
//                (model/channel_max.h) and H = sum x x^T (model/hessian.h).
//   nf4          bitsandbytes' 4-bit NF4 as transformers saves a BitsAndBytesConfig model:
//                per block of 64 weights of the flattened matrix an f32 absmax, each
//                weight the nearest NF4 code value, two codes a byte (first in the high
//                nibble), with quant_map and the quant_state JSON (4.5 bits a weight).
//                With double quantization (bnb_4bit_use_double_quant) the absmax values
//                are stored as bytes instead, bitsandbytes' way (model/bnb_double_quant.h):
//                4.127 bits a weight.
//
// With a KV calibration (`--kv-cache-scales`), fp8 and smoothquant folders also carry
// compressed-tensors' FP8 kv_cache_scheme: model.layers.N.self_attn.k_scale / v_scale, the
// largest |key| (after RoPE) and |value| each layer wrote over the calibration text,
// divided by 448 (model/kv_amax.h), which Pagoda's CUDA FP8 cache and vLLM read.
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
#include "model/channel_max.h"
#include "model/gptq.h"
#include "model/hessian.h"
#include "model/hf_awq.h"
#include "model/kv_amax.h"

namespace pagoda {

// The schemes quantize_hf_folder writes.
const std::vector<std::string>& hf_quant_schemes();

struct HfQuantizeReport {
  int n_quantized = 0;
  int n_copied = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  std::string note;  // a scheme's summary of its searches (awq), or empty
};

struct HfQuantizeOptions {
  std::string scheme;  // one of hf_quant_schemes()
  float alpha = 0.5f;  // smoothquant: migration strength
  // smoothquant (max |x|), awq (mean |x|): the calibration statistic
  const ChannelMaxCollector* act_max = nullptr;
  const HessianCollector* hessian = nullptr;  // gptq, awq: the calibration statistic
  // fp8, smoothquant: per-layer FP8 KV-cache scales (amax / 448) as kv_cache_scheme.
  const KvAmaxCollector* kv_amax = nullptr;
  GptqOptions gptq;               // gptq: bits, group size, sym, act order
  bool nf4_double_quant = false;  // nf4: bnb_4bit_use_double_quant (an error elsewhere)
  int64_t awq_group_size = 128;   // awq: input columns per scale and zero point
};

// Schemes that need a calibration run before quantize_hf_folder.
bool hf_scheme_calibrates(const std::string& scheme);

// What can be checked of the input folder before a calibration run: that it is not
// quantized already; for awq, that every decoder linear is whole groups of
// awq_group_size inputs and whole words of outputs (naming the first that is not, and a
// group size that would do).
Status hf_quantize_check(const std::string& in_dir, const HfQuantizeOptions& options);

// `progress(done, total, name)` after each tensor.
Result<HfQuantizeReport> quantize_hf_folder(
    const std::string& in_dir, const std::string& out_dir, const HfQuantizeOptions& options,
    ThreadPool& pool, const std::function<void(size_t, size_t, const std::string&)>& progress);

}  // namespace pagoda
