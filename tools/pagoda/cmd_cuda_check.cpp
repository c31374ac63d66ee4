// pagoda cuda-check: runs greedy generation on the CPU backend and on the CUDA backend
// from the same prompts and compares them token by token. A divergence is accepted only
// at a near tie: where the CPU's logit for the token the GPU chose is within
// --tie-margin of the CPU's best (the two backends round differently, so exact ties can
// go either way; anything else is a bug). Exit status 0 when every prompt passes.
//
// With --kv-cache-dtype fp8 (or --quantization fp8) the GPU computes with rounded values,
// so its tokens need not match: the CPU is then run over the GPU's tokens (teacher forcing) and
// every token the GPU chose must be in the CPU's top 5 at that position; the top-1
// agreement and the logit error are reported. The same holds for files whose
// weights the CUDA loader converts (block types its kernels do not take), and for K-quant
// weights: the CPU multiplies those, as llama.cpp does, with activations rounded to 8 bits
// in blocks of 256 (Q8_K), the GPU with activations rounded in blocks of 32, so each side
// differs from the exact product by its own rounding, as much as llama.cpp's CPU does
// (bench/RESULTS.md, "K-quant files").
//
// --parallel N decodes N sequences (the prompts in turn) together on the GPU, as the
// engine batches them: products of N rows (cuBLASLt above 8, FP8 ones with FP8 weights)
// replayed from CUDA graphs, each sequence checked against the CPU on its own.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine/kv_budget.h"
#include "engine/runner_session.h"
#include "engine/sampler.h"
#include "ledger/sources.h"

