// Scalar activation converters: the quantized values come from the same block
// quantizers llama.cpp's x86 backend uses for activations (quant_ref.h), so every ISA
// level feeds its kernels the numbers llama.cpp would.
#include <cstring>

#include "backend/cpu/gemm_kernels.h"
#include "backend/cpu/quant_ref.h"

namespace pagoda::cpu {

void convert_q8_scalar(const float* x, int64_t x_stride, int n, int64_t cols, int g, Q8Aux aux,
                       uint8_t* dst) {
  const Q8ActLayout lay{cols / kQK, g};
  for (int t = 0; t < n; ++t) {
    for (int64_t b = 0; b < lay.nb; ++b) {
      const float* xb = x + t * x_stride + b * kQK;
      float d;
      int32_t word;
      BlockQ8_1 blk;
      quantize_block_q8_act(xb, &blk);
      d = fp16_to_f32(blk.d);
      int sum = 0;
      for (int e = 0; e < kQK; ++e) sum += blk.qs[e];
      if (aux == Q8Aux::kS) {
        const float s = fp16_to_f32(blk.s);
        std::memcpy(&word, &s, 4);
      } else {
        word = sum * (aux == Q8Aux::kSumTimesMinus8 ? -8 : -128);
      }
      std::memcpy(dst + lay.qs(b, t), blk.qs, kQK);
      std::memcpy(dst + lay.d(b, t), &d, 4);
      std::memcpy(dst + lay.aux(b, t), &word, 4);
    }
  }
}

void store_q8k_sums(const int16_t* bsum16, float d, const Q8KActLayout& lay, int64_t b, int t,
                    uint8_t* dst) {
  int16_t bsum32[8];
  int32_t corr16[16];
  for (int j = 0; j < 8; ++j) bsum32[j] = static_cast<int16_t>(bsum16[2 * j] + bsum16[2 * j + 1]);
  for (int j = 0; j < 16; ++j) corr16[j] = -32 * bsum16[j];
  std::memcpy(dst + lay.d(b, t), &d, 4);
  std::memcpy(dst + lay.bsum32(b, t), bsum32, sizeof(bsum32));
  std::memcpy(dst + lay.corr16(b, t), corr16, sizeof(corr16));
}

void convert_q8k_scalar(const float* x, int64_t x_stride, int n, int64_t cols, int g,
                        uint8_t* dst) {
  const Q8KActLayout lay{cols / kQKK, g};
  for (int t = 0; t < n; ++t) {
    for (int64_t b = 0; b < lay.ns; ++b) {
      BlockQ8_K blk;
      quantize_block_q8_k(x + t * x_stride + b * kQKK, &blk);
      std::memcpy(dst + lay.qs(b, t), blk.qs, kQKK);
      store_q8k_sums(blk.bsums, blk.d, lay, b, t, dst);
    }
  }
}

void convert_f32_scalar(const float* x, int64_t x_stride, int n, int64_t cols, int g, FloatRound r,
                        uint8_t* dst) {
  float* out = reinterpret_cast<float*>(dst);
  const int64_t k = (cols + kFloatChunk - 1) / kFloatChunk * kFloatChunk;
  for (int t = 0; t < n; ++t) {
    const float* xt = x + t * x_stride;
    for (int64_t c = 0; c < k; ++c) {
      float v = c < cols ? xt[c] : 0.0f;
      if (r == FloatRound::kF16) v = fp16_to_f32(f32_to_fp16(v));
      if (r == FloatRound::kBF16) v = bf16_to_f32(f32_to_bf16(v));
      out[chunked_index(c, t, g)] = v;
    }
  }
}

}  // namespace pagoda::cpu
