// The search, per 256-element block:
//  1. Each sub-block (16 or 32 elements) gets the scale (and min) of least weighted
//     squared error (importance() says how elements are weighted) among 21 candidates: the levels
//     are laid over the sub-block's range stretched or shrunk by up to 1 level (0.1 apart), each
//     rounding refitted by least squares. Symmetric formats (Q3_K, Q6_K) try the largest magnitude
//     on either end of their uneven range (-4..3, -32..31), since the negative end has one level
//     more.
//  2. The block's scales (and mins) are quantized against their largest (4, 6 or 8 bits).
//  3. Each sub-block then takes the best of its quantized scale and the two beside it (and
//     so for the min), with every element rounded again against the scale as stored: the
//     scale's rounding is what otherwise clips a sub-block's largest values.
#include "backend/cpu/quant_kquants.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_ref.h"
#include "core/dtype.h"

namespace pagoda::cpu {
namespace {

constexpr int kCandidates = 10;  // each side of the range's own scale, 0.1 level apart

// Round to nearest, ties to even (as lrintf in the default mode), for |f| < 2^22: adding
// 1.5 * 2^23 leaves the integer in the low mantissa bits. Inline and branch-free, where
// lrintf is a library call; out-of-range inputs give some in-range integer (the callers
// clamp), never undefined behaviour.
inline int nearest(float f) {
  const float t = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}
inline float h2f(uint16_t h) {
  return fp16_to_f32(h);
}
inline uint16_t f2h(float f) {
  return f32_to_fp16(f);
}

// How much each of the n elements' squared error counts: the block's rms plus its
// magnitude, so large weights are kept closer without small ones being given up. Measured
// on SmolLM2's K-typed matrices (KL divergence from F16 over 1,536 tokens of text, Q3_K to
// Q6_K files): this weighting and plain squared error were within 5% of each other,
// squared magnitude alone worst; the test holds the result to llama.cpp's own quantizer.
// With an importance matrix (qw: the mean square of the input each weight multiplies,
// from `pagoda imatrix`), that weight is scaled by it: an error on a weight whose input
// is large costs more in the product.
void importance(const float* x, int n, const float* qw, float* w) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const auto rms = static_cast<float>(std::sqrt(ss / n));
  for (int i = 0; i < n; ++i) w[i] = (rms + std::fabs(x[i])) * (qw ? qw[i] : 1.0f);
}

// value = s * q - m, q in [0, levels], s >= 0, m >= 0.
struct Affine {
  float s = 0.0f, m = 0.0f;
};

int affine_q(float x, float is, float m, int levels) {
  return std::clamp(nearest((x + m) * is), 0, levels);
}

float affine_error(const float* x, const float* w, int n, float s, float m, int levels) {
  const float is = s > 0.0f ? 1.0f / s : 0.0f;
  float e = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float r = s * static_cast<float>(affine_q(x[i], is, m, levels)) - m - x[i];
    e += w[i] * r * r;
  }
  return e;
}

Affine fit_affine(const float* x, const float* w, int n, int levels) {
  float lo = 0.0f, hi = x[0];
  double sw = 0, sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sw += w[i];
    sx += w[i] * x[i];
    sxx += w[i] * x[i] * x[i];
  }
  Affine best{std::max(0.0f, hi - lo) / static_cast<float>(levels), -lo};
  if (!(hi > lo)) return best;
  float best_err = affine_error(x, w, n, best.s, best.m, levels);
  for (int t = -kCandidates; t <= kCandidates; ++t) {
    const float is = (static_cast<float>(levels) + 0.1f * static_cast<float>(t)) / (hi - lo);
    float sq = 0, sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const auto q = static_cast<float>(std::clamp(nearest((x[i] - lo) * is), 0, levels));
      sq += w[i] * q;
      sqq += w[i] * q * q;
      sqx += w[i] * q * x[i];
    }
    // Weighted least squares of s q + b against x, with b = -m <= 0; its error from the
    // sums (for these q: rounding again against the fitted scale can only lower it).
    const double det = sw * sqq - sq * sq;
    if (det <= 0 || sqq <= 0) continue;
    double s = (sw * sqx - sq * sx) / det;
    double b = (sx - s * sq) / sw;
    if (b > 0) {
      b = 0;
      s = sqx / sqq;
    }
    if (s <= 0) continue;
    const double e = sxx - 2 * s * sqx - 2 * b * sx + s * s * sqq + 2 * s * b * sq + b * b * sw;
    if (e < best_err) {
      best_err = static_cast<float>(e);
      best = Affine{static_cast<float>(s), static_cast<float>(-b)};
    }
  }
  return best;
}