namespace pagoda::cli {
namespace {

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // before each generated token
};

Result<Greedy> greedy(ModelRunner& r, int n_ctx, const std::vector<int32_t>& prompt, int n) {
  RunnerSession s(r, n_ctx, 16);
  Greedy g;
  std::vector<float> logits;
  PAGODA_RETURN_IF_ERROR(s.eval(prompt, false, &logits));
  const int V = r.config().n_vocab;
  for (int i = 0; i < n; ++i) {
    g.logits.push_back(logits);
    const int32_t t = argmax(logits.data(), V);
    g.tokens.push_back(t);
    if (i + 1 < n) PAGODA_RETURN_IF_ERROR(s.eval({t}, false, &logits));
  }
  return g;
}

// Greedy generation of every prompt at once as the engine batches it: each prompt's
// prefill on its own, then decode steps of one row per sequence, so the GPU runs
// products of prompts.size() rows and, past its first steps, replays them from CUDA
// graphs. Sequence i owns blocks [i * per_seq, (i + 1) * per_seq) of the pool.
Result<std::vector<Greedy>> greedy_batched(ModelRunner& r, int n_ctx,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           int n) {
  constexpr int kBlock = 16, kChunk = 512;
  const int per_seq = (n_ctx + kBlock - 1) / kBlock;
  const size_t N = prompts.size();
  const int V = r.config().n_vocab;
  std::vector<std::vector<int32_t>> tables(N);
  for (size_t i = 0; i < N; ++i)
    for (int b = 0; b < per_seq; ++b)
      tables[i].push_back(static_cast<int32_t>(i * static_cast<size_t>(per_seq)) + b);
  std::vector<Greedy> out(N);
  std::vector<float> logits(N * static_cast<size_t>(V));
  for (size_t i = 0; i < N; ++i) {
    const std::vector<int32_t>& p = prompts[i];
    const int len = static_cast<int>(p.size());
    for (int off = 0; off < len; off += kChunk) {
      const int chunk = std::min(kChunk, len - off);
      Batch b;
      b.tokens.assign(p.begin() + off, p.begin() + off + chunk);
      b.seqs.push_back({0, chunk, off, tables[i].data()});
      const bool last = off + chunk == len;
      if (last) b.logit_rows.push_back(chunk - 1);
      PAGODA_RETURN_IF_ERROR(r.forward(b, StepOutput::Logits(last ? logits.data() : nullptr)));
    }
    out[i].logits.emplace_back(logits.begin(), logits.begin() + V);
    out[i].tokens.push_back(argmax(logits.data(), V));
  }
  for (int k = 1; k < n; ++k) {
    Batch b;
    for (size_t i = 0; i < N; ++i) {
      b.tokens.push_back(out[i].tokens.back());
      b.seqs.push_back(
          {static_cast<int>(i), 1, static_cast<int>(prompts[i].size()) + k - 1, tables[i].data()});
      b.logit_rows.push_back(static_cast<int>(i));
    }
    PAGODA_RETURN_IF_ERROR(r.forward(b, StepOutput::Logits(logits.data())));
    for (size_t i = 0; i < N; ++i) {
      const float* row = logits.data() + i * static_cast<size_t>(V);
      out[i].logits.emplace_back(row, row + V);
      out[i].tokens.push_back(argmax(row, V));
    }
  }
  return out;
}

// Logits before each of `tokens` when the prompt is followed by them (teacher forcing).
Result<std::vector<std::vector<float>>> forced(ModelRunner& r, int n_ctx,
                                               const std::vector<int32_t>& prompt,
                                               const std::vector<int32_t>& tokens) {
  RunnerSession s(r, n_ctx, 16);
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  PAGODA_RETURN_IF_ERROR(s.eval(prompt, false, &logits));
  for (size_t i = 0; i < tokens.size(); ++i) {
    out.push_back(logits);
    if (i + 1 < tokens.size()) PAGODA_RETURN_IF_ERROR(s.eval({tokens[i]}, false, &logits));
  }
  return out;
}

// Rank of `token` in `logits` (0 = the largest).
int rank_of(const std::vector<float>& logits, int32_t token) {
  const float v = logits[static_cast<size_t>(token)];
  int rank = 0;
  for (float x : logits) rank += x > v;
  return rank;
}

// Infinite where either side holds an inf or NaN: std::max over the sequences then keeps
// it (a NaN would compare false and vanish, printing a perfect 0).
double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

using Prompts = std::vector<std::vector<int32_t>>;

std::vector<FlagSpec> cuda_check_flag_specs() {
  return {
      {"--model", "-m", true, "GGUF model file or Hugging Face checkpoint folder"},
      {"--tokens", "", true, "one prompt as token ids: \"1 2 3\""},
      {"--tokens-file", "", true, "prompts as token ids, one prompt per line"},
      {"--n-predict", "-n", true, "tokens to generate per prompt (default 64)"},
      {"--tie-margin", "", true, "logit gap below which a divergence is a tie (default 0.05)"},
      {"--device", "", true, "the GPU to check: cuda or cuda:N (default cuda, GPU 0)"},
      {"--kv-cache-dtype", "", true,
       "the GPU's KV cache: auto (fp16, token-exact check) or fp8 (top-5 check)"},
      {"--quantization", "", true, "fp8: the GPU's layer weights in FP8 (top-5 check)"},
      {"--parallel", "", true,
       "GPU sequences decoded together (the prompts repeated in turn; default 1: one at a "
       "time)"},
      {"--threads", "-t", true, "CPU threads (default: all cores)"},
      {"--help", "-h", false, "show this help"},
  };
}

struct CheckFlags {
  int n_gen = 64;
  double margin = 0.05;
  int gpu = 0;
  int threads = 0;
  int parallel = 1;
};

Result<CheckFlags> read_check_flags(const Args& args) {
  CheckFlags c;
  FlagReader flags(args);
  c.n_gen = static_cast<int>(flags.integer("--n-predict", 64, 1, 4096));
  c.margin = flags.number("--tie-margin", 0.05, 0, 100);
  c.threads = static_cast<int>(flags.integer("--threads", 0, 0, 1024));
  c.parallel = static_cast<int>(flags.integer("--parallel", 1, 1, 1024));
  PAGODA_RETURN_IF_ERROR(flags.status());
  PAGODA_ASSIGN_OR_RETURN(const DeviceSpec device, read_device_flag(args, "cuda"));
  if (!device.is_cuda())
    return invalid_argument("cuda-check compares the CPU with a GPU: --device cuda or cuda:N");
  c.gpu = device.index;
  return c;
}

// --tokens and every line of --tokens-file.
Result<Prompts> read_prompts(const Args& args) {
  Prompts prompts;
  if (args.has("--tokens")) {
    PAGODA_ASSIGN_OR_RETURN(std::vector<int32_t> t, parse_token_list(*args.get("--tokens")));
    prompts.push_back(std::move(t));
  }
  if (args.has("--tokens-file")) {
    std::ifstream in(*args.get("--tokens-file"));
    if (!in) return io_error("cannot read " + *args.get("--tokens-file"));
    std::string line;
    while (std::getline(in, line)) {
      PAGODA_ASSIGN_OR_RETURN(std::vector<int32_t> t, parse_token_list(line));
      if (!t.empty()) prompts.push_back(std::move(t));
    }
  }
  if (prompts.empty()) return invalid_argument("no prompts given");
  return prompts;
}

// The longest prompt's length; an error for an id outside the vocabulary.
Result<size_t> longest_prompt(const Prompts& prompts, int n_vocab) {
  size_t longest = 0;
  for (const auto& p : prompts) {
    longest = std::max(longest, p.size());
    for (int32_t id : p)
      if (id < 0 || id >= n_vocab)
        return invalid_argument(str_format("token id %d is outside the vocabulary", id));
  }
  return longest;
}

// A KV pool for one sequence of n_ctx tokens, with the GPU's KV cache and weight types as
// the engine reads --kv-cache-dtype and --quantization.
Result<RunnerOptions> runner_options(const Args& args, int n_ctx, int gpu) {
  RunnerOptions o;
  o.cuda = settings().cuda;
  o.n_kv_blocks = (n_ctx + 15) / 16;
  o.device = gpu;
  EngineConfig engine_flags;
  engine_flags.kv_cache_dtype = args.get_or("--kv-cache-dtype", "auto");
  engine_flags.quantization = args.get_or("--quantization", "");
  PAGODA_ASSIGN_OR_RETURN(o.kv_cache_type, kv_cache_type(engine_flags, /*gpu=*/true));
  PAGODA_ASSIGN_OR_RETURN(o.fp8_weights, fp8_weights(engine_flags, /*gpu=*/true));
  return o;
}

// The GPU's sequences: each prompt on its own, or `parallel` of them decoded together.
struct GpuRuns {
  std::vector<size_t> prompt_of;  // sequence -> prompt
  std::vector<Greedy> runs;
};

Result<GpuRuns> run_on_gpu(ModelRunner& gpu, int n_ctx, const Prompts& prompts, int n_gen,
                           int parallel) {
  GpuRuns g;
  if (parallel == 1) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      PAGODA_ASSIGN_OR_RETURN(Greedy b, greedy(gpu, n_ctx, prompts[i], n_gen));
      g.prompt_of.push_back(i);
      g.runs.push_back(std::move(b));
    }
    return g;
  }
  Prompts seqs;
  for (int j = 0; j < parallel; ++j) {
    g.prompt_of.push_back(static_cast<size_t>(j) % prompts.size());
    seqs.push_back(prompts[g.prompt_of.back()]);
  }
  PAGODA_ASSIGN_OR_RETURN(g.runs, greedy_batched(gpu, n_ctx, seqs, n_gen));
  return g;
}

