// AWQ and GPTQ checkpoints (config.json quantization_config with quant_method "awq" or
// "gptq", as AutoAWQ, AutoGPTQ and GPTQModel write them): which tensors make a layer, and
// how its integer codes become blocks the backends multiply. Both store, per nn.Linear
// of in x out, the codes q, per-group zero points z and f16 scales s, and mean
// w = s (q - z), group g(i) of input column i:
//
//   AWQ GEMM   qweight int32 [in, out/8], eight 4-bit codes of one input row to a word in
//              AWQ's interleaved order (output column 8j + k in nibble {0,4,1,5,2,6,3,7}[k]
//              of word j); qzeros int32 [in/g, out/8] in the same order; scales [in/g, out];
//              g(i) = i / group_size.
//   GPTQ       qweight int32 [in * bits / 32, out], 32/bits codes of one output column to a
//              word along the input (input i in bits (i % (32/bits)) * bits of word
//              i / (32/bits)); qzeros int32 [groups, out * bits / 32] packed along the
//              output the same way; scales [groups, out]; g_idx int32 [in] gives g(i)
//              (act-order checkpoints permute it). checkpoint_format "gptq" (v1) stores
//              z - 1 (so z = (stored + 1) mod 2^bits, as the reference dequantizers read
//              it), "gptq_v2" stores z.
//
// Conversion, per row, into the types the backends run:
//   - 4-bit, every run of 128 (else 64) columns in one group: Q4_G128 (Q4_G64), the codes,
//     the scale and the zero point as they are: exact, 4.25 (4.5) bits a weight;
//   - else, every 32-column block in one group, 4-bit: Q4_1 (d = s, m = -s z: exact up to
//     the f16 rounding of m), or Q4_0 (d = s, exact) when every zero point of the layer
//     is 8 (GPTQ sym);
//   - the same, 8-bit with every zero point 128 (GPTQ sym): Q8_0 with q - 128 as int8 and
//     d = s (exact);
//   - otherwise (8-bit asymmetric; act-order g_idx putting two groups in one block; a
//     group size that is not a multiple of 32): the dequantized weights requantized to
//     Q8_0 (d = max|w| / 127 per block), an extra error of half a Q8_0 step at most.
// Scales stored as BF16 or F32 round to f16 in d.
//
// Refused by name: AWQ versions other than gemm (gemv, gemv_fast, marlin, exllama, ipex),
// AWQ zero_point false (AutoAWQ's GEMM layers require zero points), bits other than 4
// (AWQ) or 4 and 8 (GPTQ), other GPTQ checkpoint formats (marlin, bitblas, gptq_p...),
// quantized lm_head, per-module `dynamic` overrides, pack dtypes other than int32, and
// any config key Pagoda does not know (a key that might change the weights is not read
// past).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/hf_quant_format.h"

namespace pagoda {

struct AgConfig {
  bool awq = true;                       // else GPTQ
  int bits = 4;                          // 4 (AWQ, GPTQ) or 8 (GPTQ)
  int group_size = -1;                   // input columns per group; -1: one group per row
  bool v1_zeros = false;                 // GPTQ checkpoint_format "gptq": stored zero = z - 1
  bool desc_act = false;                 // GPTQ act-order: g_idx required
  std::vector<std::string> not_convert;  // AWQ modules_to_not_convert (substrings)
};

// Parses quantization_config (JSON text) for "awq" or "gptq"; unsupported options
// refused by name.
Result<AgConfig> parse_awq_gptq_config(std::string_view json_text);

// A layer's codes, decoded: rows = out features, cols = in features.
struct AgCodes {
  int64_t rows = 0, cols = 0, n_groups = 1;
  std::vector<uint8_t> q;      // rows x cols, q[r * cols + c]
  std::vector<uint8_t> zero;   // n_groups x rows, zero[g * rows + r]
  std::vector<float> scale;    // n_groups x rows
  std::vector<int32_t> group;  // cols: the group of each input column
};

// How a layer converts (from its zero points and groups, before reading its codes).
struct AgPlan {
  DType type = DType::kQ4_G128;
  bool requantized = false;  // Q8_0 from the dequantized weights
};
AgPlan ag_plan(int bits, const std::vector<uint8_t>& zero, const std::vector<int32_t>& group,
               int64_t cols);
// The codes as rows x row_bytes(plan.type, cols) bytes (cols a multiple of 32).
void ag_convert(const AgCodes& codes, int bits, const AgPlan& plan, uint8_t* out);

// The format as model/hf_checkpoint.cpp uses it (quant_method "awq" or "gptq").
Result<std::unique_ptr<HfQuantFormat>> open_awq_gptq_format(std::string_view json_text);

}  // namespace pagoda
