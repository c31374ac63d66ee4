#include "ledger/plan.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "core/arith.h"
#include "core/fp8_scratch.h"
#include "core/text.h"

namespace pagoda::ledger {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

constexpr NamedGpu kGpus[] = {
    {"H100-80G", 81559}, {"H200-141G", 143771},  {"A100-40G", 40960},   {"A100-80G", 81920},
    {"L40S-48G", 46068}, {"RTX4090-24G", 24564}, {"B200-192G", 183359},
};

std::string gib(int64_t bytes) {
  return str_format("%.1f GiB", static_cast<double>(bytes) / (1 << 30));
}

// Bytes of one rank of a stage, from the file's own tensor sizes.
int64_t tensor_stage_bytes(const PlanInput& in, LayerRange r, bool first, bool last) {
  const int64_t tp = in.tp;
  const bool tied = std::none_of(in.tensors.begin(), in.tensors.end(), [](const SourceTensor& t) {
    return t.place == TensorPlace::kLastStage && t.matrix;
  });
  const auto per_rank = [&](const SourceTensor& t) -> int64_t {
    switch (t.split) {
      case TensorSplit::kReplicated:
        return t.bytes;
      case TensorSplit::kTensorParallel:
        return ceil_div(t.bytes, tp);
      case TensorSplit::kKvHeads:
        return in.shape.n_kv_heads > 0
                   ? t.bytes / in.shape.n_kv_heads * kv_heads_per_rank(in.shape, in.tp)
                   : ceil_div(t.bytes, tp);
    }
    return t.bytes;
  };
  int64_t n = 0;
  for (const SourceTensor& t : in.tensors) {
    bool here = false;
    switch (t.place) {
      case TensorPlace::kFirstStage:
        here = first || (last && tied);  // the last stage keeps a copy of a tied table
        break;
      case TensorPlace::kLastStage:
        here = last;
        break;
      case TensorPlace::kLayer:
        here = t.layer >= r.begin && t.layer < r.end;
        break;
      case TensorPlace::kEveryStage:
        here = true;
        break;
    }
    if (here) n += per_rank(t);
  }
  return n;
}

int64_t stage_weights(const PlanInput& in, LayerRange r, bool first, bool last) {
  if (in.exact_weights && !in.tensors.empty()) return tensor_stage_bytes(in, r, first, last);
  const int64_t shape_bytes = stage_weight_bytes(in.shape, in.weight_type, in.tp, r, first, last);
  if (in.exact_weights && in.checkpoint_bytes > 0) {
    // The checkpoint's exact total, split the way the shape splits.
    const long double share = static_cast<long double>(shape_bytes) /
                              static_cast<long double>(weight_bytes(in.shape, in.weight_type, 1));
    return static_cast<int64_t>(std::llround(share * in.checkpoint_bytes));
  }
  return shape_bytes;
}

int64_t max_sequences(int64_t pool, int64_t seq_bytes) {
  if (seq_bytes <= 0) return kUnlimited;
  return pool / seq_bytes;
}

// Largest context (a whole number of blocks) `n` sequences can each hold in `pool`.
int64_t max_context(const KvRate& rate, int64_t pool, int64_t n, int block_size) {
  if (rate.total() == 0) return kUnlimited;
  int64_t lo = 0, hi = int64_t{1} << 36;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (kv_bytes_per_sequence(rate, mid, block_size) <= pool / n)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > (s[0] == '-' ? 1 : 0); i -= 3)
    s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string outcome(const Plan& p, const PlanInput& in) {
  return str_format("%s sequence%s of %s tokens (%s KV pool per rank)",
                    with_commas(p.max_concurrent_sequences).c_str(),
                    p.max_concurrent_sequences == 1 ? "" : "s", with_commas(in.context).c_str(),
                    gib(p.kv_pool_bytes).c_str());
}

std::vector<int> larger_tp(const PlanInput& in) {
  std::vector<int> out;
  if (!in.device.gpu) return out;  // the CPU backend runs one process per model
  for (int tp = in.tp * 2; tp <= 64; tp *= 2)
    if (check_parallel(in.shape, tp, in.pp).is_ok()) out.push_back(tp);
  return out;
}

std::vector<WeightType> smaller_weights(const PlanInput& in) {
  static const char* const kServe[] = {"fp8", "int4-g128"};
  static const char* const kGguf[] = {"q8_0", "q6_k", "q5_k", "q4_k", "q3_k", "q2_k"};
  std::vector<WeightType> out;
  // The CPU backend runs GGUF files (any model gets there through a GGUF conversion) and
  // has no fp8 or int4-g128 kernels: it is offered GGUF types whatever the source.
  const bool gguf =
      !in.device.gpu || !in.tensors.empty() || in.weight_type.family == WeightFamily::kGguf;
  for (const char* name :
       gguf ? std::span<const char* const>(kGguf) : std::span<const char* const>(kServe)) {
    auto t = parse_weight_type(name);
    if (t.is_ok() && t->bits_per_weight() < in.weight_type.bits_per_weight() - 1e-9)
      out.push_back(*t);
  }
  return out;
}

std::vector<KvDtype> smaller_kv(const PlanInput& in) {
  std::vector<KvDtype> out;
  // The CPU backend keeps its KV cache in fp16 or int8 (q8_0; engine kv_cache_type refuses
  // fp8 and int4 there).
  if (!in.device.gpu) {
    if (kv_vector_bytes(KvDtype::kInt8, 128) < kv_vector_bytes(in.kv_dtype, 128))
      out.push_back(KvDtype::kInt8);
    return out;
  }
  for (KvDtype t : {KvDtype::kFp8, KvDtype::kInt4})
    if (kv_vector_bytes(t, 128) < kv_vector_bytes(in.kv_dtype, 128)) out.push_back(t);
  return out;
}

std::optional<Plan> fitting(const PlanInput& in) {
  auto p = make_plan(in, false);
  if (!p.is_ok() || !p->fits) return std::nullopt;
  return std::move(p).value();
}

std::vector<Suggestion> suggest(const PlanInput& in, const Plan& base) {
  std::vector<Suggestion> out;
  const auto add = [&](std::string flags, std::string why, const Plan& p) {
    out.push_back(
        {std::move(flags), std::move(why), p.max_concurrent_sequences, p.max_context_tokens});
  };
  for (KvDtype kv : smaller_kv(in)) {
    PlanInput m = in;
    m.kv_dtype = kv;
    if (auto p = fitting(m)) {
      add("--kv-cache-dtype " + std::string(kv_dtype_name(kv)),
          str_format("KV at %s bytes/token per rank: ",
                     with_commas(p->kv_bytes_per_token).c_str()) +
              outcome(*p, m),
          *p);
      break;
    }
  }
  for (int tp : larger_tp(in)) {
    PlanInput m = in;
    m.tp = tp;
    if (auto p = fitting(m)) {
      add(str_format("--tensor-parallel-size %d", tp),
          str_format("%d GPUs per pipeline stage, weights %s per rank: ", tp,
                     gib(p->weight_bytes).c_str()) +
              outcome(*p, m),
          *p);
      break;
    }
  }
  if (base.shortfall_bytes == 0 && base.max_context_tokens >= in.block_size &&
      base.max_context_tokens < in.context) {
    PlanInput m = in;
    m.context = base.max_context_tokens;
    if (auto p = fitting(m))
      add("--context " + std::to_string(m.context),
          str_format("the longest context %s sequences fit: ",
                     with_commas(in.concurrency).c_str()) +
              outcome(*p, m),
          *p);
  }
  if (in.concurrency > 1 && base.max_concurrent_sequences >= 1) {
    PlanInput m = in;
    m.concurrency = base.max_concurrent_sequences;
    if (auto p = fitting(m))
      add("--concurrency " + std::to_string(m.concurrency),
          "as many sequences of this context as fit: " + outcome(*p, m), *p);
  }
  for (const WeightType& w : smaller_weights(in)) {
    PlanInput m = in;
    m.weight_type = w;
    m.exact_weights = false;
    if (auto p = fitting(m)) {
      add("--dtype " + w.name,
          str_format("weights %s per rank: ", gib(p->weight_bytes).c_str()) + outcome(*p, m), *p);
      break;
    }
  }
  if (!out.empty()) return out;
  // No single change is enough: the fewest GPUs, then the largest weight type, then the
  // KV type that together fit.
  std::vector<int> tps = {in.tp};
  for (int tp : larger_tp(in)) tps.push_back(tp);
  std::vector<std::optional<WeightType>> weights = {std::nullopt};
  for (const WeightType& w : smaller_weights(in)) weights.push_back(w);
  std::vector<KvDtype> kvs = {in.kv_dtype};
  for (KvDtype kv : smaller_kv(in)) kvs.push_back(kv);
  for (int tp : tps) {
    for (const auto& w : weights) {
      for (KvDtype kv : kvs) {
        PlanInput m = in;
        m.tp = tp;
        m.kv_dtype = kv;
        std::string flags;
        if (tp != in.tp) flags += str_format("--tensor-parallel-size %d ", tp);
        if (w) {
          m.weight_type = *w;
          m.exact_weights = false;
          flags += "--dtype " + w->name + " ";
        }
        if (kv != in.kv_dtype) flags += "--kv-cache-dtype " + std::string(kv_dtype_name(kv)) + " ";
        if (flags.empty()) continue;
        if (auto p = fitting(m)) {
          flags.pop_back();
          add(flags, "together: " + outcome(*p, m), *p);
          return out;
        }
      }
    }
  }
  return out;
}

}  // namespace

