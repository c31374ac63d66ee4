// The forward pass on the GPU: the layer of model/forward.cpp with the same operations
// in the same order, each a kernel (or cuBLASLt call) on the model's stream:
//   xn = norm(x); qkv = Wqkv xn; q, K, V = rope(qkv + b) -> cache; a = attention(q, K, V)
//   x += Wo a (accumulated by the product); xn = norm(x); gu = Wgu xn;
//   h = silu(g) * u; x += Wdown h
// Per call the host builds the batch's index arrays and sends them in one copy. Decode
// steps (one token per sequence) replay a CUDA graph per batch size: the ~300 launches
// of a step cost one, and no kernel waits on the host.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/cuda/check.h"
#include "core/log.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/op_profiler.h"

namespace pagoda {
namespace {

constexpr int kMaxGraphRows = 512;          // larger decode batches run eagerly
constexpr int kEagerRunsBeforeCapture = 1;  // the first run allocates and plans

// Packs int32 arrays one after another (64-element aligned) into a host buffer, so they
// go to the device in one copy. Offsets depend only on the sizes of earlier arrays:
// the variable-length block tables go last, so a decode batch of a given size keeps
// every other array where a captured graph expects it.
class MetaPacker {
 public:
  explicit MetaPacker(std::vector<int32_t>& buf) : buf_(buf) { buf_.clear(); }
  size_t add(const int32_t* p, size_t n) {
    const size_t off = (buf_.size() + 63) / 64 * 64;
    buf_.resize(off + n);
    if (n) std::memcpy(buf_.data() + off, p, n * sizeof(int32_t));
    return off;
  }
  size_t add(const std::vector<int32_t>& v) { return add(v.data(), v.size()); }

