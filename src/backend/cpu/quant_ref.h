// Scalar reference quantizers of single blocks, shared by quantize_row and by the
// portable activation converters so both produce the same bits.
#pragma once

#include "backend/cpu/quant_blocks.h"

namespace pagoda::cpu {

// ggml's reference rules: d = amax / 127, q = roundf(x * (1 / d)) (halves away from
// zero); d is stored as f16 after q is computed with the f32 d.
void quantize_block_q8_0(const float* x, BlockQ8_0* y);
// As Q8_0, plus s = f16(d * sum(q)) with the f32 d.
void quantize_block_q8_1(const float* x, BlockQ8_1* y);
// The activation quantizer of llama.cpp's x86 CPU backend, which differs from the
// reference in two roundings: q = nearbyint(x * (127 / amax)), ties to even (SIMD
// rounding). Activations for Q4_0/Q4_1/Q8_0 weights go through this so that they
// quantize exactly as llama.cpp's would (measured: 7x closer logits on SmolLM2 than
// with the reference rule). Fills d, s and qs as for Q8_1.
void quantize_block_q8_act(const float* x, BlockQ8_1* y);
// ggml's reference rule: max = the signed value of largest magnitude, iscale = -127 / max,
// q = min(127, nearest_int(iscale * x)) (ties to even), d = 1 / iscale, bsums per 16.
void quantize_block_q8_k(const float* x, BlockQ8_K* y);
// Stores q[e] (6 bits, element order e < 256) in y->ql / y->qh; scales and d untouched.
void pack_q6_k_quants(const uint8_t* q, BlockQ6_K* y);

}  // namespace pagoda::cpu
