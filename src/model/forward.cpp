// The CPU forward pass: it runs the model's recipe (model/arch/recipe.h) over the batch,
// whatever the architecture. With the recipe's features it implements
// (kCpuRecipeFeatures) one layer is:
//   h = x + Wo . attention(rope(qn(Wq . norm(x) + bq)), rope(kn(Wk . norm(x) + bk)),
//                          Wv . norm(x) + bv)
//   x = h + Wdown . (silu(Wgate . norm(h)) * Wup . norm(h))
// with the biases (Qwen2) and the per-head RMSNorms qn, kn (Qwen3) where the recipe has them.
#include <cmath>
#include <cstring>

#include "backend/cpu/ops.h"
#include "model/model.h"

namespace pagoda {

struct Model::Workspace {
  int64_t capacity = 0;  // tokens
  std::vector<float> x, xn, qkv, attn, proj, gu, hidden, rope_cos, rope_sin, logits_in;
  cpu::MatmulScratch scratch;

  void reserve(const ModelConfig& c, int64_t n) {
    if (n <= capacity) return;
    capacity = n;
    const auto sz = [n](int64_t w) { return static_cast<size_t>(n * w); };
    x.resize(sz(c.dim));
    xn.resize(sz(c.dim));
    qkv.resize(sz(c.q_dim() + 2 * c.kv_dim()));
    attn.resize(sz(c.q_dim()));
    proj.resize(sz(c.dim));
    gu.resize(sz(2 * c.ffn_dim));
    hidden.resize(sz(c.ffn_dim));
    rope_cos.resize(sz(c.rope_dims / 2));
    rope_sin.resize(sz(c.rope_dims / 2));
    logits_in.resize(sz(c.dim));
  }
};

Model::WorkspacePtr Model::make_workspace() const {
  return WorkspacePtr(new Workspace());
}
void Model::WorkspaceDeleter::operator()(Workspace* w) const {
  delete w;
}

namespace {

// Runs the matrices of `ws` (stacked or separate) so that y holds their outputs side by
// side, row stride `y_stride`.
void matmul_parts(const std::vector<cpu::WeightMatrix>& ws, const float* x, int64_t n,
                  int64_t x_stride, float* y, int64_t y_stride, ThreadPool& pool,
                  cpu::MatmulScratch& scratch) {
  int64_t col = 0;
  for (const cpu::WeightMatrix& w : ws) {
    cpu::matmul(w, x, n, x_stride, y + col, y_stride, pool, scratch);
    col += w.rows();
  }
}

// Applies `fn(row)` to rows [0, n), in parallel when there are enough of them.
template <typename F>
void for_rows(int64_t n, ThreadPool& pool, F&& fn) {
  if (n < 8) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool.parallel_for(n, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  });
}

}  // namespace

void Model::compute_rope_tables(const Batch& batch, Workspace& ws) const {
  // Angles as llama.cpp computes them (float, the per-pair frequency obtained by repeated
  // multiplication), so positions far into the context rotate identically.
  const ModelConfig& c = config_;
  const int pairs = c.rope_dims / 2;
  const float theta_scale = std::pow(c.rope_theta, -2.0f / static_cast<float>(c.rope_dims));
  for (const BatchSeq& s : batch.seqs) {
    for (int t = 0; t < s.n_q; ++t) {
      const int64_t row = s.q_row + t;
      float theta = static_cast<float>(s.pos0 + t);
      for (int i = 0; i < pairs; ++i) {
        float angle = theta;
        if (c.rope_has_freq_factors) angle /= rope_freq_factors_[static_cast<size_t>(i)];
        angle *= c.rope_freq_scale;
        ws.rope_cos[static_cast<size_t>(row * pairs + i)] = std::cos(angle);
        ws.rope_sin[static_cast<size_t>(row * pairs + i)] = std::sin(angle);
        theta *= theta_scale;
      }
    }
  }
}