 private:
  std::vector<int32_t>& buf_;
};

// Rejects a step's sampling before anything runs: one row per logit row, penalty entries
// inside the list, draws in [0, 1).
Status check_sampling(const StepSampling& sampling, int n_out) {
  if (static_cast<int>(sampling.rows.size()) != n_out)
    return invalid_argument("one sampling row per logit row is needed");
  if (sampling.penalties.size() % 3 != 0) return invalid_argument("penalty list not in triples");
  const int64_t n_pen = static_cast<int64_t>(sampling.penalties.size() / 3);
  for (const SamplingRow& r : sampling.rows)
    if (r.pen_begin < 0 || r.pen_count < 0 || r.pen_begin + int64_t{r.pen_count} > n_pen ||
        !(r.u >= 0.0) || !(r.u < 1.0))
      return invalid_argument("sampling row out of range");
  return Status::ok();
}

}  // namespace

CudaModel::Graph::~Graph() {
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
}

void CudaModel::drop_graphs() {
  graphs_.clear();
  graph_seen_.clear();
}

Status CudaModel::reserve(int n_tokens, int n_logit_rows) {
  const ModelConfig& c = config_;
  if (n_tokens > capacity_) {
    drop_graphs();  // they point into the buffers replaced here
    const size_t n = static_cast<size_t>(n_tokens);
    const size_t qkv_w = static_cast<size_t>(c.q_dim() + 2 * c.kv_dim());
    PAGODA_ASSIGN_OR_RETURN(x_, cuda::DeviceBuffer::alloc(n * c.dim * 4));
    PAGODA_ASSIGN_OR_RETURN(xn_, cuda::DeviceBuffer::alloc(n * c.dim * 4));
    PAGODA_ASSIGN_OR_RETURN(qkv_, cuda::DeviceBuffer::alloc(n * qkv_w * 4));
    PAGODA_ASSIGN_OR_RETURN(q16_, cuda::DeviceBuffer::alloc(n * c.q_dim() * 2));
    PAGODA_ASSIGN_OR_RETURN(attn_, cuda::DeviceBuffer::alloc(n * c.q_dim() * 4));
    PAGODA_ASSIGN_OR_RETURN(gu_, cuda::DeviceBuffer::alloc(n * 2 * c.ffn_dim * 4));
    PAGODA_ASSIGN_OR_RETURN(hidden_, cuda::DeviceBuffer::alloc(n * c.ffn_dim * 4));
    PAGODA_ASSIGN_OR_RETURN(rope_cs_, cuda::DeviceBuffer::alloc(n * c.rope_dims * 4));
    PAGODA_ASSIGN_OR_RETURN(attn_ws_, cuda::DeviceBuffer::alloc(cuda::attention_workspace_bytes(
                                          n_tokens, c.n_heads, c.head_dim)));
    if (options_.fp8_weights) {
      // The FP8 products' activation scratch, for the same tokens (never regrown under
      // a captured graph).
      const int64_t cols = std::max<int64_t>({c.dim, c.q_dim(), c.ffn_dim});
      const int64_t rows = std::max<int64_t>({static_cast<int64_t>(qkv_w), 2 * c.ffn_dim, c.dim});
      PAGODA_RETURN_IF_ERROR(dev_->gemm().reserve_fp8(n_tokens, cols, rows));
    }
    capacity_ = n_tokens;
  }
  if (!norm_ss_.get()) {
    PAGODA_ASSIGN_OR_RETURN(norm_ss_, cuda::DeviceBuffer::alloc(2 * c.n_layers * cuda::kNormBytes));
  }
  if (n_logit_rows > logit_capacity_) {
    drop_graphs();
    const size_t bytes = static_cast<size_t>(n_logit_rows) * c.n_vocab * 4;
    PAGODA_ASSIGN_OR_RETURN(logits_, cuda::DeviceBuffer::alloc(bytes));
    PAGODA_ASSIGN_OR_RETURN(tokens_out_, cuda::DeviceBuffer::alloc(n_logit_rows * 4));
    PAGODA_RETURN_IF_ERROR(logits_host_.reserve(bytes));
    logit_capacity_ = n_logit_rows;
  }
  return Status::ok();
}

Status CudaModel::build_batch(const Batch& batch, Step* st) {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(batch.tokens.size());
  const int bs = options_.kv_block_size;
  std::vector<int32_t> row_seq(static_cast<size_t>(n), -1), row_pos(static_cast<size_t>(n));
  std::vector<int32_t> q_row, n_q, pos0, blocks_off, blocks, decode_rows, prefill_seqs;
  int max_prefill_q = 0, max_decode_ctx = 0;
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
        return invalid_argument(
            str_format("KV block id %d is outside the pool of %d", id, options_.n_kv_blocks));
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
  const size_t o_bo = pk.add(blocks_off);
  const size_t o_lr = pk.add(batch.logit_rows.data(), batch.logit_rows.size());
  const size_t o_dr = pk.add(decode_rows), o_ps = pk.add(prefill_seqs);
  const size_t o_bl = pk.add(blocks);
  const size_t bytes = host.size() * sizeof(int32_t);
  cuda::PinnedBuffer& stage = meta_host_[stage_];
  if (bytes > meta_.bytes() || bytes > stage.bytes()) {
    PAGODA_RETURN_IF_ERROR(dev_->sync());  // the old buffers may still be in use
    drop_graphs();
    // Room for long block tables, so the buffer (which graphs point into) rarely moves.
    const size_t want = std::max<size_t>(bytes * 2, 1u << 20);
    PAGODA_ASSIGN_OR_RETURN(meta_, cuda::DeviceBuffer::alloc(want));
    for (cuda::PinnedBuffer& m : meta_host_) PAGODA_RETURN_IF_ERROR(m.reserve(want));
  }
  std::memcpy(stage.get(), host.data(), bytes);
  PAGODA_CUDA_TRY(
      cudaMemcpyAsync(meta_.get(), stage.get(), bytes, cudaMemcpyHostToDevice, dev_->stream()));
  const int32_t* d = meta_.as<int32_t>();
  st->n = n;
  st->tokens = d + o_tok;
  st->logit_rows = d + o_lr;
  st->db.n_rows = n;
  st->db.n_seqs = static_cast<int>(batch.seqs.size());
  st->db.row_seq = d + o_rs;
  st->db.row_pos = d + o_rp;
  st->db.seq_q_row = d + o_qr;
  st->db.seq_n_q = d + o_nq;
  st->db.seq_pos0 = d + o_p0;
  st->db.seq_blocks_off = d + o_bo;
  st->db.blocks = d + o_bl;
  st->plan.decode_rows = d + o_dr;
  st->plan.n_decode_rows = static_cast<int>(decode_rows.size());
  st->plan.n_splits = split_keys_ > 0 && !decode_rows.empty()
                          ? cuda::decode_splits_for_context(st->plan.n_decode_rows, c.n_kv_heads,
                                                            max_decode_ctx, split_keys_)
                          : 0;
  st->plan.prefill_seqs = d + o_ps;
  st->plan.n_prefill_seqs = static_cast<int>(prefill_seqs.size());
  st->plan.max_prefill_q = max_prefill_q;
  st->plan.workspace = attn_ws_.get();
  st->plan.workspace_bytes = attn_ws_.bytes();
  return Status::ok();
}

Status CudaModel::enqueue(const Step& s) {
  const ModelConfig& c = config_;
  cudaStream_t st = dev_->stream();
  cuda::Gemm& gemm = dev_->gemm();
  const int n = s.n;
  const int64_t dim = c.dim, qd = c.q_dim(), qkv_w = qd + 2 * c.kv_dim(), ff = c.ffn_dim;
  cuda::RopeParams rp;
  rp.n_heads = c.n_heads;
  rp.n_kv_heads = c.n_kv_heads;
  rp.head_dim = c.head_dim;
  rp.n_pairs = c.rope_dims / 2;
  rp.neox = c.recipe.rope_style == RopeStyle::kNeox;
  rp.theta_scale = std::pow(c.rope_theta, -2.0f / static_cast<float>(c.rope_dims));
  rp.freq_scale = c.rope_freq_scale;
  rp.freq_factors = c.rope_has_freq_factors ? rope_factors_ : nullptr;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  OpProfiler* prof = profiler_.get();
  auto mark = [prof](const char* op) {
    if (prof) prof->mark(op);
  };
  // Kinds of op left out of every step (PAGODA_CUDA_OMIT, timing experiments only).
  const auto kept = [this](unsigned kind) { return (omit_ & kind) == 0; };

  float* x = x_.as<float>();
  // Decode steps over GGUF block weights: the norm (and SiLU) write the product's 8-bit
  // activations themselves, one kernel fewer per product (wo's input, the attention
  // output, is quantized by the product).
  auto q8_input = [n](const cuda::DeviceMatrix& w) {
    return n <= cuda::kGemvMaxTokens && cuda::Gemm::takes_q8(w);
  };
  // xn = norm(x) * norm_w; y = W xn.
  auto norm_product = [&](const float* norm_w, const cuda::DeviceMatrix& w, float* y,
                          int64_t y_stride, const char* op, unsigned kind) -> Status {
    const bool norm = kept(kOmitNorm), product = kept(kind);
    if (q8_input(w)) {
      PAGODA_ASSIGN_OR_RETURN(const cuda::Q8Act a, gemm.q8_input(dim, n, st));
      if (norm)
        PAGODA_RETURN_IF_ERROR(
            cuda::rms_norm_q8(x, dim, nullptr, norm_w, a, n, c.dim, c.rms_eps, st));
      mark("rms_norm");
      if (product) PAGODA_RETURN_IF_ERROR(gemm.matmul_q8(w, a, n, y, y_stride, false, st));
    } else if (w.fp8 && n > cuda::kGemvMaxTokens) {
      // FP8 products of a batch: the norm takes the activations' max on the way.
      PAGODA_ASSIGN_OR_RETURN(uint32_t* const amax, gemm.fp8_amax_slot());
      if (norm)
        PAGODA_RETURN_IF_ERROR(cuda::rms_norm(x, dim, nullptr, norm_w, xn_.get(),
                                              cuda::act_type_for(w.type), n, c.dim, c.rms_eps, st,
                                              amax));
      mark("rms_norm");
      if (product)
        PAGODA_RETURN_IF_ERROR(
            gemm.matmul_fp8_scanned(w, xn_.get(), dim, n, y, y_stride, false, st));
    } else {
      if (norm)
        PAGODA_RETURN_IF_ERROR(cuda::rms_norm(x, dim, nullptr, norm_w, xn_.get(),
                                              cuda::act_type_for(w.type), n, c.dim, c.rms_eps, st));
      mark("rms_norm");
      if (product)
        PAGODA_RETURN_IF_ERROR(gemm.matmul(w, xn_.get(), dim, n, y, y_stride, false, st));
    }
    mark(op);
    return Status::ok();
  };
  // One-token steps: the qkv product stores q and the KV cache itself (RoPE epilogue), and
  // products over GGUF block weights quantize their f16 input themselves (gemv_fused).
  const unsigned fuse = n == 1 ? fuse_ : 0;
  // Whether a product over block weights quantizes its f16 input itself.
  auto quantizes_input = [&](const cuda::DeviceMatrix& w) {
    return (fuse & kFuseQuant) && cuda::Gemm::takes_q8(w) &&
           cuda::gemv_takes(w, 1, cuda::GemvFusion{});
  };
  // x += W in; block weights take their f16 input straight. f: the next norm folded in
  // (norm_ss set), or nothing.
  auto residual_product = [&](const cuda::DeviceMatrix& w, const void* in, int64_t cols,
                              const char* op, unsigned kind, const cuda::GemvFusion& f) -> Status {
    if (!kept(kind)) return Status::ok();
    if (quantizes_input(w) || f.norm_ss)
      PAGODA_RETURN_IF_ERROR(cuda::gemv_fused(w, in, x, true, f, st));
    else
      PAGODA_RETURN_IF_ERROR(gemm.matmul(w, in, cols, n, x, dim, true, st));
    mark(op);
    return Status::ok();
  };
  // Folded norms (kFuseNormAttn, kFuseNormFfn; one-token steps): the product adding to the residual
  // before a norm also writes x * norm_w, un-normalised, and the sum of squares; the product after
  // it scales its sums by the norm's scale. The norm's kernel and one kernel boundary go. Only
  // where both products are one-token kernels that take it: the storing product through gemv_fused,
  // the reading one a float/FP8 product or, for block weights, one quantizing its own f16 input.
  // Block weights' activations are f16, so their norms go into the products' prologue instead
  // (norm_in_prologue below).
  const bool fold = (fuse & (kFuseNormAttn | kFuseNormFfn)) != 0 && kept(kOmitNorm);
  auto* const norm_ss = norm_ss_.as<unsigned long long>();
  // Slots of layer l's attention (0) or FFN (1) norm.
  auto ss_of = [&](int l, int which) {
    return norm_ss + (2 * l + which) * cuda::kNormSlots * cuda::kNormSlotStride;
  };
  auto stores_norm = [&](const cuda::DeviceMatrix& w) {
    return fold && (quantizes_input(w) || (!q8_input(w) && cuda::gemv_takes(w, 1, {})));
  };
  // f reading a folded norm's output: its sums scaled by the norm's scale from slots ss.
  auto reading = [&](cuda::GemvFusion f, const unsigned long long* ss) {
    f.in_ss = ss;
    f.in_dim = static_cast<int>(dim);
    f.in_eps = c.rms_eps;
    return f;
  };
  auto reads_norm = [&](const cuda::DeviceMatrix& w, const cuda::GemvFusion& after_f, int l,
                        int which) {
    const cuda::GemvFusion f = reading(after_f, ss_of(l, which));
    return (fuse & (which == 0 ? kFuseNormAttn : kFuseNormFfn)) &&
           (!q8_input(w) || (which == 0 && quantizes_input(w))) && cuda::gemv_takes(w, 1, f);
  };
  // What the product before layer l's norm `which` adds (the norm folded in where the
  // product after it takes it). Not into fp16: x * norm_w un-normalised can pass fp16's
  // 65,504 where x / rms * norm_w does not (residual channels of a few thousand are known
  // in real models), and the fold gained nothing for Q4_0 (bench/RESULTS.md, stop 28), so
  // only bf16 and f32 activations (BF16, FP8 and F32 weights) fold.
  auto norm_store = [&](int l, int which, const cuda::DeviceMatrix& before,
                        const cuda::DeviceMatrix& after, const cuda::GemvFusion& after_f,
                        const float* norm_w) {
    cuda::GemvFusion f;
    if (cuda::act_type_for(after.type) != cuda::ActType::kF16 && stores_norm(before) &&
        reads_norm(after, after_f, l, which)) {
      f.norm_w = norm_w;
      f.norm_out = xn_.get();
      f.norm_out_type = cuda::act_type_for(after.type);
      f.norm_ss = ss_of(l, which);
    }
    return f;
  };
  // Pipelined steps' placeholder tokens are the previous step's picks, still in tokens_out_.
  PAGODA_RETURN_IF_ERROR(
      cuda::embed_rows(tok_embd_, s.tokens, n, x, st, tokens_out_.as<int32_t>()));
  PAGODA_RETURN_IF_ERROR(cuda::rope_tables(rp, s.db, rope_cs_.as<float>(), st));
  mark("embed+rope");
  // Layer l's qkv epilogue (RoPE + KV store).
  auto qkv_fusion = [&](int l) {
    cuda::GemvFusion fq;
    fq.kind = cuda::GemvFusion::kRopeKv;
    fq.bias = layers_[static_cast<size_t>(l)].qkv_bias;
    fq.rope = rp;
    fq.cs = rope_cs_.as<float>();
    fq.batch = s.db;
    fq.q_out = q16_.as<uint16_t>();
    fq.kv = kv_layer(l);
    return fq;
  };
  // Block weights take the norm before them (kFuseNormAttn: qkv, kFuseNormFfn: gate_up) in
  // the product's prologue, which reads the f32 residual, sums its squares and quantizes
  // the normalised row itself: `after` with the norm's weights `norm_w`, or nothing where
  // the product cannot take it. On an H100 (bench/RESULTS.md, stop 29) Q4_0 decode went
  // from 421 to 457 tok/s (gate_up's norm alone 447, qkv's alone 431), Q8_0 from 280 to
  // 296, on the H200 Q4_0 from 474 to 537: for gate_up the one-wave fused kernel with the
  // norm beats rms_norm_q8 and the many-wave plain kernel.
  auto norm_in_prologue = [&](cuda::GemvFusion after, const cuda::DeviceMatrix& w,
                              const float* norm_w,
                              unsigned bit) -> std::optional<cuda::GemvFusion> {
    if (!(fuse & bit) || !kept(kOmitNorm) || !cuda::Gemm::takes_q8(w)) return std::nullopt;
    after.in_norm_w = norm_w;
    after.in_eps = c.rms_eps;
    if (!cuda::gemv_takes(w, 1, after)) return std::nullopt;
    return after;
  };
  // Layer l + 1's attention norm, folded into layer l's down product where the next qkv
  // product (the fused one) takes it, or nothing.
  auto next_attn_fold = [&](int l) {
    if (l + 1 >= c.n_layers || !(fuse & kFuseQkv)) return cuda::GemvFusion{};
    const Layer& L = layers_[static_cast<size_t>(l)];
    const Layer& next = layers_[static_cast<size_t>(l + 1)];
    const cuda::GemvFusion next_fq = qkv_fusion(l + 1);
    if (!cuda::gemv_takes(next.qkv, 1, next_fq)) return cuda::GemvFusion{};
    return norm_store(l + 1, 0, L.down, next.qkv, next_fq, next.attn_norm);
  };
  // Each layer's folds, decided once: what wo adds (the FFN norm folded in) and what down
  // adds (the next layer's attention norm), empty where nothing folds.
  std::vector<cuda::GemvFusion> wo_folds, down_folds;
  bool any_fold = false;
  if (fold) {
    wo_folds.resize(static_cast<size_t>(c.n_layers));
    down_folds.resize(static_cast<size_t>(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      const Layer& L = layers_[static_cast<size_t>(l)];
      wo_folds[static_cast<size_t>(l)] = norm_store(l, 1, L.wo, L.gate_up, {}, L.ffn_norm);
      down_folds[static_cast<size_t>(l)] = next_attn_fold(l);
      any_fold = any_fold || wo_folds[static_cast<size_t>(l)].norm_ss ||
                 down_folds[static_cast<size_t>(l)].norm_ss;
    }
  }
  const cuda::GemvFusion no_fold;
  auto fold_of = [&](const std::vector<cuda::GemvFusion>& folds, int l) -> const cuda::GemvFusion& {
    return l >= 0 && l < static_cast<int>(folds.size()) ? folds[static_cast<size_t>(l)] : no_fold;
  };
  // The slots start at zero, cleared once a step, and only where some norm folds: for
  // the fp16 types none does, and the memset would be a node of its own between kernels.
  if (any_fold) PAGODA_CUDA_TRY(cudaMemsetAsync(norm_ss, 0, norm_ss_.bytes(), st));
  for (int l = 0; l < c.n_layers; ++l) {
    // The norm before layer l's qkv, folded into layer l - 1's down product, if at all.
    const cuda::GemvFusion& attn_fold = fold_of(down_folds, l - 1);
    const Layer& L = layers_[static_cast<size_t>(l)];
    const cuda::KvLayerView kv = kv_layer(l);
    cuda::GemvFusion fq = qkv_fusion(l);
    if ((fuse & kFuseQkv) && cuda::gemv_takes(L.qkv, 1, fq)) {
      const void* qkv_in = xn_.get();
      if (attn_fold.norm_ss) {
        fq = reading(fq, attn_fold.norm_ss);
      } else if (const auto fp = norm_in_prologue(fq, L.qkv, L.attn_norm, kFuseNormAttn)) {
        fq = *fp;
        qkv_in = x;
      } else if (kept(kOmitNorm)) {
        PAGODA_RETURN_IF_ERROR(cuda::rms_norm(x, dim, nullptr, L.attn_norm, xn_.get(),
                                              cuda::act_type_for(L.qkv.type), n, c.dim, c.rms_eps,
                                              st));
      }
      mark("rms_norm");
      if (kept(kOmitQkv))
        PAGODA_RETURN_IF_ERROR(cuda::gemv_fused(L.qkv, qkv_in, nullptr, false, fq, st));
      mark("qkv+rope");
    } else {
      PAGODA_RETURN_IF_ERROR(
          norm_product(L.attn_norm, L.qkv, qkv_.as<float>(), qkv_w, "qkv", kOmitQkv));
      if (kept(kOmitRope))
        PAGODA_RETURN_IF_ERROR(cuda::rope_qkv_store(qkv_.as<float>(), L.qkv_bias, rp,
                                                    rope_cs_.as<float>(), s.db, q16_.as<uint16_t>(),
                                                    kv, st));
      mark("rope+kv");
    }
    if (kept(kOmitAttention))
      PAGODA_RETURN_IF_ERROR(cuda::attention(q16_.as<uint16_t>(), kv, s.db, s.plan, c.n_heads,
                                             scale, attn_.get(), cuda::act_type_for(L.wo.type),
                                             st));
    mark("attention");
    const cuda::GemvFusion& ffn_fold = fold_of(wo_folds, l);
    PAGODA_RETURN_IF_ERROR(residual_product(L.wo, attn_.get(), qd, "wo", kOmitWo, ffn_fold));
    if (ffn_fold.norm_ss) {
      mark("rms_norm");
      if (kept(kOmitGateUp))
        PAGODA_RETURN_IF_ERROR(cuda::gemv_fused(L.gate_up, xn_.get(), gu_.as<float>(), false,
                                                reading({}, ffn_fold.norm_ss), st));
      mark("gate_up");
    } else if (const auto fg = norm_in_prologue({}, L.gate_up, L.ffn_norm, kFuseNormFfn)) {
      mark("rms_norm");
      if (kept(kOmitGateUp))
        PAGODA_RETURN_IF_ERROR(cuda::gemv_fused(L.gate_up, x, gu_.as<float>(), false, *fg, st));
      mark("gate_up");
    } else {
      PAGODA_RETURN_IF_ERROR(
          norm_product(L.ffn_norm, L.gate_up, gu_.as<float>(), 2 * ff, "gate_up", kOmitGateUp));
    }
    if (q8_input(L.down) && !quantizes_input(L.down)) {
      PAGODA_ASSIGN_OR_RETURN(const cuda::Q8Act h, gemm.q8_input(ff, n, st));
      if (kept(kOmitSilu))
        PAGODA_RETURN_IF_ERROR(cuda::silu_mul_q8(gu_.as<float>(), n, c.ffn_dim, h, st));
      mark("silu_mul");
      if (kept(kOmitDown)) PAGODA_RETURN_IF_ERROR(gemm.matmul_q8(L.down, h, n, x, dim, true, st));
      mark("down");
      continue;
    }
    if (kept(kOmitSilu))
      PAGODA_RETURN_IF_ERROR(cuda::silu_mul(gu_.as<float>(), n, c.ffn_dim, hidden_.get(),
                                            cuda::act_type_for(L.down.type), st));
    mark("silu_mul");
    PAGODA_RETURN_IF_ERROR(
        residual_product(L.down, hidden_.get(), ff, "down", kOmitDown, fold_of(down_folds, l)));
  }
  if (s.n_out == 0) return Status::ok();
  PAGODA_RETURN_IF_ERROR(cuda::rms_norm(x, dim, s.logit_rows, output_norm_, xn_.get(),
                                        cuda::act_type_for(output_.type), s.n_out, c.dim, c.rms_eps,
                                        st));
  if (kept(kOmitOutput))
    PAGODA_RETURN_IF_ERROR(
        gemm.matmul(output_, xn_.get(), dim, s.n_out, logits_.as<float>(), c.n_vocab, false, st));
  if (s.greedy)
    PAGODA_RETURN_IF_ERROR(
        cuda::argmax_rows(logits_.as<float>(), s.n_out, c.n_vocab, tokens_out_.as<int32_t>(), st));
  mark("output");
  return Status::ok();
}

Status CudaModel::launch_graph(const Step& s) {
  const GraphKey key{s.n, s.n_out, s.greedy, s.plan.n_splits};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graph_seen_[key]++ < kEagerRunsBeforeCapture) return enqueue(s);
    cudaStream_t st = dev_->stream();
    const auto t0 = std::chrono::steady_clock::now();
    auto g = std::make_unique<Graph>();
    PAGODA_CUDA_TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const Status queued = enqueue(s);
    const cudaError_t ended = cudaStreamEndCapture(st, &g->graph);
    PAGODA_RETURN_IF_ERROR(queued);
    PAGODA_RETURN_IF_ERROR(cuda::cuda_status(ended, "capturing the decode step"));
    PAGODA_CUDA_TRY(cudaGraphInstantiate(&g->exec, g->graph, 0));
    it = graphs_.emplace(key, std::move(g)).first;
    // Graphs are captured per batch size as sizes appear (no padding to buckets, so no
    // wasted rows); what each capture stalls its step for is here (PAGODA_LOG=debug).
    if (log_level() <= LogLevel::kDebug)
      log_debug(str_format(
          "CUDA graph for %d rows (%d picks, %s, %d KV splits) captured in %.1f ms; %zu held", s.n,
          s.n_out, s.greedy ? "greedy" : "logits or sampled", s.plan.n_splits,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
          graphs_.size()));
  }
  return cuda::cuda_status(cudaGraphLaunch(it->second->exec, dev_->stream()), "cudaGraphLaunch");
}

