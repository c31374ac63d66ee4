#include "model/model.h"

#include <cstring>

#include "backend/cpu/convert_blocks.h"
#include "core/log.h"
#include "model/arch/arch.h"
#include "model/tensor_source.h"
#include "model/weight_types.h"

namespace pagoda {
namespace {

Result<std::vector<float>> load_vector(const TensorSource& f, const std::string& name, int64_t n) {
  PAGODA_ASSIGN_OR_RETURN(const WeightTensor* t, f.find_tensor(name, {n}));
  std::vector<float> v(static_cast<size_t>(n));
  if (t->type == DType::kF32) {
    std::memcpy(v.data(), f.tensor_data(*t), static_cast<size_t>(n) * sizeof(float));
  } else {
    Status s = cpu::dequantize_row(t->type, f.tensor_data(*t), v.data(), n);
    if (!s) return s.with_context("tensor '" + name + "'");
  }
  return v;
}

// What converting tensors at load needs: threads (the caller's pool, or one made on the
// first conversion) and the tally for the log.
struct LoadContext {
  ThreadPool* pool = nullptr;
  std::unique_ptr<ThreadPool> own;
  cpu::ConversionTally tally;

  ThreadPool& threads() {
    if (pool == nullptr) {
      own = std::make_unique<ThreadPool>(0);
      pool = own.get();
    }
    return *pool;
  }
};

// Loads the matrices named in `names` (each [cols] x rows[i]), converting types the
// kernels lack; when all end in one type they are stacked into one matrix so a single
// product computes them all.
Result<std::vector<cpu::WeightMatrix>> load_stacked(const TensorSource& f,
                                                    const std::vector<std::string>& names,
                                                    const std::vector<int64_t>& rows, int64_t cols,
                                                    LoadContext* ctx) {
  std::vector<const WeightTensor*> ts;
  std::vector<DType> types;  // as stored
  for (size_t i = 0; i < names.size(); ++i) {
    PAGODA_ASSIGN_OR_RETURN(const WeightTensor* t, f.find_tensor(names[i], {cols, rows[i]}));
    const DType to = cpu_storage_type(t->type);
    if (!cpu::is_supported_weight_type(to))
      return unsupported("tensor '" + names[i] + "' has type " + std::string(dtype_name(t->type)) +
                         ", which the CPU backend cannot multiply with");
    ts.push_back(t);
    types.push_back(to);
  }
  // Each tensor's bytes in its stored type: the file's, or converted.
  std::vector<std::vector<uint8_t>> converted(ts.size());
  std::vector<const uint8_t*> data(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    data[i] = f.tensor_data(*ts[i]);
    if (types[i] == ts[i]->type) continue;
    auto c = cpu::convert_matrix(ts[i]->type, data[i], rows[i], cols, types[i], ctx->threads(),
                                 &ctx->tally);
    if (!c)
      return c.status().with_context("converting tensor '" + names[i] + "' for the CPU backend");
    converted[i] = std::move(c).value();
    data[i] = converted[i].data();
  }
  std::vector<cpu::WeightMatrix> out;
  bool same = true;
  for (DType t : types) same = same && t == types[0];
  if (same && ts.size() > 1) {
    std::vector<uint8_t> buf;
    int64_t total = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      buf.insert(buf.end(), data[i], data[i] + row_bytes(types[i], cols) * rows[i]);
      total += rows[i];
    }
    PAGODA_ASSIGN_OR_RETURN(auto w,
                            cpu::WeightMatrix::from_gguf(types[0], buf.data(), total, cols));
    out.push_back(std::move(w));
  } else {
    for (size_t i = 0; i < ts.size(); ++i) {
      PAGODA_ASSIGN_OR_RETURN(auto w,
                              cpu::WeightMatrix::from_gguf(types[i], data[i], rows[i], cols));
      out.push_back(std::move(w));
    }
  }
  // Copied: let the file's pages go now, so loading never holds a model twice.
  for (const WeightTensor* t : ts) f.release_tensor(*t);
  return out;
}

// A product of one matrix.
Result<cpu::WeightMatrix> load_matrix(const TensorSource& f, const MatrixTensor& m,
                                      LoadContext* ctx) {
  PAGODA_ASSIGN_OR_RETURN(auto v, load_stacked(f, {m.name}, {m.rows}, m.cols, ctx));
  return std::move(v[0]);
}

}  // namespace