std::span<const NamedGpu> named_gpus() {
  return kGpus;
}

Result<int64_t> parse_bytes(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !(v >= 0))
    return invalid_argument("'" + s + "' is not a memory size (try 80GiB, 141GB or a byte count)");
  std::string unit = ascii_lower(std::string_view(end));
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  struct Unit {
    const char* name;
    double scale;
  };
  static const Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
      {"k", 1024.0},
      {"kib", 1024.0},
      {"m", 1048576.0},
      {"mib", 1048576.0},
      {"g", 1073741824.0},
      {"gib", 1073741824.0},
      {"t", 1099511627776.0},
      {"tib", 1099511627776.0},
  };
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      const double bytes = v * u.scale;
      if (bytes > 9e18) return invalid_argument("'" + s + "' is too large");
      return static_cast<int64_t>(bytes);
    }
  }
  return invalid_argument("'" + s + "': unknown unit '" + std::string(end) +
                          "' (use B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)");
}

Result<Device> parse_device(std::string_view spec, bool gpu) {
  const std::string want = ascii_lower(spec);
  for (const NamedGpu& g : kGpus) {
    if (ascii_lower(g.name) != want) continue;
    if (!gpu) return invalid_argument("'" + std::string(spec) + "' is a GPU, not CPU memory");
    return Device{std::string(g.name), g.memory_mib << 20, true};
  }
  auto bytes = parse_bytes(spec);
  if (!bytes.is_ok()) {
    std::string names;
    for (const NamedGpu& g : kGpus)
      names += std::string(names.empty() ? "" : " ") + std::string(g.name);
    return invalid_argument("'" + std::string(spec) + "' is neither a memory size (80GiB, 141GB) " +
                            "nor a known GPU (" + names + ")");
  }
  if (*bytes <= 0) return invalid_argument("device memory must be positive");
  return Device{std::string(spec), *bytes, gpu};
}