// Empty when the GPU computes with the CPU's numbers (a token-for-token check); else what
// differs, for the top-5 check: FP8, or weights the CUDA loader converts
// (model/cuda_weight_types.h), or K types (see the top of this file).
std::string rounded_numbers(const RunnerOptions& o, const TensorSource& file) {
  int converted = 0;
  if (auto src = ledger::source_from_tensors(file)) converted = ledger::restate_for_cuda(&*src);
  // K types: the block types of 256-element super-blocks.
  const bool k_quants =
      std::any_of(file.tensors().begin(), file.tensors().end(),
                  [](const WeightTensor& t) { return dtype_info(t.type).block_elems == 256; });
  const bool fp8_kv = o.kv_cache_type == KvCacheType::kFp8;
  if (o.fp8_weights && fp8_kv) return "fp8 weights + KV";
  if (o.fp8_weights) return "fp8 weights";
  if (fp8_kv) return "fp8 KV";
  if (converted > 0) return "converted weights";
  if (k_quants) return "K-quant weights";
  return "";
}

// The CPU run over the GPU's tokens: each must be in the CPU's top 5. Returns the exit code.
Result<int> check_top5(ModelRunner& cpu, int n_ctx, const Prompts& prompts, const GpuRuns& gpu,
                       int n_gen, const std::string& what) {
  int top1 = 0, outside = 0, total = 0;
  double worst = 0;
  for (size_t j = 0; j < gpu.runs.size(); ++j) {
    const Greedy& b = gpu.runs[j];
    const std::vector<int32_t>& prompt = prompts[gpu.prompt_of[j]];
    PAGODA_ASSIGN_OR_RETURN(const auto a, forced(cpu, n_ctx, prompt, b.tokens));
    int p_top1 = 0, p_worst_rank = 0;
    double p_nmse = 0;
    for (int k = 0; k < n_gen; ++k) {
      const size_t ks = static_cast<size_t>(k);
      const int rank = rank_of(a[ks], b.tokens[ks]);
      p_top1 += rank == 0;
      outside += rank >= 5;
      p_worst_rank = std::max(p_worst_rank, rank);
      p_nmse = std::max(p_nmse, nmse(b.logits[ks], a[ks]));
    }
    top1 += p_top1;
    total += n_gen;
    worst = std::max(worst, p_nmse);
    std::printf(
        "sequence %zu (prompt %zu, %zu tokens): cuda's token is the cpu's top 1 at %d/%d, worst "
        "cpu rank %d; worst logit nmse %.2e\n",
        j, gpu.prompt_of[j], prompt.size(), p_top1, n_gen, p_worst_rank + 1, p_nmse);
  }
  std::printf(
      "cuda-check %s: %zu sequences, %d tokens: cpu top 1 at %d (%.1f%%), outside the "
      "cpu's top 5 at %d; worst logit nmse %.2e\n",
      what.c_str(), gpu.runs.size(), total, top1, 100.0 * top1 / std::max(1, total), outside,
      worst);
  return outside == 0 ? 0 : 1;
}