// Sub-blocks of `sub` elements, affine: fills the block's d and dmin (fp16), each
// sub-block's scale and min (0..scale_max) and each element's q.
void quantize_affine(const float* x, int sub, int levels, int scale_max, uint16_t* d_out,
                     uint16_t* dmin_out, uint8_t* sc, uint8_t* mn, uint8_t* q, const float* qw) {
  const int subs = kQKK / sub;
  Affine fit[16];
  float w[kQKK];
  importance(x, kQKK, qw, w);
  float max_s = 0.0f, max_m = 0.0f;
  for (int j = 0; j < subs; ++j) {
    fit[j] = fit_affine(x + sub * j, w + sub * j, sub, levels);
    max_s = std::max(max_s, fit[j].s);
    max_m = std::max(max_m, fit[j].m);
  }
  *d_out = f2h(max_s / static_cast<float>(scale_max));
  *dmin_out = f2h(max_m / static_cast<float>(scale_max));
  const float d = h2f(*d_out), dmin = h2f(*dmin_out);
  for (int j = 0; j < subs; ++j) {
    const float* xj = x + sub * j;
    const int s0 = d > 0.0f ? std::clamp(nearest(fit[j].s / d), 0, scale_max) : 0;
    const int m0 = dmin > 0.0f ? std::clamp(nearest(fit[j].m / dmin), 0, scale_max) : 0;
    int bs = s0, bm = m0;
    float best = -1.0f;
    for (int ds = -1; ds <= 1; ++ds) {
      for (int dm = -1; dm <= 1; ++dm) {
        const int s = s0 + ds, m = m0 + dm;
        if (s < 0 || s > scale_max || m < 0 || m > scale_max) continue;
        const float e = affine_error(xj, w + sub * j, sub, d * static_cast<float>(s),
                                     dmin * static_cast<float>(m), levels);
        if (best < 0.0f || e < best) {
          best = e;
          bs = s;
          bm = m;
        }
      }
    }
    sc[j] = static_cast<uint8_t>(bs);
    mn[j] = static_cast<uint8_t>(bm);
    const float step = d * static_cast<float>(bs), off = dmin * static_cast<float>(bm);
    const float is = step > 0.0f ? 1.0f / step : 0.0f;
    for (int i = 0; i < sub; ++i)
      q[sub * j + i] = static_cast<uint8_t>(affine_q(xj[i], is, off, levels));
  }
}

// value = s * q, q in [-qn, qn - 1], s of either sign.
int symmetric_q(float x, float is, int qn) {
  return std::clamp(nearest(x * is), -qn, qn - 1);
}

float symmetric_error(const float* x, const float* w, int n, float s, int qn) {
  const float is = s != 0.0f ? 1.0f / s : 0.0f;
  float e = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float r = s * static_cast<float>(symmetric_q(x[i], is, qn)) - x[i];
    e += w[i] * r * r;
  }
  return e;
}

float fit_symmetric(const float* x, const float* w, int n, int qn) {
  float v = 0.0f;  // the value of largest magnitude, with its sign
  double sxx = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(v)) v = x[i];
    sxx += w[i] * x[i] * x[i];
  }
  if (v == 0.0f) return 0.0f;
  float best = v / static_cast<float>(-qn);
  double best_err = symmetric_error(x, w, n, best, qn);
  for (const float end : {static_cast<float>(-qn), static_cast<float>(qn - 1)}) {
    for (int t = -kCandidates; t <= kCandidates; ++t) {
      const float level = end + (end < 0 ? -0.1f : 0.1f) * static_cast<float>(t);
      const float is = level / v;
      float qq = 0, qx = 0;
      for (int i = 0; i < n; ++i) {
        const auto q = static_cast<float>(std::clamp(nearest(x[i] * is), -qn, qn - 1));
        qq += w[i] * q * q;
        qx += w[i] * q * x[i];
      }
      if (qq <= 0) continue;
      // s = qx / qq leaves sxx - qx^2 / qq for these q.
      const double e = sxx - qx * qx / qq;
      if (e < best_err) {
        best_err = e;
        best = static_cast<float>(qx / qq);
      }
    }
  }
  return best;
}