int64_t activation_elems_per_token(const ModelShape& s, int tp, LayerRange layers) {
  const int64_t q = ceil_div(s.q_dim(), tp), attn = ceil_div(s.attn_out_dim(), tp);
  const int64_t kv = s.is_mla() ? s.kv_lora_rank + s.qk_rope_head_dim +
                                      s.n_heads / tp * (s.qk_nope_head_dim + s.v_head_dim)
                                : 2 * kv_heads_per_rank(s, tp) * s.head_dim;
  int64_t ffn = 0;
  for (int64_t l = layers.begin; l < layers.end; ++l)
    ffn = std::max(ffn, s.layer_is_moe(l) ? s.n_active_experts * s.expert_ffn +
                                                s.n_shared_experts * s.shared_ffn()
                                          : s.ffn);
  return 4 * s.hidden + q + kv + attn + 3 * ceil_div(ffn, tp) + s.rotary_dims();
}

int64_t fp8_activation_bytes(const ModelShape& s, int tp, LayerRange layers, int64_t max_tokens) {
  // The widest single FFN matrix of the stage (an expert's, or the shared experts').
  int64_t ffn = 0;
  for (int64_t l = layers.begin; l < layers.end; ++l)
    ffn = std::max(ffn, s.layer_is_moe(l)
                            ? std::max(s.expert_ffn, s.n_shared_experts * s.shared_ffn())
                            : s.ffn);
  ffn = ceil_div(ffn, tp);
  const int64_t qkv =
      ceil_div(s.q_dim(), tp) + (s.is_mla() ? s.kv_lora_rank + s.qk_rope_head_dim
                                            : 2 * kv_heads_per_rank(s, tp) * s.head_dim);
  const int64_t cols = std::max({s.hidden, ceil_div(s.attn_out_dim(), tp), ffn});
  const int64_t rows = std::max({qkv, 2 * ffn, s.hidden});
  return fp8_activation_scratch_bytes(max_tokens, cols, rows);
}

