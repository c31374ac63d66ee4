// Causal attention over a paged fp16 KV cache. Keys and values live in fixed-size blocks
// ([block][kv_head][slot][head_dim] per layer); a sequence reaches its tokens through a
// block table, as vLLM's PagedAttention and FlashInfer's index arrays do, so a growing
// sequence never moves its KV. Prefill chunks and single-token decodes share one path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/batch.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

// One layer's K and V pools. Within a block, each KV head holds its keys transposed
// ([head_dim][block_size], so the scores of a query against the block's keys are one
// multiply-add per dimension across block_size lanes) and its values row-wise
// ([block_size][head_dim]). block_size must be a multiple of kKvBlockQuantum.
constexpr int kKvBlockQuantum = 16;

// An 8-bit pool (llama.cpp's --cache-type-k/v q8_0 rule: each 32 values of a head's
// vector share one fp16 scale, q = round(x / d), d = max|x| / 127) keeps int8 values where
// the 16-bit one keeps fp16 ones, in the same places, and the scales of each (block, KV
// head) apart: K's as [head_dim / 32][block_size] (a row per 32 dimensions, so a block
// converts a dimension at a time), V's as [block_size][head_dim / 32]. 34 bytes per 32
// values against 64: the pool holds 1.88x the tokens. head_dim must be a multiple of 32.
struct KvLayer {
  uint16_t* k = nullptr;  // fp16 (null in an 8-bit pool)
  uint16_t* v = nullptr;  // fp16
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  int8_t* k8 = nullptr;  // an 8-bit pool's values, and their scales (fp16)
  int8_t* v8 = nullptr;
  uint16_t* k_scale = nullptr;
  uint16_t* v_scale = nullptr;
  bool q8() const { return k8 != nullptr; }
  // Start of a KV head's scales in an 8-bit pool.
  size_t scale_offset(int32_t block, int kv_head) const { return head_offset(block, kv_head) / 32; }
  size_t head_elems() const { return static_cast<size_t>(block_size) * head_dim; }
  size_t block_elems() const { return static_cast<size_t>(n_kv_heads) * head_elems(); }
  // Start of a KV head's keys ([d][slot]) or values ([slot][d]) in a block.
  size_t head_offset(int32_t block, int kv_head) const {
    return static_cast<size_t>(block) * block_elems() + static_cast<size_t>(kv_head) * head_elems();
  }
};

// The queries of one sequence in a batch (core/batch.h).
using AttentionSeq = BatchSeq;

struct AttentionParams {
  int n_heads = 0;  // query heads; n_heads / n_kv_heads share a KV head
  float scale = 1.0f;
};

// Writes rows of k and v (f32, n_kv_heads*head_dim each, row stride `stride`) for
// positions [pos0, pos0 + n) into the cache.
void kv_write(const KvLayer& kv, const AttentionSeq& seq, const float* k, const float* v,
              int64_t stride);

// out[row][h*head_dim + d] = softmax(q_h . K^T * scale, causal) . V for every query row of
// every sequence. q rows hold n_heads*head_dim values (row stride q_stride); out rows
// n_heads*head_dim (stride out_stride).
void attention(const KvLayer& kv, const AttentionSeq* seqs, int n_seqs, const AttentionParams& p,
               const float* q, int64_t q_stride, float* out, int64_t out_stride, ThreadPool& pool);

}  // namespace pagoda::cpu