Status CudaModel::enqueue_sampling(const StepSampling& sampling, int n_out) {
  const size_t row_bytes = sampling.rows.size() * sizeof(SamplingRow);
  const size_t bytes = row_bytes + sampling.penalties.size() * sizeof(int32_t);
  // The staging buffer is checked too: a failed pinned allocation below leaves it empty
  // while the device buffer has already grown.
  if (bytes > sampling_.bytes() || bytes > sampling_host_[stage_].bytes()) {
    PAGODA_RETURN_IF_ERROR(dev_->sync());  // the old buffers may still be in use
    PAGODA_ASSIGN_OR_RETURN(sampling_,
                            cuda::DeviceBuffer::alloc(std::max<size_t>(bytes * 2, 64u << 10)));
    for (cuda::PinnedBuffer& b : sampling_host_)
      PAGODA_RETURN_IF_ERROR(b.reserve(sampling_.bytes()));
  }
  auto* h = static_cast<unsigned char*>(sampling_host_[stage_].get());
  std::memcpy(h, sampling.rows.data(), row_bytes);
  if (!sampling.penalties.empty())
    std::memcpy(h + row_bytes, sampling.penalties.data(), bytes - row_bytes);
  cudaStream_t st = dev_->stream();
  PAGODA_CUDA_TRY(cudaMemcpyAsync(sampling_.get(), h, bytes, cudaMemcpyHostToDevice, st));
  auto* d = sampling_.as<unsigned char>();
  return cuda::sample_rows(
      logits_.as<float>(), n_out, config_.n_vocab, reinterpret_cast<const SamplingRow*>(d),
      reinterpret_cast<const int32_t*>(d + row_bytes), tokens_out_.as<int32_t>(), st);
}

