#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagoda {
namespace {

// Natural-log normaliser of a row of logits (max + ln sum exp, the sum in double) and
// its largest entry (the first of equals).
struct RowStats {
  double lse = 0;
  int32_t top = 0;
};
RowStats row_stats(const float* l, int n) {
  RowStats s;
  float m = l[0];
  for (int i = 1; i < n; ++i)
    if (l[i] > m) {
      m = l[i];
      s.top = i;
    }
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(l[i]) - m);
  s.lse = m + std::log(sum);
  return s;
}

// The logits of the scored positions of one chunk (first .. n_ctx - 2, one row each),
// from an empty cache: the chunk runs in passes of n_batch tokens over blocks 0, 1, ...
// of the runner's pool, which the previous chunk's entries are simply overwritten in.
Status chunk_logits(ModelRunner& r, const std::vector<int32_t>& chunk, int first, int n_batch,
                    std::vector<float>* out) {
  const int n_ctx = static_cast<int>(chunk.size());
  const size_t V = static_cast<size_t>(r.config().n_vocab);
  out->assign(static_cast<size_t>(n_ctx - 1 - first) * V, 0.0f);
  std::vector<int32_t> blocks(static_cast<size_t>((n_ctx + 15) / 16));
  std::iota(blocks.begin(), blocks.end(), 0);
  for (int off = 0; off < n_ctx; off += n_batch) {
    const int n = std::min(n_batch, n_ctx - off);
    Batch b;
    b.tokens.assign(chunk.begin() + off, chunk.begin() + off + n);
    b.seqs.push_back({0, n, off, blocks.data()});
    for (int i = 0; i < n; ++i)
      if (off + i >= first && off + i < n_ctx - 1) b.logit_rows.push_back(i);
    // The rows wanted are consecutive positions: they land side by side.
    float* dst = b.logit_rows.empty()
                     ? nullptr
                     : out->data() + static_cast<size_t>(off + b.logit_rows[0] - first) * V;
    PAGODA_RETURN_IF_ERROR(r.forward(b, StepOutput::Logits(dst)));
  }
  return Status::ok();
}

double mean_error(double sum, double sum2, int64_t n) {
  if (n < 2) return 0;
  const double mean = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - mean * mean;
  return var > 0 ? std::sqrt(var / static_cast<double>(n - 1)) : 0;
}

}  // namespace

RunnerOptions perplexity_runner_options(const PerplexityOptions& o, RunnerOptions base) {
  base.kv_block_size = 16;
  base.n_kv_blocks = (o.n_ctx + 15) / 16;
  base.max_batch_tokens = std::min(o.n_batch, o.n_ctx);
  base.max_logit_rows = base.max_batch_tokens;
  return base;
}

double PerplexityResult::ppl() const {
  return scored > 0 ? std::exp(nll / static_cast<double>(scored)) : 0;
}
double PerplexityResult::ppl_error() const {
  return mean_error(nll, nll2, scored) * ppl();
}
double PerplexityResult::base_ppl() const {
  return scored > 0 ? std::exp(base_nll / static_cast<double>(scored)) : 0;
}
double PerplexityResult::mean_kld() const {
  if (kld.empty()) return 0;
  double s = 0;
  for (float v : kld) s += v;
  return s / static_cast<double>(kld.size());
}
double PerplexityResult::kld_error() const {
  double s = 0, s2 = 0;
  for (float v : kld) {
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  return mean_error(s, s2, static_cast<int64_t>(kld.size()));
}
double PerplexityResult::kld_quantile(double q) const {
  if (kld.empty()) return 0;
  std::vector<float> v = kld;
  std::sort(v.begin(), v.end());
  // Linear between the two nearest ranks.
  const double at = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - static_cast<double>(lo)) * (static_cast<double>(v[hi]) - v[lo]);
}
double PerplexityResult::same_top_fraction() const {
  return scored > 0 ? static_cast<double>(same_top) / static_cast<double>(scored) : 0;
}