// Greedy on the CPU too: the tokens must match, or part at a near tie. Returns the exit code.
Result<int> check_identical(ModelRunner& cpu, int n_ctx, const Prompts& prompts, const GpuRuns& gpu,
                            int n_gen, double margin) {
  std::vector<Greedy> cpu_runs;
  for (const auto& prompt : prompts) {
    PAGODA_ASSIGN_OR_RETURN(Greedy a, greedy(cpu, n_ctx, prompt, n_gen));
    cpu_runs.push_back(std::move(a));
  }
  int identical = 0, ties = 0, failures = 0;
  double worst_nmse = 0;
  for (size_t j = 0; j < gpu.runs.size(); ++j) {
    const Greedy& a = cpu_runs[gpu.prompt_of[j]];
    const Greedy& b = gpu.runs[j];
    const size_t len = prompts[gpu.prompt_of[j]].size();
    // Logits after the prompt: the same input on both sides.
    const double e = nmse(b.logits[0], a.logits[0]);
    worst_nmse = std::max(worst_nmse, e);
    int k = 0;
    while (k < n_gen && a.tokens[static_cast<size_t>(k)] == b.tokens[static_cast<size_t>(k)]) ++k;
    if (k == n_gen) {
      ++identical;
      std::printf(
          "sequence %zu (prompt %zu, %zu tokens): %d/%d identical, prompt logits nmse %.2e\n", j,
          gpu.prompt_of[j], len, n_gen, n_gen, e);
      continue;
    }
    // At the first divergence both sides saw the same tokens: compare the CPU's logits
    // of the two choices.
    const auto& la = a.logits[static_cast<size_t>(k)];
    const int32_t ta = a.tokens[static_cast<size_t>(k)], tb = b.tokens[static_cast<size_t>(k)];
    const double gap =
        static_cast<double>(la[static_cast<size_t>(ta)]) - la[static_cast<size_t>(tb)];
    const bool tie = gap <= margin;
    (tie ? ties : failures)++;
    std::printf(
        "sequence %zu (prompt %zu, %zu tokens): diverged at step %d (cpu %d, cuda %d; cpu logit "
        "gap %.4f: %s), prompt logits nmse %.2e\n",
        j, gpu.prompt_of[j], len, k, ta, tb, gap, tie ? "near tie" : "MISMATCH", e);
  }
  std::printf(
      "cuda-check: %zu sequences, %d identical over %d tokens, %d diverged at near ties, "
      "%d mismatches; worst prompt-logit nmse %.2e\n",
      gpu.runs.size(), identical, n_gen, ties, failures, worst_nmse);
  return failures == 0 ? 0 : 1;
}