Status CudaModel::queue_step(const Batch& batch, bool greedy, const StepSampling* sampling,
                             int n_out, int prev_picks) {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(batch.tokens.size());
  PAGODA_RETURN_IF_ERROR(check_batch(batch, c.n_vocab, prev_picks));
  if (sampling) PAGODA_RETURN_IF_ERROR(check_sampling(*sampling, n_out));
  PAGODA_CUDA_TRY(cudaSetDevice(dev_->index()));
  PAGODA_RETURN_IF_ERROR(reserve(std::max(n, n_out), n_out));
  // This step's staging buffers are the pair the step before did not use; a step that
  // fails gives its pair back, so a retry cannot write the pair a queued step's copies
  // may still read.
  const int used = stage_;
  stage_ ^= 1;
  const Status queued = queue_staged(batch, greedy, sampling, n_out);
  if (!queued) stage_ = used;
  return queued;
}

Status CudaModel::queue_staged(const Batch& batch, bool greedy, const StepSampling* sampling,
                               int n_out) {
  const int n = static_cast<int>(batch.tokens.size());
  Step s;
  s.n_out = n_out;
  s.greedy = greedy;
  PAGODA_RETURN_IF_ERROR(build_batch(batch, &s));

  bool all_decode = true;
  for (const cpu::AttentionSeq& q : batch.seqs) all_decode = all_decode && q.n_q == 1;
  const bool decode_only = all_decode && n <= kMaxGraphRows;
  if (profiler_) {
    profiler_->begin(all_decode ? "decode steps" : "steps with prefill");
    PAGODA_RETURN_IF_ERROR(enqueue(s));
    profiler_->end();
  } else if (decode_only && use_graphs_) {
    PAGODA_RETURN_IF_ERROR(launch_graph(s));
  } else {
    PAGODA_RETURN_IF_ERROR(enqueue(s));
  }
  if (sampling && n_out > 0) PAGODA_RETURN_IF_ERROR(enqueue_sampling(*sampling, n_out));
  return Status::ok();
}

