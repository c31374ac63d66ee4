// Re-encoding rows from one GGUF block type to another, for a backend that multiplies
// fewer types than files hold (the CUDA backend takes only the 32-element formats, see
// model/cuda_weight_types.h). Exact where the target holds the source's values:
//   Q4_0, Q5_0 -> Q8_0: the same d, q - 8 (q - 16) as a byte; Q8_1 -> Q8_0: its d and bytes.
//   Q4_K -> Q4_1: a Q4_K sub-block of 32 is a Q4_1 block with step d * sc and offset
//     -dmin * m; those are rounded to fp16 (relative error <= 2^-11 each), the 4-bit
//     quants are kept.
// Anything else is dequantized to f32 and quantized again with the reference quantizer
// (quantize_row); into Q8_0 that moves each weight by at most half a step (max |w| of its
// 32-element block / 254) plus the fp16 rounding of the step.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace pagoda::cpu {

// dst (row_bytes(to, n)) = the n elements of src (type `from`) in type `to`; n must be a
// multiple of both types' block sizes. Errors on types quantize_row / dequantize_row do
// not take and on a Q4_K step or offset beyond fp16's range.
Status convert_row(DType from, const void* src, DType to, void* dst, int64_t n);

}  // namespace pagoda::cpu