// Everything after the flags; returns the exit code.
Result<int> run_check(const Args& args, const CheckFlags& f, const Prompts& prompts) {
  PAGODA_ASSIGN_OR_RETURN(const Loaded loaded, load(*args.get("--model"), true, false));
  const ModelConfig& c = loaded.model->config();
  PAGODA_ASSIGN_OR_RETURN(const size_t longest, longest_prompt(prompts, c.n_vocab));
  const int n_ctx = static_cast<int>(longest) + f.n_gen;
  PAGODA_ASSIGN_OR_RETURN(const RunnerOptions o, runner_options(args, n_ctx, f.gpu));
  ThreadPool pool(f.threads);
  auto cpu = make_cpu_runner(*loaded.model, pool, o);
  RunnerOptions go = o;
  go.n_kv_blocks = o.n_kv_blocks * f.parallel;
  PAGODA_ASSIGN_OR_RETURN(const std::unique_ptr<ModelRunner> gpu,
                          make_cuda_runner(*loaded.file, go));
  std::printf("model %s (%s)\n  cpu:  %s\n  cuda: %s\n", args.get("--model")->c_str(),
              c.name.c_str(), cpu->describe().c_str(), gpu->describe().c_str());
  PAGODA_ASSIGN_OR_RETURN(const GpuRuns runs,
                          run_on_gpu(*gpu, n_ctx, prompts, f.n_gen, f.parallel));
  if (f.parallel > 1) std::printf("%d sequences decoded together on the GPU\n", f.parallel);
  const std::string rounded = rounded_numbers(o, *loaded.file);
  if (!rounded.empty()) return check_top5(*cpu, n_ctx, prompts, runs, f.n_gen, rounded);
  return check_identical(*cpu, n_ctx, prompts, runs, f.n_gen, f.margin);
}

}  // namespace

int cmd_cuda_check(int argc, char** argv) {
  const std::vector<FlagSpec> specs = cuda_check_flag_specs();
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("cuda-check", args.status());
  if (args->has("--help")) {
    std::printf("%s",
                usage("cuda-check", "-m MODEL (--tokens IDS | --tokens-file FILE)", specs).c_str());
    return 0;
  }
  if (!args->has("--model")) return fail("cuda-check", invalid_argument("missing -m MODEL"));
  const Result<CheckFlags> flags = read_check_flags(*args);
  if (!flags) return fail("cuda-check", flags.status());
  const Result<Prompts> prompts = read_prompts(*args);
  if (!prompts) return fail("cuda-check", prompts.status());
  const Result<int> code = run_check(*args, *flags, *prompts);
  if (!code) return fail("cuda-check", code.status());
  return *code;
}

}  // namespace pagoda::cli