Status CudaModel::run(const Batch& batch, bool greedy, void* out, const StepSampling* sampling) {
  if (!queued_.empty())
    return internal_error("a plain forward pass while pipelined steps are queued");
  last_picks_ = -1;  // a later pipelined step has no picks of this one to refer to
  const int n_out = out ? static_cast<int>(batch.logit_rows.size()) : 0;
  PAGODA_RETURN_IF_ERROR(queue_step(batch, greedy, sampling, n_out, 0));
  if (n_out == 0) return dev_->sync();
  const bool ids = greedy || sampling;
  const size_t bytes =
      static_cast<size_t>(n_out) * (ids ? sizeof(int32_t) : config_.n_vocab * sizeof(float));
  PAGODA_CUDA_TRY(cudaMemcpyAsync(logits_host_.get(), ids ? tokens_out_.get() : logits_.get(),
                                  bytes, cudaMemcpyDeviceToHost, dev_->stream()));
  PAGODA_RETURN_IF_ERROR(dev_->sync());
  std::memcpy(out, logits_host_.get(), bytes);
  return Status::ok();
}

Status CudaModel::launch(const Batch& batch, const StepSampling* sampling) {
  const int n = static_cast<int>(batch.tokens.size());
  const int n_out = static_cast<int>(batch.logit_rows.size());
  const int prev_picks = last_picks_;
  // Refusals that change nothing keep the previous picks usable for a later step.
  if (queued_.size() >= 2) return internal_error("a third pipelined step before a collect()");
  // The previous step's picks stay in tokens_out_ for this one's placeholders: buffers
  // must not be regrown (and so replaced) under them.
  if ((prev_picks > 0 || !queued_.empty()) && (n > capacity_ || n_out > logit_capacity_))
    return invalid_argument(
        str_format("a pipelined step of %d tokens and %d picks is over the runner's %d and %d", n,
                   n_out, capacity_, logit_capacity_));
  last_picks_ = -1;  // until this step is queued whole (a failure may have overwritten them)
  PAGODA_RETURN_IF_ERROR(
      queue_step(batch, sampling == nullptr, sampling, n_out, std::max(prev_picks, 0)));
  const int slot = next_slot_;
  cudaStream_t st = dev_->stream();
  if (!done_[slot]) PAGODA_CUDA_TRY(cudaEventCreateWithFlags(&done_[slot], cudaEventDisableTiming));
  if (n_out > 0) {
    // The slot's last user was collected (at most two steps are outstanding, and slots
    // alternate), so it may be regrown.
    PAGODA_RETURN_IF_ERROR(tokens_host_[slot].reserve(static_cast<size_t>(n_out) * 4));
    PAGODA_CUDA_TRY(cudaMemcpyAsync(tokens_host_[slot].get(), tokens_out_.get(),
                                    static_cast<size_t>(n_out) * 4, cudaMemcpyDeviceToHost, st));
  }
  PAGODA_CUDA_TRY(cudaEventRecord(done_[slot], st));
  queued_.push_back({n_out, slot});
  next_slot_ ^= 1;
  last_picks_ = n_out;
  return Status::ok();
}

Status CudaModel::collect(std::vector<int32_t>* tokens) {
  if (queued_.empty()) return internal_error("collect() without a queued step");
  const Queued q = queued_.front();
  queued_.pop_front();
  PAGODA_CUDA_TRY(cudaEventSynchronize(done_[q.slot]));
  const auto* p = static_cast<const int32_t*>(tokens_host_[q.slot].get());
  tokens->assign(p, p + q.n_out);
  return Status::ok();
}

Status CudaModel::forward(const Batch& batch, float* logits) {
  return run(batch, false, logits);
}

Status CudaModel::forward_greedy(const Batch& batch, int32_t* tokens) {
  return run(batch, true, tokens);
}

Status CudaModel::forward_sample(const Batch& batch, const StepSampling& sampling,
                                 int32_t* tokens) {
  return run(batch, false, tokens, &sampling);
}

}  // namespace pagoda
