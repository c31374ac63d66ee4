// The attention kernel, written once in plain C++ and compiled per ISA by
// attention_{generic,avx2,avx512}.cpp (each defines PAGODA_ATTN_NS before including
// this). The loops are shaped for the compiler's vectoriser: keys of a block are
// transposed so that scores for a block are one FMA per head dimension across
// block_size lanes.
//
// Work is tiled: a tile is all query heads of one KV head at up to kTileQ positions, so
// each K/V block is converted from fp16 once and used by every query of the tile. The
// tile's score rows (tile rows x context) are kept, then normalised, then applied to V.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "backend/cpu/attention.h"
#include "core/dtype.h"

namespace pagoda::cpu::PAGODA_ATTN_NS {

namespace {

constexpr int kTileQ = 8;  // query positions per tile
constexpr int kMaxHeadDim = 256;
constexpr int kMaxBlock = 64;

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

// exp(x) for x <= 0 (softmax arguments), ~1 ulp: range reduction by ln2 and a degree-6
// polynomial, branch-free so the loop vectorises.
inline float fast_exp(float x) {
  x = std::max(x, -87.0f);
  const float t = x * 1.44269504088896341f;
  const float n = std::nearbyint(t);
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// Scratch for one tile, reused across calls on the same thread.
struct TileScratch {
  std::vector<float> q, s, acc;
};

// One tile: query rows are (position t in [t0, t1)) x (head h in the KV head's group).
//
// The arithmetic follows llama.cpp's CPU attention (without flash attention) operand for
// operand, because that is the reference our outputs are checked against and the
// quantized activations downstream amplify any difference: the query and the softmax
// weights are rounded to fp16 (K and V are fp16 in the cache), products are exact in f32,
// the scale is applied to the f32 score, and the softmax normaliser is summed in double.
// GPU attention kernels round the same operands to fp16 too.
void attend_tile(const KvLayer& kv, const AttentionSeq& s, const AttentionParams& p, int g, int t0,
                 int t1, const float* q, int64_t q_stride, float* out, int64_t out_stride,
                 TileScratch& ts) {
  const int hd = kv.head_dim, bs = kv.block_size;
  const int group = p.n_heads / kv.n_kv_heads;
  const int nrows = (t1 - t0) * group;
  const int n_keys = s.pos0 + t1;                 // keys visible to the tile's last query
  alignas(64) float kt[kMaxHeadDim * kMaxBlock];  // K block transposed: [d][slot]
  alignas(64) float vb[kMaxBlock * kMaxHeadDim];  // V block: [slot][d]
  alignas(64) float sc[kMaxBlock];
  ts.q.resize(static_cast<size_t>(nrows) * hd);
  ts.s.resize(static_cast<size_t>(nrows) * n_keys);
  ts.acc.assign(static_cast<size_t>(nrows) * hd, 0.0f);
  float* qs = ts.q.data();
  float* S = ts.s.data();
  for (int t = t0; t < t1; ++t)
    for (int j = 0; j < group; ++j) {
      const float* src = q + static_cast<int64_t>(s.q_row + t) * q_stride + (g * group + j) * hd;
      float* dst = qs + static_cast<size_t>((t - t0) * group + j) * hd;
      uint16_t h[kMaxHeadDim];
      f32_to_f16(src, h, hd);
      f16_to_f32(h, dst, hd);
    }
  const int n_blocks = (n_keys + bs - 1) / bs;
  // Scores.
  for (int b = 0; b < n_blocks; ++b) {
    const int base = b * bs;
    const int n_valid = std::min(bs, n_keys - base);
    const uint16_t* kp = kv.k + kv.head_offset(s.blocks[b], g, 0);
    float krow[kMaxHeadDim];
    for (int j = 0; j < n_valid; ++j) {
      f16_to_f32(kp + static_cast<size_t>(j) * hd, krow, hd);
      for (int d = 0; d < hd; ++d) kt[d * bs + j] = krow[d];
    }
    for (int j = n_valid; j < bs; ++j)
      for (int d = 0; d < hd; ++d) kt[d * bs + j] = 0.0f;
    for (int r = 0; r < nrows; ++r) {
      const int qpos = s.pos0 + t0 + r / group;
      if (qpos < base) continue;  // the whole block is in this query's future
      const int lim = std::min(n_valid, qpos - base + 1);
      const float* qr = qs + static_cast<size_t>(r) * hd;
      for (int j = 0; j < bs; ++j) sc[j] = 0.0f;
      for (int d = 0; d < hd; ++d) {
        const float qd = qr[d];
        const float* kd = kt + d * bs;
        for (int j = 0; j < bs; ++j) sc[j] += qd * kd[j];
      }
      float* srow = S + static_cast<size_t>(r) * n_keys + base;
      for (int j = 0; j < lim; ++j) srow[j] = sc[j] * p.scale;
    }
  }
  // Softmax per row over the keys it may see, weights rounded to fp16.
  for (int r = 0; r < nrows; ++r) {
    const int nk = s.pos0 + t0 + r / group + 1;
    float* srow = S + static_cast<size_t>(r) * n_keys;
    float mx = -INFINITY;
    for (int j = 0; j < nk; ++j) mx = std::max(mx, srow[j]);
    double sum = 0;
    for (int j = 0; j < nk; ++j) {
      const float e = fast_exp(srow[j] - mx);
      srow[j] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < nk; ++j) srow[j] = fp16_to_f32(f32_to_fp16(srow[j] * inv));
  }
  // Weighted sum of V.
  for (int b = 0; b < n_blocks; ++b) {
    const int base = b * bs;
    const int n_valid = std::min(bs, n_keys - base);
    f16_to_f32(kv.v + kv.head_offset(s.blocks[b], g, 0), vb, n_valid * hd);
    for (int r = 0; r < nrows; ++r) {
      const int qpos = s.pos0 + t0 + r / group;
      if (qpos < base) continue;
      const int lim = std::min(n_valid, qpos - base + 1);
      const float* prow = S + static_cast<size_t>(r) * n_keys + base;
      float* ar = ts.acc.data() + static_cast<size_t>(r) * hd;
      for (int j = 0; j < lim; ++j) {
        const float pj = prow[j];
        const float* vr = vb + static_cast<size_t>(j) * hd;
        for (int d = 0; d < hd; ++d) ar[d] += pj * vr[d];
      }
    }
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
  for (int t = 0; t < s.n_q; ++t) {
    const int pos = s.pos0 + t;
    const int32_t block = s.blocks[pos / kv.block_size];
    const int slot = pos % kv.block_size;
    for (int g = 0; g < kv.n_kv_heads; ++g) {
      const size_t off = kv.head_offset(block, g, slot);
      f32_to_f16(k + t * stride + g * kv.head_dim, kv.k + off, kv.head_dim);
      f32_to_f16(v + t * stride + g * kv.head_dim, kv.v + off, kv.head_dim);
    }
  }
}

void attention(const KvLayer& kv, const AttentionSeq* seqs, int n_seqs, const AttentionParams& p,
               const float* q, int64_t q_stride, float* out, int64_t out_stride, ThreadPool& pool) {
  // Work items: (sequence, KV head, query tile).
  struct Item {
    int seq, g, t0, t1;
  };
  std::vector<Item> items;
  for (int i = 0; i < n_seqs; ++i)
    for (int t0 = 0; t0 < seqs[i].n_q; t0 += kTileQ)
      for (int g = 0; g < kv.n_kv_heads; ++g)
        items.push_back({i, g, t0, std::min(seqs[i].n_q, t0 + kTileQ)});
  pool.parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t b, int64_t e) {
    thread_local TileScratch scratch;
    for (int64_t i = b; i < e; ++i) {
      const Item& it = items[static_cast<size_t>(i)];
      attend_tile(kv, seqs[it.seq], p, it.g, it.t0, it.t1, q, q_stride, out, out_stride, scratch);
    }
  });
}

}  // namespace pagoda::cpu::PAGODA_ATTN_NS
