// The forward pass on the GPU: the layer of model/forward.cpp with the same operations
// in the same order, each a kernel (or cuBLASLt call) on the model's stream:
//   xn = norm(x); qkv = Wqkv xn; q, K, V = rope(qkv + b) -> cache; a = attention(q, K, V)
//   x += Wo a (accumulated by the product); xn = norm(x); gu = Wgu xn;
//   h = silu(g) * u; x += Wdown h
// Per call the host builds the batch's index arrays once and sends them in one copy.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/check.h"
#include "model/cuda/cuda_model.h"

namespace pagoda {
namespace {

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// Packs int32 arrays one after another (256-byte aligned) into a host buffer, so they
// go to the device in one copy.
class MetaPacker {
 public:
  explicit MetaPacker(std::vector<int32_t>& buf) : buf_(buf) { buf_.clear(); }
  size_t add(const int32_t* p, size_t n) {
    const size_t off = align_up(buf_.size(), 64);
    buf_.resize(off + n);
    if (n) std::memcpy(buf_.data() + off, p, n * sizeof(int32_t));
    return off;
  }
  size_t add(const std::vector<int32_t>& v) { return add(v.data(), v.size()); }

 private:
  std::vector<int32_t>& buf_;
};

}  // namespace

Status CudaModel::reserve(int n_tokens, int n_logit_rows) {
  const ModelConfig& c = config_;
  if (n_tokens > capacity_) {
    const size_t n = static_cast<size_t>(n_tokens);
    const size_t qkv_w = static_cast<size_t>(c.q_dim() + 2 * c.kv_dim());
    PAGODA_ASSIGN_OR_RETURN(x_, cuda::DeviceBuffer::alloc(n * c.dim * 4));
    PAGODA_ASSIGN_OR_RETURN(xn_, cuda::DeviceBuffer::alloc(n * std::max(c.dim, c.ffn_dim) * 4));
    PAGODA_ASSIGN_OR_RETURN(qkv_, cuda::DeviceBuffer::alloc(n * qkv_w * 4));
    PAGODA_ASSIGN_OR_RETURN(q16_, cuda::DeviceBuffer::alloc(n * c.q_dim() * 2));
    PAGODA_ASSIGN_OR_RETURN(attn_, cuda::DeviceBuffer::alloc(n * c.q_dim() * 4));
    PAGODA_ASSIGN_OR_RETURN(gu_, cuda::DeviceBuffer::alloc(n * 2 * c.ffn_dim * 4));
    PAGODA_ASSIGN_OR_RETURN(hidden_, cuda::DeviceBuffer::alloc(n * c.ffn_dim * 4));
    PAGODA_ASSIGN_OR_RETURN(
        attn_ws_, cuda::DeviceBuffer::alloc(
                      cuda::attention_workspace_bytes(n_tokens, c.n_heads, c.head_dim)));
    capacity_ = n_tokens;
  }
  if (n_logit_rows > logit_capacity_) {
    const size_t bytes = static_cast<size_t>(n_logit_rows) * c.n_vocab * 4;
    PAGODA_ASSIGN_OR_RETURN(logits_, cuda::DeviceBuffer::alloc(bytes));
    PAGODA_RETURN_IF_ERROR(logits_host_.reserve(bytes));
    logit_capacity_ = n_logit_rows;
  }
  return Status::ok();
}

Status CudaModel::build_batch(const Batch& batch, cuda::DeviceBatch* db,
                              cuda::AttentionPlan* plan, const int32_t** tokens,
                              const int32_t** logit_rows) {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(batch.tokens.size());
  const int bs = options_.kv_block_size;
  std::vector<int32_t> row_seq(static_cast<size_t>(n), -1), row_pos(static_cast<size_t>(n));
  std::vector<int32_t> q_row, n_q, pos0, blocks_off, blocks, decode_rows, prefill_seqs;
  int max_decode_ctx = 0, max_prefill_q = 0;
  const bool tc = cuda::has_prefill_kernel(c.head_dim);
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const cpu::AttentionSeq& q = batch.seqs[s];
    if (q.n_q <= 0 || q.q_row < 0 || q.q_row + q.n_q > n || q.pos0 < 0)
      return invalid_argument(str_format("sequence %zu has rows outside the batch", s));
    if (q.blocks == nullptr) return invalid_argument("sequence without a block table");
    q_row.push_back(q.q_row);
    n_q.push_back(q.n_q);
    pos0.push_back(q.pos0);
    blocks_off.push_back(static_cast<int32_t>(blocks.size()));
    const int n_blocks = (q.pos0 + q.n_q + bs - 1) / bs;
    for (int i = 0; i < n_blocks; ++i) {
      const int32_t id = q.blocks[i];
      if (id < 0 || id >= options_.n_kv_blocks)
        return invalid_argument(str_format("KV block id %d is outside the pool of %d", id,
                                           options_.n_kv_blocks));
      blocks.push_back(id);
    }
    for (int t = 0; t < q.n_q; ++t) {
      const size_t r = static_cast<size_t>(q.q_row + t);
      if (row_seq[r] >= 0) return invalid_argument("two sequences claim the same batch row");
      row_seq[r] = static_cast<int32_t>(s);
      row_pos[r] = q.pos0 + t;
    }
    if (q.n_q <= cuda::kDecodeMaxQueries || !tc) {
      for (int t = 0; t < q.n_q; ++t) decode_rows.push_back(q.q_row + t);
      max_decode_ctx = std::max(max_decode_ctx, q.pos0 + q.n_q);
    } else {
      prefill_seqs.push_back(static_cast<int32_t>(s));
      max_prefill_q = std::max(max_prefill_q, q.n_q);
    }
  }
  for (int r = 0; r < n; ++r)
    if (row_seq[static_cast<size_t>(r)] < 0)
      return invalid_argument(str_format("batch row %d belongs to no sequence", r));

