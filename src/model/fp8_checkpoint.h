// FP8 checkpoints (config.json quantization_config with quant_method "fp8"), as
// transformers' FineGrainedFP8Config and vLLM's Fp8Config write and read them (DeepSeek-V3,
// Qwen3-*-FP8, the per-tensor FP8 checkpoints of AutoFP8). Each quantized Linear `x` holds:
//
//   x.weight            F8_E4M3 [rows, cols] (e4m3fn: no infinities, largest finite 448)
//   block scales        with weight_block_size [bn, bk]: x.weight_scale_inv F32
//                       [ceil(rows / bn), ceil(cols / bk)], one scale per bn x bk tile (the
//                       last row and column of tiles may be partial); w = q * s[r / bn][c / bk]
//                       (despite its name the tensor multiplies)
//   per-tensor scale    without weight_block_size: one float, x.weight_scale (vLLM's name) or
//                       x.weight_scale_inv (transformers' name for the same scalar); w = q * s
//   activation scale    with activation_scheme "static": one float a layer, x.input_scale
//                       (vLLM) or x.activation_scale (transformers)
//
// Each layer loads as the internal block type FP8 (DType::kFP8, backend/cpu/quant_blocks.h
// BlockFP8): the checkpoint's e4m3 bytes as they are, 32 a block under the f32 scale of
// the tile (or tensor) that holds them, so every weight keeps its exact value, 9 bits a
// weight on the CPU. That needs each 32-column run under one scale: cols and bk multiples
// of 32 (per tensor: cols). A layer that misses it loads as today's BF16 instead. The CUDA
// backend stores FP8 as BF16 (model/cuda_weight_types.h): every weight the exact product of
// its e4m3 value and its scale (at most 4 x 24 significant bits, so exact in a double)
// rounded once to BF16, to nearest with ties to even (bf16's normal range; below 2^-126
// the product goes through f32 first), which is also the fallback's conversion. An e4m3fn
// NaN byte (0x7F, 0xFF) in a weight is refused at load.
//
// Activations stay 16-bit. A static activation_scheme's input scales are the range the
// checkpoint's FP8 GEMM clamps and quantizes activations to; Pagoda runs BF16 weights with
// unquantized activations, which is the product those kernels approximate, so the scales
// are checked (one finite, positive float a layer) and then not used, and the load says so
// (a warning). Dynamic checkpoints have no activation tensors (one is refused by name).
//
// modules_to_not_convert (transformers) and ignored_layers (vLLM) are honoured with
// transformers' matching (a pattern matches from the start of the module name up to a
// module boundary, also as a regex, or as a suffix, which includes vLLM's exact names): such
// a Linear must be stored 16-bit and loads as it is; lm_head, which neither library
// quantizes by default, may be 16-bit without being listed. Refused by name: fmt other than
// e4m3 (e5m2...), scale_fmt ue8m0 (E8M0 byte scales), modules_to_convert (FP8 embeddings),
// expert_dtype fp4, weights of another dtype, scales that are not F32/F16/BF16 or have the
// wrong shape, missing or stray tensors, NaN, infinite or negative scales.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <cstring>

#include "backend/cpu/quant_blocks.h"
#include "core/status.h"
#include "model/hf_quant_format.h"

namespace pagoda {

// The format as model/hf_checkpoint.cpp uses it (quant_method "fp8").
Result<std::unique_ptr<HfQuantFormat>> open_fp8_checkpoint_format(std::string_view json_text);

// Whether an FP8 weight of `cols` columns whose scales each cover runs of `group` columns
// keeps its bytes as BlockFP8 (every 32-column block under one scale).
inline bool fp8_keeps_blocks(int64_t cols, int64_t group) {
  return cols % 32 == 0 && group % 32 == 0;
}

// e4m3 row-major rows as BlockFP8 rows, each block's 32 bytes as they are under
// scale_at(row, first column) (fp8_keeps_blocks holds): the FP8 checkpoint and the
// compressed-tensors loaders' one packing.
template <typename ScaleAt>
void pack_fp8_blocks(const uint8_t* w, int64_t rows, int64_t cols, ScaleAt&& scale_at,
                     cpu::BlockFP8* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 32, ++out) {
      out->d = scale_at(r, c);
      std::memcpy(out->qs, w + r * cols + c, 32);
    }
}

// The same weight's bytes and scales as BlockFP8 rows (cols and bk multiples of 32);
// scales as fp8_e4m3_blocks_to_bf16 takes them.
void fp8_e4m3_blocks_to_fp8(const uint8_t* w, int64_t rows, int64_t cols, const float* scales,
                            int64_t bn, int64_t bk, cpu::BlockFP8* out);

// An error naming the first e4m3fn NaN byte (0x7F or 0xFF) of w[0..n), if any.
Status check_e4m3_finite(const std::string& what, const uint8_t* w, int64_t n);

// One e4m3 row-major weight (rows x cols) times its scales into BF16 `out`: scales is
// [ceil(rows / bn), ceil(cols / bk)] row-major (a per-tensor scale is bn = rows, bk = cols).
void fp8_e4m3_blocks_to_bf16(const uint8_t* w, int64_t rows, int64_t cols, const float* scales,
                             int64_t bn, int64_t bk, uint16_t* out);

}  // namespace pagoda
