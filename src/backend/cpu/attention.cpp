#include "backend/cpu/attention.h"

#include "backend/cpu/cpu_features.h"

namespace pagoda::cpu {

#define PAGODA_DECLARE_ATTN(ns)                                                                  \
  namespace ns {                                                                                 \
  void kv_write(const KvLayer&, const AttentionSeq&, const float*, const float*, int64_t);       \
  void attention(const KvLayer&, const AttentionSeq*, int, const AttentionParams&, const float*, \
                 int64_t, float*, int64_t, ThreadPool&);                                         \
  }
PAGODA_DECLARE_ATTN(generic)
PAGODA_DECLARE_ATTN(avx2)
PAGODA_DECLARE_ATTN(avx512)
#undef PAGODA_DECLARE_ATTN

void kv_write(const KvLayer& kv, const AttentionSeq& s, const float* k, const float* v,
              int64_t stride) {
  switch (best_isa()) {
    case Isa::kAvx512:
      return avx512::kv_write(kv, s, k, v, stride);
    case Isa::kAvx2:
      return avx2::kv_write(kv, s, k, v, stride);
    default:
      return generic::kv_write(kv, s, k, v, stride);
  }
}

void attention(const KvLayer& kv, const AttentionSeq* seqs, int n_seqs, const AttentionParams& p,
               const float* q, int64_t q_stride, float* out, int64_t out_stride, ThreadPool& pool) {
  switch (best_isa()) {
    case Isa::kAvx512:
      return avx512::attention(kv, seqs, n_seqs, p, q, q_stride, out, out_stride, pool);
    case Isa::kAvx2:
      return avx2::attention(kv, seqs, n_seqs, p, q, q_stride, out, out_stride, pool);
    default:
      return generic::attention(kv, seqs, n_seqs, p, q, q_stride, out, out_stride, pool);
  }
}

}  // namespace pagoda::cpu
