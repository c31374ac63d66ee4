// Quantizers for the K formats (Q2_K .. Q6_K) that choose each sub-block's scale (and
// min) to minimise the squared error, rather than spanning the sub-block's range: the
// formats' levels are few (4 to 64) and their sub-block scales are themselves quantized
// to 4, 6 or 8 bits, so a range-spanning rule clips and wastes levels. Pagoda's own
// search (described in quant_kquants.cpp); llama.cpp's quantizer is the reference its
// error is tested against (tests/model/test_quantize_vs_llamacpp.py), not its rules.
#pragma once

#include "backend/cpu/quant_blocks.h"

namespace pagoda::cpu {

// qw: an importance per element (the mean square of the input the weight multiplies,
// from an importance matrix), or null: it scales each element's share of the error.
void quantize_q2_k(const float* x, BlockQ2_K* y, const float* qw = nullptr);
void quantize_q3_k(const float* x, BlockQ3_K* y, const float* qw = nullptr);
void quantize_q4_k(const float* x, BlockQ4_K* y, const float* qw = nullptr);
void quantize_q5_k(const float* x, BlockQ5_K* y, const float* qw = nullptr);
void quantize_q6_k(const float* x, BlockQ6_K* y, const float* qw = nullptr);

// The 32-element 4- and 5-bit types by the same weighted search (a scale, and an offset
// for Q4_1 / Q5_1, of least weighted squared error), used when an importance matrix is
// given; without one their quantizers are ggml's reference (quant_ref.h), byte for byte.
void quantize_q4_0_weighted(const float* x, BlockQ4_0* y, const float* qw);
void quantize_q4_1_weighted(const float* x, BlockQ4_1* y, const float* qw);
void quantize_q5_0_weighted(const float* x, BlockQ5_0* y, const float* qw);
void quantize_q5_1_weighted(const float* x, BlockQ5_1* y, const float* qw);

}  // namespace pagoda::cpu