  static thread_local std::vector<int32_t> host;
  MetaPacker pk(host);
  const size_t o_tok = pk.add(batch.tokens);
  const size_t o_rs = pk.add(row_seq), o_rp = pk.add(row_pos);
  const size_t o_qr = pk.add(q_row), o_nq = pk.add(n_q), o_p0 = pk.add(pos0);
  const size_t o_bo = pk.add(blocks_off), o_bl = pk.add(blocks);
  const size_t o_lr = pk.add(batch.logit_rows.data(), batch.logit_rows.size());
  const size_t o_dr = pk.add(decode_rows), o_ps = pk.add(prefill_seqs);
  const size_t bytes = host.size() * sizeof(int32_t);
  if (bytes > meta_.bytes()) {
    PAGODA_RETURN_IF_ERROR(dev_->sync());  // the old buffer may still be read
    PAGODA_ASSIGN_OR_RETURN(meta_, cuda::DeviceBuffer::alloc(bytes * 2));
  }
  if (bytes > meta_host_.bytes()) {
    PAGODA_RETURN_IF_ERROR(dev_->sync());
    PAGODA_RETURN_IF_ERROR(meta_host_.reserve(bytes * 2));
  }
  std::memcpy(meta_host_.get(), host.data(), bytes);
  PAGODA_CUDA_TRY(
      cudaMemcpyAsync(meta_.get(), meta_host_.get(), bytes, cudaMemcpyHostToDevice, dev_->stream()));
  const int32_t* d = meta_.as<int32_t>();
  *tokens = d + o_tok;
  *logit_rows = d + o_lr;
  db->n_rows = n;
  db->n_seqs = static_cast<int>(batch.seqs.size());
  db->row_seq = d + o_rs;
  db->row_pos = d + o_rp;
  db->seq_q_row = d + o_qr;
  db->seq_n_q = d + o_nq;
  db->seq_pos0 = d + o_p0;
  db->seq_blocks_off = d + o_bo;
  db->blocks = d + o_bl;
  plan->decode_rows = d + o_dr;
  plan->n_decode_rows = static_cast<int>(decode_rows.size());
  plan->max_decode_ctx = max_decode_ctx;
  plan->prefill_seqs = d + o_ps;
  plan->n_prefill_seqs = static_cast<int>(prefill_seqs.size());
  plan->max_prefill_q = max_prefill_q;
  plan->workspace = attn_ws_.get();
  plan->workspace_bytes = attn_ws_.bytes();
  return Status::ok();
}