Overheads overheads(const PlanInput& in, LayerRange layers, bool last_stage) {
  Overheads o;
  const int64_t elem = in.device.gpu ? 2 : 4;
  o.activations =
      in.max_num_batched_tokens * activation_elems_per_token(in.shape, in.tp, layers) * elem;
  // FP8 weights multiply FP8 activations: the CUDA backend quantizes them into a scratch
  // of its own, sized once for the whole batch.
  if (in.device.gpu && in.weight_type.family == WeightFamily::kServe &&
      in.weight_type.name == "fp8")
    o.fp8_activations = fp8_activation_bytes(in.shape, in.tp, layers, in.max_num_batched_tokens);
  if (last_stage) o.logits = in.max_num_seqs * in.shape.vocab * 4 * (in.device.gpu ? 2 : 1);
  o.runtime = in.device.gpu ? kGpuRuntimeBytes
                            : kCpuRuntimeBaseBytes + kCpuRuntimeBytesPerVocab * in.shape.vocab;
  return o;
}

PlanInput input_from_source(const ModelSource& src) {
  PlanInput in;
  in.shape = src.shape;
  in.tensors = src.tensors;
  in.checkpoint_bytes = src.checkpoint_bytes;
  auto own = parse_weight_type(src.dtype.empty() ? "bf16" : src.dtype);
  in.weight_type = own.is_ok() ? *own : *parse_weight_type("bf16");
  in.exact_weights = !in.tensors.empty() || in.checkpoint_bytes > 0;
  in.context = in.shape.max_context > 0 ? in.shape.max_context : 4096;
  return in;
}

