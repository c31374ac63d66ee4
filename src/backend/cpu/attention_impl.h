// The attention kernel, written once in plain C++ and compiled per ISA by
// attention_{generic,avx2,avx512}.cpp (each defines PAGODA_ATTN_NS before including
// this). The loops are shaped for the compiler's vectoriser: keys of a block are
// transposed so that scores for a block are one FMA per head dimension across
// block_size lanes.
//
// Flash-attention structure: for a tile of queries (all query heads of one KV head,
// up to kTileQ positions) the K/V blocks are converted from fp16 once and used by every
// query of the tile, with an online softmax, so nothing of size n_ctx is materialised.
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

struct TileState {
  float m[kTileQ * 16];  // running max per query row
  float l[kTileQ * 16];  // running sum of exp
};

// One tile: query rows are (position t in [t0, t1)) x (head h in the KV head's group).
void attend_tile(const KvLayer& kv, const AttentionSeq& s, const AttentionParams& p, int g, int t0,
                 int t1, const float* q, int64_t q_stride, float* out, int64_t out_stride) {
  const int hd = kv.head_dim, bs = kv.block_size;
  const int group = p.n_heads / kv.n_kv_heads;
  const int nrows = (t1 - t0) * group;
  alignas(64) float kt[kMaxHeadDim * kMaxBlock];  // K block transposed: [d][slot]
  alignas(64) float vb[kMaxBlock * kMaxHeadDim];  // V block: [slot][d]
  alignas(64) float sc[kMaxBlock];
  std::vector<float> qs(static_cast<size_t>(nrows) * hd);
  std::vector<float> acc(static_cast<size_t>(nrows) * hd, 0.0f);
  std::vector<float> m(static_cast<size_t>(nrows), -INFINITY), l(static_cast<size_t>(nrows), 0.0f);
  for (int t = t0; t < t1; ++t)
    for (int j = 0; j < group; ++j) {
      const float* src = q + static_cast<int64_t>(s.q_row + t) * q_stride + (g * group + j) * hd;
      float* dst = &qs[static_cast<size_t>((t - t0) * group + j) * hd];
      for (int d = 0; d < hd; ++d) dst[d] = src[d] * p.scale;
    }
  const int last_pos = s.pos0 + t1 - 1;
  const int n_blocks = last_pos / bs + 1;
  for (int b = 0; b < n_blocks; ++b) {
    const int32_t block = s.blocks[b];
    const int base = b * bs;
    const int n_valid = std::min(bs, last_pos + 1 - base);
    const uint16_t* kp = kv.k + kv.head_offset(block, g, 0);
    const uint16_t* vp = kv.v + kv.head_offset(block, g, 0);
    float krow[kMaxHeadDim];
    for (int j = 0; j < n_valid; ++j) {
      f16_to_f32(kp + static_cast<size_t>(j) * hd, krow, hd);
      for (int d = 0; d < hd; ++d) kt[d * bs + j] = krow[d];
    }
    for (int j = n_valid; j < bs; ++j)
      for (int d = 0; d < hd; ++d) kt[d * bs + j] = 0.0f;
    f16_to_f32(vp, vb, n_valid * hd);
    for (int r = 0; r < nrows; ++r) {
      const int qpos = s.pos0 + t0 + r / group;
      if (qpos < base) continue;  // the whole block is in this query's future
      const int lim = std::min(n_valid, qpos - base + 1);
      const float* qr = &qs[static_cast<size_t>(r) * hd];
      for (int j = 0; j < bs; ++j) sc[j] = 0.0f;
      for (int d = 0; d < hd; ++d) {
        const float qd = qr[d];
        const float* kd = kt + d * bs;
        for (int j = 0; j < bs; ++j) sc[j] += qd * kd[j];
      }
      float mx = m[static_cast<size_t>(r)];
      for (int j = 0; j < lim; ++j) mx = std::max(mx, sc[j]);
      const float corr = fast_exp(m[static_cast<size_t>(r)] - mx);
      float sum = 0.0f;
      for (int j = 0; j < bs; ++j) {
        const float e = j < lim ? fast_exp(sc[j] - mx) : 0.0f;
        sc[j] = e;
        sum += e;
      }
      m[static_cast<size_t>(r)] = mx;
      l[static_cast<size_t>(r)] = l[static_cast<size_t>(r)] * corr + sum;
      float* ar = &acc[static_cast<size_t>(r) * hd];
      for (int d = 0; d < hd; ++d) ar[d] *= corr;
      for (int j = 0; j < lim; ++j) {
        const float pj = sc[j];
        const float* vr = vb + static_cast<size_t>(j) * hd;
        for (int d = 0; d < hd; ++d) ar[d] += pj * vr[d];
      }
    }
  }
  for (int r = 0; r < nrows; ++r) {
    const int t = t0 + r / group, h = g * group + r % group;
    float* dst = out + static_cast<int64_t>(s.q_row + t) * out_stride + h * hd;
    const float inv = 1.0f / l[static_cast<size_t>(r)];
    const float* ar = &acc[static_cast<size_t>(r) * hd];
    for (int d = 0; d < hd; ++d) dst[d] = ar[d] * inv;
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
    for (int64_t i = b; i < e; ++i) {
      const Item& it = items[static_cast<size_t>(i)];
      attend_tile(kv, seqs[it.seq], p, it.g, it.t0, it.t1, q, q_stride, out, out_stride);
    }
  });
}

}  // namespace pagoda::cpu::PAGODA_ATTN_NS