Status check_batch(const Batch& batch, int32_t n_vocab, int prev_picks) {
  const size_t n = batch.tokens.size();
  if (n == 0) return invalid_argument("empty batch");
  for (int32_t t : batch.tokens)
    if (t >= n_vocab || (t < 0 && -static_cast<int64_t>(t) - 1 >= prev_picks))
      return invalid_argument(
          t < 0 && prev_picks > 0
              ? str_format("token %d stands for row %lld of the previous step, which picked %d", t,
                           static_cast<long long>(-static_cast<int64_t>(t) - 1), prev_picks)
              : str_format("token id %d is out of range", t));
  for (int r : batch.logit_rows)
    if (r < 0 || static_cast<size_t>(r) >= n) return invalid_argument("logit row out of range");
  return Status::ok();
}

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const GgufFile& file, ThreadPool* pool) {
  PAGODA_ASSIGN_OR_RETURN(const std::unique_ptr<TensorSource> src, gguf_tensor_source(file));
  return load(*src, pool);
}

Result<std::unique_ptr<Model>> Model::load(const TensorSource& f, ThreadPool* pool) {
  std::unique_ptr<Model> m(new Model());
  PAGODA_ASSIGN_OR_RETURN(m->config_, read_model_config(f));
  ModelConfig& c = m->config_;
  PAGODA_RETURN_IF_ERROR(require_features(c.recipe, kCpuRecipeFeatures, "the CPU backend"));
  LoadContext ctx;
  ctx.pool = pool;
  PAGODA_ASSIGN_OR_RETURN(m->tok_embd_, load_matrix(f, {kTokEmbdTensor, c.n_vocab, c.dim}, &ctx));
  PAGODA_ASSIGN_OR_RETURN(m->output_norm_, load_vector(f, kOutputNormTensor, c.dim));
  if (!c.recipe.tied_output) {
    PAGODA_ASSIGN_OR_RETURN(m->output_, load_matrix(f, {kOutputTensor, c.n_vocab, c.dim}, &ctx));
  }
  if (c.rope_has_freq_factors) {
    PAGODA_ASSIGN_OR_RETURN(m->rope_freq_factors_,
                            load_vector(f, kRopeFreqsTensor, c.rope_dims / 2));
  }

  m->layers_.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = m->layers_[static_cast<size_t>(l)];
    const LayerTensors t = layer_tensors(c, l);
    PAGODA_ASSIGN_OR_RETURN(L.attn_norm, load_vector(f, t.attn_norm, c.dim));
    PAGODA_ASSIGN_OR_RETURN(L.ffn_norm, load_vector(f, t.ffn_norm, c.dim));
    PAGODA_ASSIGN_OR_RETURN(L.qkv, load_stacked(f, t.qkv.names, t.qkv.rows, t.qkv.cols, &ctx));
    for (size_t i = 0; i < t.qkv_bias.size(); ++i) {
      PAGODA_ASSIGN_OR_RETURN(auto b, load_vector(f, t.qkv_bias[i], t.qkv.rows[i]));
      L.qkv_bias.insert(L.qkv_bias.end(), b.begin(), b.end());
    }
    if (!t.q_norm.empty()) {
      PAGODA_ASSIGN_OR_RETURN(L.q_norm, load_vector(f, t.q_norm, c.head_dim));
      PAGODA_ASSIGN_OR_RETURN(L.k_norm, load_vector(f, t.k_norm, c.head_dim));
    }
    PAGODA_ASSIGN_OR_RETURN(L.wo, load_matrix(f, t.wo, &ctx));
    PAGODA_ASSIGN_OR_RETURN(L.gate_up,
                            load_stacked(f, t.gate_up.names, t.gate_up.rows, t.gate_up.cols, &ctx));
    PAGODA_ASSIGN_OR_RETURN(L.down, load_matrix(f, t.down, &ctx));
  }
  // Every tensor now lives in ordinary memory; the file's pages need not stay resident.
  f.release_tensor_data();
  m->conversions_ = ctx.tally.describe();
  if (!m->conversions_.empty())
    log_info("converted for the CPU backend's kernels: " + m->conversions_);
  return m;
}

size_t Model::weight_bytes() const {
  size_t n = tok_embd_.bytes() + (config_.recipe.tied_output ? 0 : output_.bytes()) +
             (output_norm_.size() + rope_freq_factors_.size()) * sizeof(float);
  for (const LayerWeights& L : layers_) {
    for (const auto& w : L.qkv) n += w.bytes();
    for (const auto& w : L.gate_up) n += w.bytes();
    n += L.wo.bytes() + L.down.bytes();
    n += (L.attn_norm.size() + L.ffn_norm.size() + L.qkv_bias.size() + L.q_norm.size() +
          L.k_norm.size()) *
         sizeof(float);
  }
  return n;
}

size_t Model::decode_weight_bytes() const {
  // A decode step reads every matrix once, but of the embedding only one row (unless it
  // doubles as the output projection, which is read whole).
  const size_t embd_row = tok_embd_.bytes() / static_cast<size_t>(config_.n_vocab);
  return weight_bytes() - (config_.recipe.tied_output ? 0 : tok_embd_.bytes() - embd_row) +
         (config_.recipe.tied_output ? embd_row : 0);
}

}  // namespace pagoda
