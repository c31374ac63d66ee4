// Quantizers for the K formats (Q2_K .. Q6_K) that choose each sub-block's scale (and
// min) to minimise the squared error, rather than spanning the sub-block's range: the
// formats' levels are few (4 to 64) and their sub-block scales are themselves quantized
// to 4, 6 or 8 bits, so a range-spanning rule clips and wastes levels. Pagoda's own
// search (described in quant_kquants.cpp); llama.cpp's quantizer is the reference its
// error is tested against (tests/model/test_quantize_vs_llamacpp.py), not its rules.
#pragma once

#include "backend/cpu/quant_blocks.h"

namespace pagoda::cpu {

void quantize_q2_k(const float* x, BlockQ2_K* y);
void quantize_q3_k(const float* x, BlockQ3_K* y);
void quantize_q4_k(const float* x, BlockQ4_K* y);
void quantize_q5_k(const float* x, BlockQ5_K* y);
void quantize_q6_k(const float* x, BlockQ6_K* y);

}  // namespace pagoda::cpu
