// attention(): sends each part of the batch to its kernel.
#include <algorithm>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/check.h"

namespace pagoda::cuda {

bool has_prefill_kernel(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

int decode_splits(int n_rows, int n_kv_heads) {
  const int by_blocks = std::max(1, kDecodeTargetBlocks / std::max(1, n_rows * n_kv_heads));
  return std::min(kMaxDecodeSplits, by_blocks);
}

int decode_splits_for_context(int n_rows, int n_kv_heads, int max_ctx, int keys_per_split) {
  const int most = decode_splits(n_rows, n_kv_heads);
  const int want = (std::max(1, max_ctx) + keys_per_split - 1) / std::max(1, keys_per_split);
  int splits = 1;
  while (splits < want && splits < most) splits *= 2;
  return std::min(splits, most);
}

size_t attention_workspace_bytes(int max_rows, int n_heads, int head_dim) {
  // rows * splits <= rows + kDecodeTargetBlocks (decode_splits), each split keeping
  // n_heads partial outputs plus their max and sum.
  return static_cast<size_t>(max_rows + kDecodeTargetBlocks) * n_heads * (head_dim + 2) *
         sizeof(float);
}

Status attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                 const AttentionPlan& plan, int n_heads, float scale, void* out, ActType out_type,
                 cudaStream_t stream) {
  if (n_heads % kv.n_kv_heads != 0) return invalid_argument("heads not a multiple of KV heads");
  if (kv.head_dim % 8 != 0 || kv.head_dim > 256)
    return unsupported(
        str_format("head size %d (CUDA attention takes multiples of 8 up to 256)", kv.head_dim));
  if (plan.n_decode_rows > 0)
    PAGODA_RETURN_IF_ERROR(decode_attention(q, kv, b, plan, n_heads, scale, out, out_type, stream));
  if (plan.n_prefill_seqs > 0) {
    if (!has_prefill_kernel(kv.head_dim))
      return unsupported(str_format("no prefill attention kernel for head size %d", kv.head_dim));
    PAGODA_RETURN_IF_ERROR(
        prefill_attention(q, kv, b, plan, n_heads, scale, out, out_type, stream));
  }
  return Status::ok();
}

}  // namespace pagoda::cuda
