// Portable kernels for every weight type: plain loops over the packed layout, integer
// dot products per block as the SIMD kernels do, for machines without AVX2 and as the
// baseline the SIMD paths are compared with.
#include <algorithm>
#include <cstring>

#include <iterator>

#include "backend/cpu/gemm_kernels.h"

namespace pagoda::cpu {
namespace {

constexpr int kG = 4;

float ld_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
int16_t ld_i16(const uint8_t* p) {
  int16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
int32_t ld_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
float ld_h(const uint8_t* p, int i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return fp16_to_f32(v);
}

// Runs `micro(g, act_group, n_tokens, acc)` for each row group x token group of the tile,
// where acc[t][i] collects row 16g + i for token t, and stores the valid part.
template <typename Micro>
void for_tiles(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1, Micro micro) {
  for (int64_t tg = tg0; tg < tg1; ++tg) {
    const int n = static_cast<int>(std::min<int64_t>(kG, a.n_tokens - tg * kG));
    const uint8_t* act = a.act + static_cast<size_t>(tg) * a.act_group_bytes;
    for (int64_t g = rg0; g < rg1; ++g) {
      float acc[kG][kRowGroup] = {};
      micro(g, act, n, acc);
      const int rows = static_cast<int>(std::min<int64_t>(kRowGroup, a.w->rows - g * kRowGroup));
      for (int t = 0; t < n; ++t)
        for (int i = 0; i < rows; ++i)
          a.y[(tg * kG + t) * a.y_stride + g * kRowGroup + i] = acc[t][i];
    }
  }
}

// ---- 32-element blocks against Q8 activations ----

// Signed weight values of one packed block, [row][column].
void unpack_q4(const uint8_t* q, int offset, int8_t w[kRowGroup][kQK]) {
  for (int i = 0; i < kRowGroup; ++i)
    for (int e = 0; e < kQK; ++e) w[i][e] = static_cast<int8_t>(packed_nibble(q, i, e) - offset);
}

int dot32(const int8_t* w, const int8_t* x) {
  int s = 0;
  for (int e = 0; e < kQK; ++e) s += w[e] * x[e];
  return s;
}

template <DType kType>
void tile_q32(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  const WeightMatrix::Impl& w = *a.w;
  const Q8ActLayout lay{w.nb, kG};
  for_tiles(
      a, rg0, rg1, tg0, tg1, [&](int64_t g, const uint8_t* act, int n, float(*acc)[kRowGroup]) {
        int8_t wq[kRowGroup][kQK];
        for (int64_t b = 0; b < w.nb; ++b) {
          const uint8_t* q = w.quants(g, b);
          const uint8_t* s = w.scales(g, b);
          if (kType == DType::kQ8_0) {
            for (int i = 0; i < kRowGroup; ++i)
              for (int e = 0; e < kQK; ++e)
                wq[i][e] = static_cast<int8_t>(packed_byte(q, i, e) ^ 0x80);
          } else if constexpr (is_table4(kType)) {
            for (int i = 0; i < kRowGroup; ++i)
              for (int e = 0; e < kQK; ++e) wq[i][e] = table4_values(kType)[packed_nibble(q, i, e)];
          } else if (kType == DType::kQ5_0 || kType == DType::kQ5_1) {
            for (int i = 0; i < kRowGroup; ++i)
              for (int e = 0; e < kQK; ++e)
                wq[i][e] =
                    static_cast<int8_t>((packed_nibble(q, i, e) | packed_bit(q + 256, i, e) << 4) -
                                        (kType == DType::kQ5_0 ? 16 : 0));
          } else {
            unpack_q4(q, kType == DType::kQ4_0 ? 8 : 0, wq);
          }
          for (int t = 0; t < n; ++t) {
            const int8_t* xq = reinterpret_cast<const int8_t*>(act + lay.qs(b, t));
            const float dx = ld_f32(act + lay.d(b, t));
            for (int i = 0; i < kRowGroup; ++i) {
              const float dw = table4_f32_scales(kType) ? ld_f32(s + 4 * i) : ld_h(s, i);
              acc[t][i] += static_cast<float>(dot32(wq[i], xq)) * (dw * dx);
              if (kType == DType::kQ4_1 || kType == DType::kQ5_1)
                acc[t][i] += ld_h(s + 32, i) * ld_f32(act + lay.aux(b, t));
            }
          }
        }
      });
}

// Q4_G64/Q4_G128, S sub-blocks of 32 under one scale d and zero point z: per sub-block the
// integer dot of the codes q (0..15) with the token's, less z * sum(x) (sum from the
// activations' -8 * sum aux word, divisible by 8), so d (q - z) x sums exactly in integers
// before the two scales, as Q4_0's fixed zero of 8 does.
template <int S>
void tile_q4g(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  const WeightMatrix::Impl& w = *a.w;
  const Q8ActLayout lay{w.nb * S, kG};
  for_tiles(
      a, rg0, rg1, tg0, tg1, [&](int64_t g, const uint8_t* act, int n, float(*acc)[kRowGroup]) {
        int8_t wq[kRowGroup][kQK];
        for (int64_t b = 0; b < w.nb; ++b) {
          const uint8_t* s = w.scales(g, b);
          for (int j = 0; j < S; ++j) {
            const int64_t sb = S * b + j;
            unpack_q4(w.quants(g, b) + 256 * j, 0, wq);
            for (int t = 0; t < n; ++t) {
              const int8_t* xq = reinterpret_cast<const int8_t*>(act + lay.qs(sb, t));
              const int32_t sum = ld_i32(act + lay.aux(sb, t)) / -8;
              const float dx = ld_f32(act + lay.d(sb, t));
              for (int i = 0; i < kRowGroup; ++i)
                acc[t][i] +=
                    static_cast<float>(dot32(wq[i], xq) - s[32 + i] * sum) * (ld_h(s, i) * dx);
            }
          }
        }
      });
}

// ---- K quants against Q8_K activations ----

template <DType kType>
void tile_k(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  const WeightMatrix::Impl& w = *a.w;
  const Q8KActLayout lay{w.nb, kG};
  for_tiles(a, rg0, rg1, tg0, tg1,
            [&](int64_t g, const uint8_t* act, int n, float(*acc)[kRowGroup]) {
              for (int64_t b = 0; b < w.nb; ++b) {
                const uint8_t* q = w.quants(g, b);
                const uint8_t* s = w.scales(g, b);
                // Signed values per sub-block of 32 (Q6_K: q - 32, Q3_K: q - 4, so their
                // scales apply per 16).
                int8_t wq[8][kRowGroup][kQK];
                for (int j = 0; j < 8; ++j) {
                  for (int i = 0; i < kRowGroup; ++i) {
                    for (int e = 0; e < kQK; ++e) {
                      int v;
                      if (kType == DType::kQ2_K) {
                        v = packed_crumb(q + 128 * j, i, e);
                      } else if (kType == DType::kQ3_K) {
                        const uint8_t* qj = q + 192 * j;
                        v = (packed_crumb(qj, i, e) | packed_bit(qj + 128, i, e) << 2) - 4;
                      } else if (kType == DType::kQ6_K) {
                        const uint8_t* qj = q + 384 * j;
                        v = (packed_nibble(qj, i, e) | packed_crumb(qj + 256, i, e) << 4) - 32;
                      } else if (kType == DType::kQ5_K) {
                        const uint8_t* qj = q + 320 * j;
                        v = packed_nibble(qj, i, e) | packed_bit(qj + 256, i, e) << 4;
                      } else {
                        v = packed_nibble(q + 256 * j, i, e);
                      }
                      wq[j][i][e] = static_cast<int8_t>(v);
                    }
                  }
                }
                for (int t = 0; t < n; ++t) {
                  const int8_t* xq = reinterpret_cast<const int8_t*>(act + lay.qs(b, t));
                  const float dx = ld_f32(act + lay.d(b, t));
                  for (int i = 0; i < kRowGroup; ++i) {
                    if (kType == DType::kQ2_K) {
                      // d * sc * q - dmin * m per 16; the activation's sums per 16 are
                      // its corr16 / -32.
                      int isum = 0, msum = 0;
                      for (int j = 0; j < 16; ++j) {
                        int dot = 0;
                        for (int e = 0; e < 16; ++e)
                          dot += wq[j / 2][i][16 * (j & 1) + e] * xq[16 * j + e];
                        const uint8_t scm = s[64 + 16 * j + i];
                        isum += dot * (scm & 0xF);
                        msum += (scm >> 4) * (ld_i32(act + lay.corr16(b, t) + 4 * j) / -32);
                      }
                      acc[t][i] += static_cast<float>(isum) * (ld_h(s, i) * dx) -
                                   static_cast<float>(msum) * (ld_h(s + 32, i) * dx);
                    } else if (kType == DType::kQ6_K || kType == DType::kQ3_K) {
                      int isum = 0;
                      for (int j = 0; j < 16; ++j) {
                        int dot = 0;
                        for (int e = 0; e < 16; ++e)
                          dot += wq[j / 2][i][16 * (j & 1) + e] * xq[16 * j + e];
                        isum += dot * static_cast<int8_t>(s[32 + 16 * j + i]);
                      }
                      acc[t][i] += static_cast<float>(isum) * (ld_h(s, i) * dx);
                    } else {
                      int isum = 0, msum = 0;
                      for (int j = 0; j < 8; ++j) {
                        isum += dot32(wq[j][i], xq + 32 * j) * s[64 + 16 * j + i];
                        msum += ld_i16(act + lay.bsum32(b, t) + 2 * j) *
                                s[192 + 32 * (j / 2) + 2 * i + (j & 1)];
                      }
                      acc[t][i] += static_cast<float>(isum) * (ld_h(s, i) * dx) -
                                   static_cast<float>(msum) * (ld_h(s + 32, i) * dx);
                    }
                  }
                }
              }
            });
}

// ---- float weights against f32 activations ([k][G]) ----

template <DType kType>
void tile_float(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  const WeightMatrix::Impl& w = *a.w;
  for_tiles(a, rg0, rg1, tg0, tg1,
            [&](int64_t g, const uint8_t* act, int n, float(*acc)[kRowGroup]) {
              const float* x = reinterpret_cast<const float*>(act);
              for (int64_t b = 0; b < w.nb; ++b) {
                const uint8_t* q = w.quants(g, b);
                for (int p = 0; p < (kType == DType::kBF16 ? 2 : 1); ++p) {
                  float wv[kRowGroup];
                  for (int i = 0; i < kRowGroup; ++i) {
                    if (kType == DType::kF32) {
                      wv[i] = ld_f32(q + 4 * i);
                    } else if (kType == DType::kF16) {
                      wv[i] = ld_h(q, i);
                    } else {
                      uint16_t h;
                      std::memcpy(&h, q + 4 * i + 2 * p, 2);
                      wv[i] = bf16_to_f32(h);
                    }
                  }
                  const int64_t c = b * (kType == DType::kBF16 ? 2 : 1) + p;
                  for (int t = 0; t < n; ++t)
                    for (int i = 0; i < kRowGroup; ++i)
                      acc[t][i] += wv[i] * x[chunked_index(c, t, kG)];
                }
              }
            });
}

// ---- FP8 weights against f32 activations ([k][G], as F32's) ----

// An e4m3fn byte as the f16 bits of its value times 2^-8 (exponent and mantissa fields
// line up one to one, subnormals included): what the SIMD kernels widen.
float fp8_over_256(uint8_t b) {
  return fp16_to_f32(static_cast<uint16_t>(((b & 0x7F) << 7) | ((b & 0x80) << 8)));
}

void tile_fp8(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1) {
  const WeightMatrix::Impl& w = *a.w;
  for_tiles(
      a, rg0, rg1, tg0, tg1, [&](int64_t g, const uint8_t* act, int n, float(*acc)[kRowGroup]) {
        const float* x = reinterpret_cast<const float*>(act);
        for (int64_t b = 0; b < w.nb; ++b) {
          const uint8_t* q = w.quants(g, b);
          const uint8_t* s = w.scales(g, b);
          float bsum[kG][kRowGroup] = {};
          for (int e = 0; e < kQK; ++e)
            for (int t = 0; t < n; ++t)
              for (int i = 0; i < kRowGroup; ++i)
                bsum[t][i] += fp8_over_256(q[16 * e + i]) * x[chunked_index(32 * b + e, t, kG)];
          for (int t = 0; t < n; ++t)
            for (int i = 0; i < kRowGroup; ++i)
              acc[t][i] += bsum[t][i] * (ld_f32(s + 4 * i) * 256.0f);
        }
      });
}

size_t q8_bytes(int64_t k) {
  return Q8ActLayout{k / kQK, kG}.bytes();
}
size_t q8k_bytes(int64_t k) {
  return Q8KActLayout{k / kQKK, kG}.bytes();
}
size_t f32_bytes(int64_t k) {
  return chunked_bytes(k, kG);
}

template <Q8Aux kAux>
void conv_q8(const float* x, int64_t xs, int n, int64_t cols, uint8_t* dst) {
  convert_q8_scalar(x, xs, n, cols, kG, kAux, dst);
}
void conv_q8k(const float* x, int64_t xs, int n, int64_t cols, uint8_t* dst) {
  convert_q8k_scalar(x, xs, n, cols, kG, dst);
}
template <FloatRound kRound>
void conv_float(const float* x, int64_t xs, int n, int64_t cols, uint8_t* dst) {
  convert_f32_scalar(x, xs, n, cols, kG, kRound, dst);
}

template <DType kType>
constexpr GemmEntry q32() {
  return {kType, {kG, q8_bytes, conv_q8<q8_aux_of(kType)>, tile_q32<kType>}};
}
template <DType kType>
constexpr GemmEntry kq() {
  return {kType, {kG, q8k_bytes, conv_q8k, tile_k<kType>}};
}
template <DType kType, FloatRound kRound>
constexpr GemmEntry fl() {
  return {kType, {kG, f32_bytes, conv_float<kRound>, tile_float<kType>}};
}
constexpr GemmEntry kTable[] = {
    q32<DType::kQ4_0>(),
    q32<DType::kQ4_1>(),
    q32<DType::kQ8_0>(),
    q32<DType::kQ5_0>(),
    q32<DType::kQ5_1>(),
    q32<DType::kIQ4_NL>(),
    q32<DType::kIQ4_XS>(),
    q32<DType::kMXFP4>(),
    q32<DType::kNF4>(),
    {DType::kQ4_G64, {kG, q8_bytes, conv_q8<Q8Aux::kSumTimesMinus8>, tile_q4g<2>}},
    {DType::kQ4_G128, {kG, q8_bytes, conv_q8<Q8Aux::kSumTimesMinus8>, tile_q4g<4>}},
    kq<DType::kQ4_K>(),
    kq<DType::kQ5_K>(),
    kq<DType::kQ6_K>(),
    kq<DType::kQ3_K>(),
    kq<DType::kQ2_K>(),
    fl<DType::kF32, FloatRound::kNone>(),
    fl<DType::kF16, FloatRound::kF16>(),
    fl<DType::kBF16, FloatRound::kBF16>(),
    {DType::kFP8, {kG, f32_bytes, conv_float<FloatRound::kNone>, tile_fp8}}};

}  // namespace

const GemmKernel* gemm_kernel_generic(DType t) {
  return find_gemm(kTable, std::size(kTable), t);
}

}  // namespace pagoda::cpu