Result<PerplexityResult> evaluate_perplexity(
    ModelRunner& model, ModelRunner* base, const std::vector<int32_t>& tokens,
    const PerplexityOptions& o, ThreadPool& pool,
    const std::function<void(const PerplexityResult&)>& progress) {
  const int V = model.config().n_vocab;
  if (o.n_ctx < 4) return invalid_argument("the context of a chunk must be at least 4 tokens");
  if (o.n_batch < 1) return invalid_argument("the batch size must be at least 1");
  if (o.n_ctx > model.config().context_length)
    return out_of_range(str_format("a chunk of %d tokens exceeds the model's context of %d",
                                   o.n_ctx, model.config().context_length));
  if (base && base->config().n_vocab != V)
    return invalid_argument(
        str_format("the base model's vocabulary (%d tokens) is not the "
                   "model's (%d)",
                   base->config().n_vocab, V));
  if (static_cast<int64_t>(tokens.size()) < 2 * static_cast<int64_t>(o.n_ctx))
    return invalid_argument(
        str_format("the text has %zu tokens; perplexity with a context of "
                   "%d needs at least %d (two chunks)",
                   tokens.size(), o.n_ctx, 2 * o.n_ctx));
  for (int32_t t : tokens)
    if (t < 0 || t >= V)
      return invalid_argument(str_format("token %d is outside the vocabulary", t));
  const int n_max = static_cast<int>(tokens.size() / static_cast<size_t>(o.n_ctx));
  const int n_chunks = o.n_chunks < 0 ? n_max : std::min(o.n_chunks, n_max);
  const int first = o.n_ctx / 2;
  const int n_rows = o.n_ctx - 1 - first;

  PerplexityResult r;
  r.has_base = base != nullptr;
  std::vector<float> lm, lb;
  std::vector<double> nll(static_cast<size_t>(n_rows)), base_nll(nll.size()), kld(nll.size());
  std::vector<char> same(nll.size());
  for (int c = 0; c < n_chunks; ++c) {
    const auto begin = tokens.begin() + static_cast<std::ptrdiff_t>(c) * o.n_ctx;
    std::vector<int32_t> chunk(begin, begin + o.n_ctx);
    if (o.bos >= 0) chunk[0] = o.bos;
    PAGODA_RETURN_IF_ERROR(chunk_logits(model, chunk, first, o.n_batch, &lm)
                               .with_context(str_format("chunk %d", c + 1)));
    if (base)
      PAGODA_RETURN_IF_ERROR(chunk_logits(*base, chunk, first, o.n_batch, &lb)
                                 .with_context(str_format("chunk %d of the base model", c + 1)));
    pool.parallel_for(n_rows, 4, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const size_t ju = static_cast<size_t>(j);
        // Row j is position first + j; it predicts the text's next token (never the BOS
        // put at position 0).
        const int32_t next = *(begin + first + j + 1);
        const float* m = lm.data() + ju * static_cast<size_t>(V);
        const RowStats sm = row_stats(m, V);
        nll[ju] = sm.lse - m[next];
        if (!base) continue;
        const float* q = lb.data() + ju * static_cast<size_t>(V);
        const RowStats sb = row_stats(q, V);
        base_nll[ju] = sb.lse - q[next];
        double d = 0;
        for (int i = 0; i < V; ++i) {
          const double lp_base = q[i] - sb.lse;
          d += std::exp(lp_base) * (lp_base - (m[i] - sm.lse));
        }
        kld[ju] = std::max(d, 0.0);  // >= 0 but for rounding
        same[ju] = sm.top == sb.top;
      }
    });
    for (size_t j = 0; j < nll.size(); ++j) {
      r.nll += nll[j];
      r.nll2 += nll[j] * nll[j];
      if (!base) continue;
      r.base_nll += base_nll[j];
      r.base_nll2 += base_nll[j] * base_nll[j];
      r.kld.push_back(static_cast<float>(kld[j]));
      r.same_top += same[j];
    }
    r.scored += n_rows;
    ++r.chunks;
    if (progress) progress(r);
  }
  return r;
}

}  // namespace pagoda