// Sixteen sub-blocks of 16, symmetric: fills d (fp16), each sub-block's signed scale
// (sc_min..sc_max, sc_min < 0 the larger end) and each element's q.
void quantize_symmetric(const float* x, int qn, int sc_min, int sc_max, uint16_t* d_out, int* sc,
                        int* q, const float* qw) {
  constexpr int kSub = 16;
  float fit[16], big = 0.0f, w[kQKK];
  importance(x, kQKK, qw, w);
  for (int j = 0; j < 16; ++j) {
    fit[j] = fit_symmetric(x + kSub * j, w + kSub * j, kSub, qn);
    if (std::fabs(fit[j]) > std::fabs(big)) big = fit[j];
  }
  *d_out = f2h(big / static_cast<float>(sc_min));
  const float d = h2f(*d_out);
  for (int j = 0; j < 16; ++j) {
    const float* xj = x + kSub * j;
    const int s0 = d != 0.0f ? std::clamp(nearest(fit[j] / d), sc_min, sc_max) : 0;
    int bs = s0;
    float best = -1.0f;
    for (int s = std::max(sc_min, s0 - 1); s <= std::min(sc_max, s0 + 1); ++s) {
      const float e = symmetric_error(xj, w + kSub * j, kSub, d * static_cast<float>(s), qn);
      if (best < 0.0f || e < best) {
        best = e;
        bs = s;
      }
    }
    sc[j] = bs;
    const float step = d * static_cast<float>(bs);
    const float is = step != 0.0f ? 1.0f / step : 0.0f;
    for (int i = 0; i < kSub; ++i) q[kSub * j + i] = symmetric_q(xj[i], is, qn);
  }
}

// Element 128n + 32k + l of Q2_K and Q3_K has its 2 low bits at bit 2k of qs[32n + l].
template <typename T>
void put_crumbs(const T* u, uint8_t* qs) {
  std::memset(qs, 0, 64);
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l)
        qs[32 * n + l] |= static_cast<uint8_t>((u[128 * n + 32 * k + l] & 3) << (2 * k));
}

}  // namespace

void quantize_q2_k(const float* x, BlockQ2_K* y, const float* qw) {
  uint8_t sc[16], mn[16], q[kQKK];
  quantize_affine(x, 16, 3, 15, &y->d, &y->dmin, sc, mn, q, qw);
  for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(sc[j] | (mn[j] << 4));
  put_crumbs(q, y->qs);
}

void quantize_q3_k(const float* x, BlockQ3_K* y, const float* qw) {
  int sc[16], q[kQKK];
  quantize_symmetric(x, 4, -32, 31, &y->d, sc, q, qw);
  std::memset(y->scales, 0, sizeof(y->scales));
  for (int j = 0; j < 16; ++j) {
    const int v = sc[j] + 32;  // stored 6 bits: low nibble, then 2 high bits
    if (j < 8)
      y->scales[j] |= static_cast<uint8_t>(v & 0xF);
    else
      y->scales[j - 8] |= static_cast<uint8_t>((v & 0xF) << 4);
    y->scales[8 + (j & 3)] |= static_cast<uint8_t>((v >> 4) << (2 * (j >> 2)));
  }
  int u[kQKK];  // q + 4: bit 2 goes to hmask
  for (int e = 0; e < kQKK; ++e) u[e] = q[e] + 4;
  put_crumbs(u, y->qs);
  std::memset(y->hmask, 0, sizeof(y->hmask));
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l)
        y->hmask[l] |= static_cast<uint8_t>((u[128 * n + 32 * k + l] >> 2) << (4 * n + k));
}