Status CudaModel::forward(const Batch& batch, float* logits) {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(batch.tokens.size());
  if (n == 0) return invalid_argument("empty batch");
  for (int32_t t : batch.tokens)
    if (t < 0 || t >= c.n_vocab)
      return invalid_argument(str_format("token id %d is out of range", t));
  for (int r : batch.logit_rows)
    if (r < 0 || r >= n) return invalid_argument("logit row out of range");
  const int n_out = logits ? static_cast<int>(batch.logit_rows.size()) : 0;
  PAGODA_CUDA_TRY(cudaSetDevice(dev_->index()));
  PAGODA_RETURN_IF_ERROR(reserve(std::max(n, n_out), n_out));

  cuda::DeviceBatch db;
  cuda::AttentionPlan plan;
  const int32_t* tokens = nullptr;
  const int32_t* logit_rows = nullptr;
  PAGODA_RETURN_IF_ERROR(build_batch(batch, &db, &plan, &tokens, &logit_rows));

  cudaStream_t st = dev_->stream();
  cuda::Gemm& gemm = dev_->gemm();
  const int64_t dim = c.dim, qd = c.q_dim(), qkv_w = qd + 2 * c.kv_dim(), ff = c.ffn_dim;
  cuda::RopeParams rp;
  rp.n_heads = c.n_heads;
  rp.n_kv_heads = c.n_kv_heads;
  rp.head_dim = c.head_dim;
  rp.n_pairs = c.rope_dims / 2;
  rp.neox = c.rope_style == RopeStyle::kNeox;
  rp.theta_scale = std::pow(c.rope_theta, -2.0f / static_cast<float>(c.rope_dims));
  rp.freq_scale = c.rope_freq_scale;
  rp.freq_factors = c.rope_has_freq_factors ? rope_factors_ : nullptr;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  float* x = x_.as<float>();
  PAGODA_RETURN_IF_ERROR(cuda::embed_rows(tok_embd_, tokens, n, x, st));
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    const cuda::KvLayerView kv = kv_layer(l);
    PAGODA_RETURN_IF_ERROR(cuda::rms_norm(x, dim, nullptr, L.attn_norm, xn_.get(),
                                          cuda::act_type_for(L.qkv.type), n, c.dim, c.rms_eps, st));
    PAGODA_RETURN_IF_ERROR(gemm.matmul(L.qkv, xn_.get(), dim, n, qkv_.as<float>(), qkv_w, false, st));
    PAGODA_RETURN_IF_ERROR(cuda::rope_qkv_store(qkv_.as<float>(), L.qkv_bias, rp, db,
                                                q16_.as<uint16_t>(), kv, st));
    PAGODA_RETURN_IF_ERROR(cuda::attention(q16_.as<uint16_t>(), kv, db, plan, c.n_heads, scale,
                                           attn_.get(), cuda::act_type_for(L.wo.type), st));
    PAGODA_RETURN_IF_ERROR(gemm.matmul(L.wo, attn_.get(), qd, n, x, dim, true, st));
    PAGODA_RETURN_IF_ERROR(cuda::rms_norm(x, dim, nullptr, L.ffn_norm, xn_.get(),
                                          cuda::act_type_for(L.gate_up.type), n, c.dim, c.rms_eps,
                                          st));
    PAGODA_RETURN_IF_ERROR(
        gemm.matmul(L.gate_up, xn_.get(), dim, n, gu_.as<float>(), 2 * ff, false, st));
    PAGODA_RETURN_IF_ERROR(cuda::silu_mul(gu_.as<float>(), n, c.ffn_dim, hidden_.get(),
                                          cuda::act_type_for(L.down.type), st));
    PAGODA_RETURN_IF_ERROR(gemm.matmul(L.down, hidden_.get(), ff, n, x, dim, true, st));
  }
  if (n_out == 0) return dev_->sync();
  PAGODA_RETURN_IF_ERROR(cuda::rms_norm(x, dim, logit_rows, output_norm_, xn_.get(),
                                        cuda::act_type_for(output_.type), n_out, c.dim, c.rms_eps,
                                        st));
  PAGODA_RETURN_IF_ERROR(
      gemm.matmul(output_, xn_.get(), dim, n_out, logits_.as<float>(), c.n_vocab, false, st));
  const size_t bytes = static_cast<size_t>(n_out) * c.n_vocab * sizeof(float);
  PAGODA_CUDA_TRY(
      cudaMemcpyAsync(logits_host_.get(), logits_.get(), bytes, cudaMemcpyDeviceToHost, st));
  PAGODA_RETURN_IF_ERROR(dev_->sync());
  std::memcpy(logits, logits_host_.get(), bytes);
  return Status::ok();
}

}  // namespace pagoda