Status Model::forward(const Batch& batch, KvStorage& kv, float* logits, Workspace& ws,
                      ThreadPool& pool, ActivationObserver* observer) const {
  using In = ActivationObserver::Input;
  const auto observe = [&](int l, In which, const float* in, int64_t cols) {
    if (observer) observer->observe(l, which, in, static_cast<int64_t>(batch.tokens.size()), cols);
  };
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  PAGODA_RETURN_IF_ERROR(check_batch(batch, c.n_vocab));
  ws.reserve(c, n);

  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), qkv_w = qd + 2 * kvd;
  const int pairs = c.rope_dims / 2;
  const bool neox = c.recipe.rope_style == RopeStyle::kNeox;
  float* x = ws.x.data();
  for_rows(n, pool, [&](int64_t i) {
    tok_embd_.dequantize_row(batch.tokens[static_cast<size_t>(i)], x + i * dim);
  });
  compute_rope_tables(batch, ws);

  cpu::AttentionParams ap;
  ap.n_heads = c.n_heads;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = layers_[static_cast<size_t>(l)];
    const cpu::KvLayer kvl = kv.layer(l);
    for_rows(n, pool, [&](int64_t i) {
      cpu::rms_norm(x + i * dim, L.attn_norm.data(), ws.xn.data() + i * dim, dim, c.rms_eps);
    });
    observe(l, In::kQkv, ws.xn.data(), dim);
    matmul_parts(L.qkv, ws.xn.data(), n, dim, ws.qkv.data(), qkv_w, pool, ws.scratch);
    for_rows(n, pool, [&](int64_t i) {
      float* r = ws.qkv.data() + i * qkv_w;
      if (!L.qkv_bias.empty()) cpu::add_inplace(r, L.qkv_bias.data(), qkv_w);
      if (!L.q_norm.empty()) {  // each q and k head normalised on its own, before RoPE
        for (int h = 0; h < c.n_heads; ++h)
          cpu::rms_norm(r + h * c.head_dim, L.q_norm.data(), r + h * c.head_dim, c.head_dim,
                        c.rms_eps);
        for (int h = 0; h < c.n_kv_heads; ++h)
          cpu::rms_norm(r + qd + h * c.head_dim, L.k_norm.data(), r + qd + h * c.head_dim,
                        c.head_dim, c.rms_eps);
      }
      const float* cs = ws.rope_cos.data() + i * pairs;
      const float* sn = ws.rope_sin.data() + i * pairs;
      cpu::rope(r, c.n_heads, c.head_dim, pairs, cs, sn, neox);
      cpu::rope(r + qd, c.n_kv_heads, c.head_dim, pairs, cs, sn, neox);
    });
    if (observer)
      observer->observe_kv(l, ws.qkv.data() + qd, ws.qkv.data() + qd + kvd, n, qkv_w, kvd);
    for (const BatchSeq& s : batch.seqs) {
      const float* base = ws.qkv.data() + static_cast<int64_t>(s.q_row) * qkv_w;
      cpu::kv_write(kvl, s, base + qd, base + qd + kvd, qkv_w);
    }
    cpu::attention(kvl, batch.seqs.data(), static_cast<int>(batch.seqs.size()), ap, ws.qkv.data(),
                   qkv_w, ws.attn.data(), qd, pool);
    observe(l, In::kWo, ws.attn.data(), qd);
    cpu::matmul(L.wo, ws.attn.data(), n, qd, ws.proj.data(), dim, pool, ws.scratch);
    for_rows(n, pool, [&](int64_t i) {
      cpu::add_inplace(x + i * dim, ws.proj.data() + i * dim, dim);
      cpu::rms_norm(x + i * dim, L.ffn_norm.data(), ws.xn.data() + i * dim, dim, c.rms_eps);
    });
    const int64_t ff = c.ffn_dim;
    observe(l, In::kGateUp, ws.xn.data(), dim);
    matmul_parts(L.gate_up, ws.xn.data(), n, dim, ws.gu.data(), 2 * ff, pool, ws.scratch);
    for_rows(n, pool, [&](int64_t i) {
      const float* g = ws.gu.data() + i * 2 * ff;
      cpu::silu_mul(g, g + ff, ws.hidden.data() + i * ff, ff);
    });
    observe(l, In::kDown, ws.hidden.data(), ff);
    cpu::matmul(L.down, ws.hidden.data(), n, ff, ws.proj.data(), dim, pool, ws.scratch);
    for_rows(n, pool,
             [&](int64_t i) { cpu::add_inplace(x + i * dim, ws.proj.data() + i * dim, dim); });
  }

  const int64_t n_out = static_cast<int64_t>(batch.logit_rows.size());
  if (n_out == 0 || logits == nullptr) return Status::ok();  // nothing asked for
  for_rows(n_out, pool, [&](int64_t i) {
    cpu::rms_norm(x + batch.logit_rows[static_cast<size_t>(i)] * dim, output_norm_.data(),
                  ws.logits_in.data() + i * dim, dim, c.rms_eps);
  });
  const cpu::WeightMatrix& out = c.recipe.tied_output ? tok_embd_ : output_;
  cpu::matmul(out, ws.logits_in.data(), n_out, dim, logits, c.n_vocab, pool, ws.scratch);
  return Status::ok();
}

}  // namespace pagoda
