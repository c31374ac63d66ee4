// The forward pass on the GPU: the recipe's layer as model/forward.cpp runs it, each op a
// kernel (or cuBLASLt call) on the model's stream, fused as the step's FusionPlan says
// (fusion_plan.h):
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
#include <vector>

#include "backend/cuda/check.h"
#include "core/log.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/op_hooks.h"
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
  bool replan = false;
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
    replan = true;
  }
  if (!norm_ss_.get()) {
    PAGODA_ASSIGN_OR_RETURN(norm_ss_, cuda::DeviceBuffer::alloc(2 * c.n_layers * cuda::kNormBytes));
    replan = true;
  }
  // The plans test the fused kernels' buffers (set once they exist), not their addresses.
  if (replan)
    for (StepClass k : {StepClass::kOneToken, StepClass::kFewTokens, StepClass::kBatch})
      plans_[static_cast<size_t>(k)] = plan_fusions(k);
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
    const BatchSeq& q = batch.seqs[s];
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
  const FusionPlan& plan = plans_[static_cast<size_t>(step_class(s.n))];
  OpHooks ops(omit_, profiler_.get());
  cudaStream_t st = dev_->stream();
  PAGODA_RETURN_IF_ERROR(ops.run(0, "embed+rope", [&] {
    // Pipelined steps' placeholder tokens are the previous step's picks, still in tokens_out_.
    PAGODA_RETURN_IF_ERROR(
        cuda::embed_rows(tok_embd_, s.tokens, s.n, x_.as<float>(), st, tokens_out_.as<int32_t>()));
    return cuda::rope_tables(rope_, s.db, rope_cs_.as<float>(), st);
  }));
  // The folded norms' sums start at zero; where none folds (the fp16 types) the memset
  // would be a graph node of its own between kernels.
  if (plan.clears_norm_sums)
    PAGODA_CUDA_TRY(cudaMemsetAsync(norm_ss_.get(), 0, norm_ss_.bytes(), st));
  for (int l = 0; l < config_.n_layers; ++l) {
    const LayerPlan& p = plan.layers[static_cast<size_t>(l)];
    PAGODA_RETURN_IF_ERROR(attention_block(s, l, p, ops));
    PAGODA_RETURN_IF_ERROR(ffn_block(s, l, p, ops));
  }
  return output_block(s, ops);
}