Result<Plan> make_plan(const PlanInput& in, bool with_suggestions) {
  const ModelShape& s = in.shape;
  PAGODA_RETURN_IF_ERROR(validate(s));
  PAGODA_RETURN_IF_ERROR(check_parallel(s, in.tp, in.pp));
  if (in.context <= 0) return invalid_argument("the context must be positive");
  if (in.concurrency <= 0) return invalid_argument("the concurrency must be positive");
  if (in.block_size <= 0) return invalid_argument("the block size must be positive");
  if (in.device.memory_bytes <= 0) return invalid_argument("device memory must be positive");
  if (!(in.gpu_memory_utilization > 0 && in.gpu_memory_utilization <= 1))
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");

  Plan p;
  p.budget_bytes = in.kv_cache_memory > 0
                       ? in.device.memory_bytes
                       : static_cast<int64_t>(static_cast<double>(in.device.memory_bytes) *
                                              in.gpu_memory_utilization);
  const std::vector<LayerRange> ranges = pipeline_stages(s.n_layers, in.pp);
  for (size_t i = 0; i < ranges.size(); ++i) {
    StagePlan st;
    st.layers = ranges[i];
    const bool first = i == 0, last = i + 1 == ranges.size();
    st.weight_bytes = stage_weights(in, st.layers, first, last);
    st.overheads = overheads(in, st.layers, last);
    st.kv = kv_rate(s, in.kv_dtype, in.tp, st.layers);
    st.kv_bytes_per_sequence = kv_bytes_per_sequence(st.kv, in.context, in.block_size);
    const int64_t fixed = st.weight_bytes + st.overheads.total();
    if (in.kv_cache_memory > 0) {
      st.kv_pool_bytes = in.kv_cache_memory;
      st.shortfall_bytes = std::max<int64_t>(0, fixed + in.kv_cache_memory - p.budget_bytes);
    } else {
      st.kv_pool_bytes = std::max<int64_t>(0, p.budget_bytes - fixed);
      st.shortfall_bytes = std::max<int64_t>(0, fixed - p.budget_bytes);
    }
    const int64_t pool = st.shortfall_bytes > 0 ? 0 : st.kv_pool_bytes;
    const int64_t per_block = st.kv.total() * in.block_size;
    st.kv_pool_blocks = per_block > 0 ? pool / per_block : 0;
    st.max_concurrent_sequences = max_sequences(pool, st.kv_bytes_per_sequence);
    st.max_context_tokens = max_context(st.kv, pool, in.concurrency, in.block_size);
    p.stages.push_back(st);
  }
  // The limiting stage: fewest sequences, then least room left.
  for (size_t i = 1; i < p.stages.size(); ++i) {
    const StagePlan &a = p.stages[i], &b = p.stages[p.bottleneck];
    if (a.shortfall_bytes > b.shortfall_bytes ||
        (a.shortfall_bytes == b.shortfall_bytes &&
         (a.max_concurrent_sequences < b.max_concurrent_sequences ||
          (a.max_concurrent_sequences == b.max_concurrent_sequences &&
           a.kv_pool_bytes < b.kv_pool_bytes))))
      p.bottleneck = i;
  }
  const StagePlan& b = p.stages[p.bottleneck];
  p.weight_bytes = b.weight_bytes;
  p.weight_params = weight_params(s);
  p.kv_bytes_per_token = b.kv.total();
  p.kv_bytes_per_sequence = b.kv_bytes_per_sequence;
  p.mha_equivalent_kv_bytes_per_token = 0;
  {
    // The MHA figure for the same layers as the headline one.
    ModelShape stage_shape = s;
    stage_shape.layer_attention.assign(static_cast<size_t>(s.n_layers), LayerAttention::kNone);
    for (int64_t l = b.layers.begin; l < b.layers.end; ++l)
      stage_shape.layer_attention[static_cast<size_t>(l)] =
          s.attention(l) == LayerAttention::kNone ? LayerAttention::kNone : LayerAttention::kFull;
    p.mha_equivalent_kv_bytes_per_token =
        mha_equivalent_kv_bytes_per_token(stage_shape, in.kv_dtype, in.tp);
  }
  p.overheads = b.overheads;
  p.kv_pool_bytes = b.shortfall_bytes > 0 ? 0 : b.kv_pool_bytes;
  p.kv_pool_blocks = b.kv_pool_blocks;
  p.shortfall_bytes = b.shortfall_bytes;
  p.max_concurrent_sequences = kUnlimited;
  p.max_context_tokens = kUnlimited;
  for (const StagePlan& st : p.stages) {
    p.max_concurrent_sequences = std::min(p.max_concurrent_sequences, st.max_concurrent_sequences);
    p.max_context_tokens = std::min(p.max_context_tokens, st.max_context_tokens);
  }
  if (s.max_context > 0) p.max_context_tokens = std::min(p.max_context_tokens, s.max_context);
  p.fits = p.shortfall_bytes == 0 && p.max_concurrent_sequences >= in.concurrency;

  if (s.max_context > 0 && in.context > s.max_context)
    p.notes.push_back(str_format("--context %s exceeds the model's trained context of %s tokens",
                                 with_commas(in.context).c_str(),
                                 with_commas(s.max_context).c_str()));
  if (const int64_t sw = s.n_sliding_layers(); sw > 0)
    p.notes.push_back(
        str_format("%lld of %lld layers keep at most %s tokens (sliding window); "
                   "kv_bytes_per_token counts a token in every layer",
                   static_cast<long long>(sw), static_cast<long long>(s.n_layers),
                   with_commas(s.sliding_window).c_str()));
  if (s.is_mla())
    p.notes.push_back(str_format(
        "MLA: each layer caches one latent of %lld + %lld values per "
        "token for all heads, replicated on every tensor-parallel rank",
        static_cast<long long>(s.kv_lora_rank), static_cast<long long>(s.qk_rope_head_dim)));
  else if (s.n_kv_heads < in.tp)
    p.notes.push_back(str_format(
        "%lld KV heads over %d ranks: each rank holds one head (each head "
        "is replicated %lld times)",
        static_cast<long long>(s.n_kv_heads), in.tp, static_cast<long long>(in.tp / s.n_kv_heads)));
  if (in.kv_cache_memory > 0)
    p.notes.push_back(
        "the KV pool is fixed by --kv-cache-memory; --gpu-memory-utilization is "
        "not applied");
  if (p.shortfall_bytes > 0)
    p.notes.push_back("weights and overheads exceed the budget by " + gib(p.shortfall_bytes));
  if (!p.fits && with_suggestions) {
    p.suggestions = suggest(in, p);
    if (p.suggestions.empty())
      p.notes.push_back(
          "no combination of larger tensor parallelism, smaller weights and "
          "smaller KV types tried makes it fit");
  }
  return p;
}

}  // namespace pagoda::ledger
