// The attention kernel, written once in C++ with GCC vector extensions and compiled per
// ISA by attention_{generic,avx2,avx512}.cpp (each defines PAGODA_ATTN_NS before
// including this), so the same source becomes SSE, AVX2 or AVX-512 code.
//
// Work is tiled: a tile is every query head of one KV head at up to kTileQ positions,
// so each K/V block is converted from fp16 once and used by all queries of the tile.
// The tile's score rows (rows x visible keys) are kept, normalised, then applied to V.
//
// The arithmetic follows llama.cpp's CPU attention (without flash attention) operand for
// operand, because that is the reference our outputs are checked against and the
// quantized activations downstream amplify any difference: the query and the softmax
// weights are rounded to fp16 (K and V are fp16 in the cache), products are exact in f32,
// the scale is applied to the f32 score, and the softmax normaliser is summed in double.
// GPU attention kernels round the same operands to fp16.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/attention.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_ref.h"
#include "core/dtype.h"

namespace pagoda::cpu::PAGODA_ATTN_NS {

namespace {

constexpr int kTileQ = 16;  // query positions per tile
constexpr int kQ = kKvBlockQuantum;
#include "backend/cpu/vmath_impl.h"

inline void f16_to_f32(const uint16_t* src, float* dst, int n) {
  int i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

inline void f32_to_f16(const float* src, uint16_t* dst, int n) {
  int i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}

// Rounds each value to the nearest fp16 and back.
inline void round_to_f16(float* x, int n) {
  uint16_t h[256];
  for (int i = 0; i < n; i += 256) {
    const int m = std::min(256, n - i);
    f32_to_f16(x + i, h, m);
    f16_to_f32(h, x + i, m);
  }
}

// 16 signed bytes as 16 floats. Intrinsics because GCC turns __builtin_convertvector
// from int8 lanes into scalar code; the generic build converts a lane at a time.
inline V16 i8x16_to_f32(const int8_t* p) {
  V16 r;
#if defined(__AVX512F__)
  const __m512 f = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  std::memcpy(&r, &f, sizeof(r));
#elif defined(__AVX2__)
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
  std::memcpy(&r, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char*>(&r) + sizeof(lo), &hi, sizeof(hi));
#else
  for (int i = 0; i < 16; ++i) r[i] = static_cast<float>(p[i]);
#endif
  return r;
}

// A block's keys of KV head g as f32, transposed ([d][slot]), from either pool. In the
// 8-bit pool each key has one scale per 32 dimensions, so a row of slots takes a vector
// of scales (the block size is a multiple of 16).
inline void keys_to_f32(const KvLayer& kv, int32_t block, int g, float* kt) {
  const int hd = kv.head_dim, bs = kv.block_size;
  if (!kv.q8()) {
    f16_to_f32(kv.k + kv.head_offset(block, g), kt, hd * bs);
    return;
  }
  const int8_t* q = kv.k8 + kv.head_offset(block, g);
  const uint16_t* sc = kv.k_scale + kv.scale_offset(block, g);
  alignas(64) float d[256];
  for (int d0 = 0; d0 < hd; d0 += 32)
    for (int j0 = 0; j0 < bs; j0 += 256) {
      const int m = std::min(256, bs - j0);
      f16_to_f32(sc + (d0 / 32) * bs + j0, d, m);  // these dimensions' scale of each key
      for (int i = d0; i < d0 + 32; ++i) {
        const int8_t* qi = q + i * bs + j0;
        float* ki = kt + i * bs + j0;
        for (int j = 0; j < m; j += 16) store16(ki + j, load16(d + j) * i8x16_to_f32(qi + j));
      }
    }
}

// The first n values ([slot][d]) of a block's V for KV head g as f32, from either pool.
inline void values_to_f32(const KvLayer& kv, int32_t block, int g, int n, float* vb) {
  const int hd = kv.head_dim;
  if (!kv.q8()) {
    f16_to_f32(kv.v + kv.head_offset(block, g), vb, n * hd);
    return;
  }
  const int8_t* q = kv.v8 + kv.head_offset(block, g);
  const uint16_t* sc = kv.v_scale + kv.scale_offset(block, g);
  for (int j = 0; j < n; ++j)
    for (int d0 = 0; d0 < hd; d0 += 32) {
      const V16 d = splat(fp16_to_f32(sc[j * (hd / 32) + d0 / 32]));
      const int8_t* qj = q + j * hd + d0;
      float* vj = vb + j * hd + d0;
      store16(vj, d * i8x16_to_f32(qj));
      store16(vj + 16, d * i8x16_to_f32(qj + 16));
    }
}

// Scratch for one tile, reused across calls on the same thread.
struct TileScratch {
  std::vector<float> q, s, acc, kt, vb;
};

// Scores of `nr` (<= 4) query rows against 16 keys whose transposed f32 values are kt
// ([d][16]); four independent accumulators keep the FMA pipes busy.
template <int NR>
inline void scores16(const float* q, int hd, const float* kt, float* out, int64_t out_stride,
                     float scale) {
  V16 acc[NR];
  for (int i = 0; i < NR; ++i) acc[i] = V16{};
  for (int d = 0; d < hd; ++d) {
    const V16 k = load16(kt + d * kQ);
    for (int i = 0; i < NR; ++i) acc[i] += splat(q[i * hd + d]) * k;
  }
  for (int i = 0; i < NR; ++i) store16(out + i * out_stride, acc[i] * scale);
}

// acc[row][d0 .. d0+16*ND) += sum_j p[row][j] * v[j][same], NR rows at a time, with the
// NR x ND accumulators held in registers across the keys.
template <int NR, int ND>
inline void apply_v_chunk(const float* p, int64_t p_stride, const float* vb, int hd, int d0,
                          int n_keys, float* acc) {
  V16 a[NR][ND];
  for (int i = 0; i < NR; ++i)
    for (int c = 0; c < ND; ++c) a[i][c] = load16(acc + i * hd + d0 + 16 * c);
  for (int j = 0; j < n_keys; ++j) {
    const float* vr = vb + j * hd + d0;
    V16 v[ND];
    for (int c = 0; c < ND; ++c) v[c] = load16(vr + 16 * c);
    for (int i = 0; i < NR; ++i) {
      const V16 pj = splat(p[i * p_stride + j]);
      for (int c = 0; c < ND; ++c) a[i][c] += pj * v[c];
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int c = 0; c < ND; ++c) store16(acc + i * hd + d0 + 16 * c, a[i][c]);
}

template <int NR>
inline void apply_v16(const float* p, int64_t p_stride, const float* vb, int hd, int n_keys,
                      float* acc) {
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) apply_v_chunk<NR, 4>(p, p_stride, vb, hd, d0, n_keys, acc);
  for (; d0 + 16 <= hd; d0 += 16) apply_v_chunk<NR, 1>(p, p_stride, vb, hd, d0, n_keys, acc);
  // Head sizes that are not a multiple of 16 (tiny models): the rest, one lane at a time.
  for (int d = d0; d < hd; ++d)
    for (int i = 0; i < NR; ++i) {
      float a = acc[i * hd + d];
      for (int j = 0; j < n_keys; ++j) a += p[i * p_stride + j] * vb[j * hd + d];
      acc[i * hd + d] = a;
    }
}

// One tile: query rows are (position t in [t0, t1)) x (head in the KV head's group),
// ordered position-major.
void attend_tile(const KvLayer& kv, const AttentionSeq& s, const AttentionParams& p, int g, int t0,
                 int t1, const float* q, int64_t q_stride, float* out, int64_t out_stride,
                 TileScratch& ts) {
  const int hd = kv.head_dim, bs = kv.block_size;
  const int group = p.n_heads / kv.n_kv_heads;
  const int nrows = (t1 - t0) * group;
  const int n_keys = s.pos0 + t1;  // keys visible to the tile's last query
  const int keys_padded = (n_keys + kQ - 1) / kQ * kQ;
  ts.q.resize(static_cast<size_t>(nrows) * hd);
  ts.s.resize(static_cast<size_t>(nrows) * keys_padded);
  ts.acc.assign(static_cast<size_t>(nrows) * hd, 0.0f);
  ts.kt.resize(static_cast<size_t>(hd) * bs);
  ts.vb.resize(static_cast<size_t>(bs) * hd);
  float* qs = ts.q.data();
  float* S = ts.s.data();
  for (int t = t0; t < t1; ++t)
    for (int j = 0; j < group; ++j) {
      const float* src = q + static_cast<int64_t>(s.q_row + t) * q_stride + (g * group + j) * hd;
      float* dst = qs + static_cast<size_t>((t - t0) * group + j) * hd;
      std::memcpy(dst, src, sizeof(float) * hd);
      round_to_f16(dst, hd);
    }
  const int n_blocks = (n_keys + bs - 1) / bs;

  // Scores for every (row, key) of the tile; keys past a row's position are masked below.
  for (int b = 0; b < n_blocks; ++b) {
    const int base = b * bs;
    const int n_valid = std::min(bs, n_keys - base);
    keys_to_f32(kv, s.blocks[b], g, ts.kt.data());  // [d][slot]
    for (int sub = 0; sub < n_valid; sub += kQ) {
      // Transposed keys of this 16-key quantum: kt[d][sub .. sub+16).
      alignas(64) float kq[256 * kQ];
      const float* kt = ts.kt.data() + sub;
      const float* ktq = kt;
      if (bs != kQ) {
        for (int d = 0; d < hd; ++d) std::memcpy(kq + d * kQ, kt + d * bs, sizeof(float) * kQ);
        ktq = kq;
      }
      float* srow = S + base + sub;
      int r = 0;
      for (; r + 4 <= nrows; r += 4)
        scores16<4>(qs + r * hd, hd, ktq, srow + static_cast<int64_t>(r) * keys_padded, keys_padded,
                    p.scale);
      for (; r < nrows; ++r)
        scores16<1>(qs + r * hd, hd, ktq, srow + static_cast<int64_t>(r) * keys_padded, keys_padded,
                    p.scale);
    }
  }

  // Softmax per row over the keys it may see, weights rounded to fp16; the masked tail
  // of each row becomes 0.
  for (int r = 0; r < nrows; ++r) {
    const int nk = s.pos0 + t0 + r / group + 1;
    float* srow = S + static_cast<size_t>(r) * keys_padded;
    V16 vmax = splat(-INFINITY);
    int j = 0;
    for (; j + 16 <= nk; j += 16) {
      const V16 x = load16(srow + j);
      vmax = x > vmax ? x : vmax;
    }
    float mx = -INFINITY;
    for (int l = 0; l < 16; ++l) mx = std::max(mx, vmax[l]);
    for (; j < nk; ++j) mx = std::max(mx, srow[j]);
    // exp in 16 lanes; lane sums in float, their total in double.
    V16 vsum = V16{};
    for (j = 0; j + 16 <= nk; j += 16) {
      const V16 e = exp16(load16(srow + j) - mx);
      store16(srow + j, e);
      vsum += e;
    }
    double sum = 0;
    for (int l = 0; l < 16; ++l) sum += vsum[l];
    for (; j < nk; ++j) {
      srow[j] = std::exp(srow[j] - mx);
      sum += srow[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    const V16 vinv = splat(inv);
    for (j = 0; j + 16 <= nk; j += 16) store16(srow + j, load16(srow + j) * vinv);
    for (; j < nk; ++j) srow[j] *= inv;
    round_to_f16(srow, nk);
    for (; j < keys_padded; ++j) srow[j] = 0.0f;
  }

  // Weighted sum of V.
  for (int b = 0; b < n_blocks; ++b) {
    const int base = b * bs;
    const int n_valid = std::min(bs, n_keys - base);
    values_to_f32(kv, s.blocks[b], g, n_valid, ts.vb.data());
    // Rows whose position precedes this block see none of it (their weights are 0 here);
    // rows are position-major, so they form a prefix to skip.
    int r = std::max(0, (base - s.pos0 - t0) * group);
    const float* P = S + base;
    for (; r + 2 <= nrows; r += 2)
      apply_v16<2>(P + static_cast<int64_t>(r) * keys_padded, keys_padded, ts.vb.data(), hd,
                   n_valid, ts.acc.data() + static_cast<size_t>(r) * hd);
    for (; r < nrows; ++r)
      apply_v16<1>(P + static_cast<int64_t>(r) * keys_padded, keys_padded, ts.vb.data(), hd,
                   n_valid, ts.acc.data() + static_cast<size_t>(r) * hd);
  }
  for (int r = 0; r < nrows; ++r) {
    const int t = t0 + r / group, h = g * group + r % group;
    float* dst = out + static_cast<int64_t>(s.q_row + t) * out_stride + h * hd;
    std::memcpy(dst, ts.acc.data() + static_cast<size_t>(r) * hd, sizeof(float) * hd);
  }
}

}  // namespace

void kv_write(const KvLayer& kv, const AttentionSeq& s, const float* k, const float* v,
              int64_t stride) {
  const int hd = kv.head_dim, bs = kv.block_size;
  for (int t = 0; t < s.n_q; ++t) {
    const int pos = s.pos0 + t;
    const int32_t block = s.blocks[pos / bs];
    const int slot = pos % bs;
    for (int g = 0; g < kv.n_kv_heads; ++g) {
      const size_t off = kv.head_offset(block, g);
      if (kv.q8()) {
        const size_t so = kv.scale_offset(block, g);
        const float* kr = k + t * stride + g * hd;
        const float* vr = v + t * stride + g * hd;
        for (int d0 = 0; d0 < hd; d0 += 32) {
          BlockQ8_0 qk, qv;
          quantize_block_q8_0(kr + d0, &qk);
          quantize_block_q8_0(vr + d0, &qv);
          kv.k_scale[so + static_cast<size_t>(d0 / 32) * bs + slot] = qk.d;
          kv.v_scale[so + static_cast<size_t>(slot) * (hd / 32) + d0 / 32] = qv.d;
          for (int i = 0; i < 32; ++i) {
            kv.k8[off + static_cast<size_t>(d0 + i) * bs + slot] = qk.qs[i];
            kv.v8[off + static_cast<size_t>(slot) * hd + d0 + i] = qv.qs[i];
          }
        }
        continue;
      }
      uint16_t kh[256];
      f32_to_f16(k + t * stride + g * hd, kh, hd);
      for (int d = 0; d < hd; ++d) kv.k[off + static_cast<size_t>(d) * bs + slot] = kh[d];
      f32_to_f16(v + t * stride + g * hd, kv.v + off + static_cast<size_t>(slot) * hd, hd);
    }
  }
}

void attention(const KvLayer& kv, const AttentionSeq* seqs, int n_seqs, const AttentionParams& p,
               const float* q, int64_t q_stride, float* out, int64_t out_stride, ThreadPool& pool) {
  // Work items: (sequence, KV head, query tile), longest tiles first so the dynamic
  // hand-out ends with short ones.
  struct Item {
    int seq, g, t0, t1;
  };
  std::vector<Item> items;
  for (int i = 0; i < n_seqs; ++i)
    for (int t0 = 0; t0 < seqs[i].n_q; t0 += kTileQ)
      for (int g = 0; g < kv.n_kv_heads; ++g)
        items.push_back({i, g, t0, std::min(seqs[i].n_q, t0 + kTileQ)});
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    return seqs[a.seq].pos0 + a.t1 > seqs[b.seq].pos0 + b.t1;
  });
  pool.parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t b, int64_t e) {
    thread_local TileScratch scratch;
    for (int64_t i = b; i < e; ++i) {
      const Item& it = items[static_cast<size_t>(i)];
      attend_tile(kv, seqs[it.seq], p, it.g, it.t0, it.t1, q, q_stride, out, out_stride, scratch);
    }
  });
}

}  // namespace pagoda::cpu::PAGODA_ATTN_NS