Status CudaModel::attention_block(const Step& s, int l, const LayerPlan& p, OpHooks& ops) {
  using Sw = CudaSwitches;
  const ModelConfig& c = config_;
  const Layer& L = layers_[static_cast<size_t>(l)];
  const cuda::KvLayerView kv = kv_layer(l);
  cudaStream_t st = dev_->stream();
  float* x = x_.as<float>();
  if (p.qkv == LayerPlan::Qkv::kPlain) {
    PAGODA_RETURN_IF_ERROR(norm_product(s.n, L.attn_norm, L.qkv, qkv_.as<float>(),
                                        c.q_dim() + 2 * c.kv_dim(), Sw::kOmitQkv, "qkv", ops));
    PAGODA_RETURN_IF_ERROR(ops.run(Sw::kOmitRope, "rope+kv", [&] {
      return cuda::rope_qkv_store(qkv_.as<float>(), L.qkv_bias, rope_, rope_cs_.as<float>(), s.db,
                                  q16_.as<uint16_t>(), kv, st);
    }));
  } else {
    cuda::GemvFusion f = rope_kv_fusion(l, s.db);
    const void* in = xn_.get();
    if (p.qkv == LayerPlan::Qkv::kRopeFolded) {
      f = reading_norm(f, l, 0);
    } else if (p.qkv == LayerPlan::Qkv::kRopeNormIn) {
      f = norm_prologue(f, L.attn_norm);
      in = x;
    } else {
      PAGODA_RETURN_IF_ERROR(ops.run(Sw::kOmitNorm, "rms_norm", [&] {
        return cuda::rms_norm(x, c.dim, nullptr, L.attn_norm, xn_.get(),
                              cuda::act_type_for(L.qkv.type), s.n, c.dim, c.rms_eps, st);
      }));
    }
    PAGODA_RETURN_IF_ERROR(ops.run(Sw::kOmitQkv, "qkv+rope", [&] {
      return cuda::gemv_fused(L.qkv, in, nullptr, false, f, st);
    }));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  PAGODA_RETURN_IF_ERROR(ops.run(Sw::kOmitAttention, "attention", [&] {
    return cuda::attention(q16_.as<uint16_t>(), kv, s.db, s.plan, c.n_heads, scale, attn_.get(),
                           cuda::act_type_for(L.wo.type), st);
  }));
  return residual_product(s.n, L.wo, attn_.get(), c.q_dim(), p.wo_gemv,
                          p.wo_stores_norm ? storing_norm(l, 1) : cuda::GemvFusion{}, Sw::kOmitWo,
                          "wo", ops);
}

Status CudaModel::ffn_block(const Step& s, int l, const LayerPlan& p, OpHooks& ops) {
  using Sw = CudaSwitches;
  const ModelConfig& c = config_;
  const Layer& L = layers_[static_cast<size_t>(l)];
  cudaStream_t st = dev_->stream();
  float* x = x_.as<float>();
  float* gu = gu_.as<float>();
  const int64_t ff = c.ffn_dim;
  if (p.gate_up == LayerPlan::GateUp::kPlain) {
    PAGODA_RETURN_IF_ERROR(
        norm_product(s.n, L.ffn_norm, L.gate_up, gu, 2 * ff, Sw::kOmitGateUp, "gate_up", ops));
  } else {
    const bool folded = p.gate_up == LayerPlan::GateUp::kFolded;
    const cuda::GemvFusion f = folded ? reading_norm({}, l, 1) : norm_prologue({}, L.ffn_norm);
    PAGODA_RETURN_IF_ERROR(ops.run(Sw::kOmitGateUp, "gate_up", [&] {
      return cuda::gemv_fused(L.gate_up, folded ? xn_.get() : x, gu, false, f, st);
    }));
  }
  if (p.down_q8_silu) {
    cuda::Gemm& gemm = dev_->gemm();
    PAGODA_ASSIGN_OR_RETURN(const cuda::Q8Act h, gemm.q8_input(ff, s.n, st));
    PAGODA_RETURN_IF_ERROR(ops.run(Sw::kOmitSilu, "silu_mul",
                                   [&] { return cuda::silu_mul_q8(gu, s.n, c.ffn_dim, h, st); }));
    return ops.run(Sw::kOmitDown, "down",
                   [&] { return gemm.matmul_q8(L.down, h, s.n, x, c.dim, true, st); });
  }
  PAGODA_RETURN_IF_ERROR(ops.run(Sw::kOmitSilu, "silu_mul", [&] {
    return cuda::silu_mul(gu, s.n, c.ffn_dim, hidden_.get(), cuda::act_type_for(L.down.type), st);
  }));
  return residual_product(s.n, L.down, hidden_.get(), ff, p.down_gemv,
                          p.down_stores_norm ? storing_norm(l + 1, 0) : cuda::GemvFusion{},
                          Sw::kOmitDown, "down", ops);
}

Status CudaModel::output_block(const Step& s, OpHooks& ops) {
  if (s.n_out == 0) return Status::ok();
  const ModelConfig& c = config_;
  cudaStream_t st = dev_->stream();
  PAGODA_RETURN_IF_ERROR(ops.run(0, "output_norm", [&] {
    return cuda::rms_norm(x_.as<float>(), c.dim, s.logit_rows, output_norm_, xn_.get(),
                          cuda::act_type_for(output_.type), s.n_out, c.dim, c.rms_eps, st);
  }));
  PAGODA_RETURN_IF_ERROR(ops.run(CudaSwitches::kOmitOutput, "output", [&] {
    return dev_->gemm().matmul(output_, xn_.get(), c.dim, s.n_out, logits_.as<float>(), c.n_vocab,
                               false, st);
  }));
  if (!s.greedy) return Status::ok();
  return ops.run(0, "argmax", [&] {
    return cuda::argmax_rows(logits_.as<float>(), s.n_out, c.n_vocab, tokens_out_.as<int32_t>(),
                             st);
  });
}

Status CudaModel::norm_product(int n, const float* norm_w, const cuda::DeviceMatrix& w, float* y,
                               int64_t y_stride, unsigned kind, const char* name, OpHooks& ops) {
  const ModelConfig& c = config_;
  cudaStream_t st = dev_->stream();
  cuda::Gemm& gemm = dev_->gemm();
  const float* x = x_.as<float>();
  const unsigned kNorm = CudaSwitches::kOmitNorm;
  if (n <= cuda::kGemvMaxTokens && cuda::Gemm::takes_q8(w)) {
    // Few tokens over GGUF blocks: the norm writes the product's 8-bit activations.
    PAGODA_ASSIGN_OR_RETURN(const cuda::Q8Act a, gemm.q8_input(c.dim, n, st));
    PAGODA_RETURN_IF_ERROR(ops.run(kNorm, "rms_norm", [&] {
      return cuda::rms_norm_q8(x, c.dim, nullptr, norm_w, a, n, c.dim, c.rms_eps, st);
    }));
    return ops.run(kind, name, [&] { return gemm.matmul_q8(w, a, n, y, y_stride, false, st); });
  }
  if (w.fp8 && n > cuda::kGemvMaxTokens) {
    // FP8 products of a batch: the norm takes the activations' max on the way.
    PAGODA_ASSIGN_OR_RETURN(uint32_t* const amax, gemm.fp8_amax_slot());
    PAGODA_RETURN_IF_ERROR(ops.run(kNorm, "rms_norm", [&] {
      return cuda::rms_norm(x, c.dim, nullptr, norm_w, xn_.get(), cuda::act_type_for(w.type), n,
                            c.dim, c.rms_eps, st, amax);
    }));
    return ops.run(kind, name, [&] {
      return gemm.matmul_fp8_scanned(w, xn_.get(), c.dim, n, y, y_stride, false, st);
    });
  }
  PAGODA_RETURN_IF_ERROR(ops.run(kNorm, "rms_norm", [&] {
    return cuda::rms_norm(x, c.dim, nullptr, norm_w, xn_.get(), cuda::act_type_for(w.type), n,
                          c.dim, c.rms_eps, st);
  }));
  return ops.run(kind, name,
                 [&] { return gemm.matmul(w, xn_.get(), c.dim, n, y, y_stride, false, st); });
}

Status CudaModel::residual_product(int n, const cuda::DeviceMatrix& w, const void* in, int64_t cols,
                                   bool gemv, const cuda::GemvFusion& f, unsigned kind,
                                   const char* name, OpHooks& ops) {
  cudaStream_t st = dev_->stream();
  float* x = x_.as<float>();
  return ops.run(kind, name, [&] {
    return gemv ? cuda::gemv_fused(w, in, x, true, f, st)
                : dev_->gemm().matmul(w, in, cols, n, x, config_.dim, true, st);
  });
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
  for (const BatchSeq& q : batch.seqs) all_decode = all_decode && q.n_q == 1;
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

Status CudaModel::forward(const Batch& batch, const StepOutput& out) {
  PAGODA_RETURN_IF_ERROR(out.check());
  if (out.tokens) return run(batch, out.sampling == nullptr, out.tokens, out.sampling);
  return run(batch, false, out.logits);
}

}  // namespace pagoda