void quantize_q4_k(const float* x, BlockQ4_K* y, const float* qw) {
  uint8_t sc[8], mn[8], q[kQKK];
  quantize_affine(x, 32, 15, 63, &y->d, &y->dmin, sc, mn, q, qw);
  k4_pack_scale_min(sc, mn, y->scales);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      y->qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

void quantize_q5_k(const float* x, BlockQ5_K* y, const float* qw) {
  uint8_t sc[8], mn[8], q[kQKK];
  quantize_affine(x, 32, 31, 63, &y->d, &y->dmin, sc, mn, q, qw);
  k4_pack_scale_min(sc, mn, y->scales);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      y->qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      y->qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, const float* qw) {
  int sc[16], q[kQKK];
  quantize_symmetric(x, 32, -128, 127, &y->d, sc, q, qw);
  for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<int8_t>(sc[j]);
  uint8_t u[kQKK];
  for (int e = 0; e < kQKK; ++e) u[e] = static_cast<uint8_t>(q[e] + 32);
  pack_q6_k_quants(u, y);
}

namespace {

// One 32-element block, symmetric, value = d (q - qn) with q in [0, 2 qn): the searched
// scale rounded to fp16 and tried beside its fp16 neighbours, each element rounded again
// against the scale as stored.
uint16_t weighted_symmetric32(const float* x, const float* qw, int qn, uint8_t* q) {
  float w[kQK];
  importance(x, kQK, qw, w);
  const uint16_t h = f2h(fit_symmetric(x, w, kQK, qn));
  uint16_t best = h;
  float best_err = -1.0f;
  for (int dh = -1; dh <= 1; ++dh) {
    const auto c = static_cast<uint16_t>(h + dh);
    if ((c & 0x7c00) == 0x7c00 || (dh != 0 && (c & 0x7fff) == 0)) continue;
    const float e = symmetric_error(x, w, kQK, h2f(c), qn);
    if (best_err < 0.0f || e < best_err) {
      best_err = e;
      best = c;
    }
  }
  const float d = h2f(best), is = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQK; ++i) q[i] = static_cast<uint8_t>(symmetric_q(x[i], is, qn) + qn);
  return best;
}

// One 32-element block, affine, value = d q + m with q in [0, levels]: d and m rounded
// to fp16, each element rounded again against them.
void weighted_affine32(const float* x, const float* qw, int levels, uint16_t* d_out,
                       uint16_t* m_out, uint8_t* q) {
  float w[kQK];
  importance(x, kQK, qw, w);
  const Affine a = fit_affine(x, w, kQK, levels);
  *d_out = f2h(a.s);
  *m_out = f2h(-a.m);
  const float d = h2f(*d_out), m = -h2f(*m_out), is = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQK; ++i) q[i] = static_cast<uint8_t>(affine_q(x[i], is, m, levels));
}

// Element j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of qs[j - 16].
void put_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}
// Bit 4 of element j at bit j of qh (little-endian u32).
void put_fifth_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}

}  // namespace

void quantize_q4_0_weighted(const float* x, BlockQ4_0* y, const float* qw) {
  uint8_t q[kQK];
  y->d = weighted_symmetric32(x, qw, 8, q);
  put_nibbles(q, y->qs);
}

void quantize_q5_0_weighted(const float* x, BlockQ5_0* y, const float* qw) {
  uint8_t q[kQK];
  y->d = weighted_symmetric32(x, qw, 16, q);
  put_nibbles(q, y->qs);
  put_fifth_bits(q, y->qh);
}

void quantize_q4_1_weighted(const float* x, BlockQ4_1* y, const float* qw) {
  uint8_t q[kQK];
  weighted_affine32(x, qw, 15, &y->d, &y->m, q);
  put_nibbles(q, y->qs);
}

void quantize_q5_1_weighted(const float* x, BlockQ5_1* y, const float* qw) {
  uint8_t q[kQK];
  weighted_affine32(x, qw, 31, &y->d, &y->m, q);
  put_nibbles(q, y->qs);
  put_fifth_bits(q, y->qh);
}

}  // namespace pagoda::cpu
