// pagoda bench: prefill and decode speed on random tokens, as llama-bench measures them
// (pp: one prompt of P tokens from an empty context; tg: G single-token steps from an
// empty context), medians over repeats.
#include <algorithm>
#include <cstdio>
#include <random>

#include "args.h"
#include "bench_runner.h"
#include "commands.h"
#include "common.h"
#include "engine/kv_budget.h"
#include "engine/session.h"
#include "json_out.h"
#include "model/runner.h"

namespace pagoda::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<FlagSpec> bench_flag_specs() {
  return {
      {"--model", "-m", true, "GGUF model file or Hugging Face checkpoint folder"},
      {"--prompt-len", "-p", true, "prompt tokens for the prefill test (default 512; 0 skips it)"},
      {"--gen-len", "-n", true, "tokens for the decode test (default 128; 0 skips it)"},
      {"--threads", "-t", true, "threads (default: all cores)"},
      {"--repeats", "-r", true, "repetitions; the median is reported (default 5)"},
      {"--batch-size", "-b", true, "prompt tokens per forward pass (default 512)"},
      {"--device", "", true, "cpu, cuda or cuda:N (default cpu)"},
      {"--depth", "", true,
       "tokens already in context before each test, as llama-bench's -d (default 0)"},
      {"--parallel", "", true, "--device cuda: sequences decoded together (default 1)"},
      {"--kv-cache-dtype", "", true,
       "auto (16-bit), fp8 (--device cuda) or q8_0 (--device cpu) (default auto)"},
      {"--quantization", "", true, "fp8: layers' float weights to FP8 at load (--device cuda)"},
      {"--async-scheduling", "", false,
       "--device cuda: decode steps pipelined as the engine's --async-scheduling runs them"},
      {"--json", "", false, "print JSON"},
      {"--help", "-h", false, "show this help"},
  };
}

// The flags as the CPU benchmark and bench_runner take them.
Result<RunnerBenchConfig> read_bench_flags(const Args& args, DeviceSpec* device, int* threads) {
  RunnerBenchConfig bc;
  FlagReader flags(args);
  bc.prompt_len = static_cast<int>(flags.integer("--prompt-len", 512, 0, 1 << 20));
  bc.gen_len = static_cast<int>(flags.integer("--gen-len", 128, 0, 1 << 20));
  *threads = static_cast<int>(flags.integer("--threads", 0, 0, 1024));
  bc.repeats = flags.integer("--repeats", 5, 1, 1000);
  bc.n_batch = static_cast<int>(flags.integer("--batch-size", 512, 1, 1 << 16));
  bc.depth = static_cast<int>(flags.integer("--depth", 0, 0, 1 << 20));
  bc.parallel = static_cast<int>(flags.integer("--parallel", 1, 1, 4096));
  PAGODA_RETURN_IF_ERROR(flags.status());
  PAGODA_ASSIGN_OR_RETURN(*device, read_device_flag(args, "cpu"));
  bc.device = device->index;
  EngineConfig kv_flag;
  kv_flag.kv_cache_dtype = args.get_or("--kv-cache-dtype", "auto");
  kv_flag.quantization = args.get_or("--quantization", "");
  PAGODA_ASSIGN_OR_RETURN(bc.kv_cache_type, kv_cache_type(kv_flag, device->is_cuda()));
  PAGODA_ASSIGN_OR_RETURN(bc.fp8_weights, fp8_weights(kv_flag, device->is_cuda()));
  bc.json = args.has("--json");
  bc.pipelined = args.has("--async-scheduling");
  return bc;
}

// Tokens per second of each prefill (pp) and decode (tg) run.
struct BenchRuns {
  std::vector<double> pp, tg;
};

// The llama-bench tests on the CPU Model, each from `depth` tokens of random context.
Result<BenchRuns> time_cpu(Session& session, const RunnerBenchConfig& bc, int n_vocab) {
  const int P = bc.prompt_len, G = bc.gen_len, depth = bc.depth;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0, n_vocab - 1);
  std::vector<int32_t> context(static_cast<size_t>(depth));
  for (int32_t& t : context) t = dist(rng);
  std::vector<int32_t> prompt(static_cast<size_t>(std::max(P, G)));
  for (int32_t& t : prompt) t = dist(rng);
  std::vector<float> logits;
  // Each test starts from `depth` tokens of context, evaluated untimed (llama-bench -d).
  auto fill = [&]() -> Status {
    session.reset();
    return depth > 0 ? session.eval(context, false, &logits) : Status::ok();
  };
  // One untimed warm-up of each test so page faults and first-touch costs are excluded.
  BenchRuns runs;
  for (int64_t r = 0; r <= bc.repeats; ++r) {
    if (P > 0) {
      PAGODA_RETURN_IF_ERROR(fill());
      const double t0 = now_seconds();
      std::vector<int32_t> p(prompt.begin(), prompt.begin() + P);
      PAGODA_RETURN_IF_ERROR(session.eval(p, false, &logits));
      if (r > 0) runs.pp.push_back(P / (now_seconds() - t0));
    }
    if (G > 0) {
      PAGODA_RETURN_IF_ERROR(fill());
      const double t0 = now_seconds();
      for (int i = 0; i < G; ++i)
        PAGODA_RETURN_IF_ERROR(session.eval({prompt[static_cast<size_t>(i)]}, false, &logits));
      if (r > 0) runs.tg.push_back(G / (now_seconds() - t0));
    }
  }
  return runs;
}

Status bench_cpu(const std::string& model_path, const RunnerBenchConfig& bc, int threads) {
  const int P = bc.prompt_len, G = bc.gen_len, depth = bc.depth;
  PAGODA_ASSIGN_OR_RETURN(const Loaded loaded, load(model_path, true, false));
  const Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  const bool q8 = bc.kv_cache_type == KvCacheType::kQ8_0;
  const char* kv_name = q8 ? "q8_0" : "f16";
  if (q8) PAGODA_RETURN_IF_ERROR(KvStorage::supports_q8(c));
  const int n_ctx = depth + std::max({P, G, 1});
  if (n_ctx > c.context_length)
    return out_of_range(
        str_format("%d tokens exceed the model's context of %d", n_ctx, c.context_length));

  ThreadPool pool(threads);
  Session session(model, pool, n_ctx, bc.n_batch, bc.kv_cache_type);
  PAGODA_ASSIGN_OR_RETURN(const BenchRuns runs, time_cpu(session, bc, c.n_vocab));
  const std::vector<double>& pp = runs.pp;
  const std::vector<double>& tg = runs.tg;
  // Bytes one decode step reads: the weights, plus the KV of the context at the run's
  // mean depth (depth + G/2).
  const double kv_read = static_cast<double>(KvStorage::bytes_per_token(c, q8)) * (depth + G / 2.0);
  const double bytes_per_token = static_cast<double>(model.decode_weight_bytes()) + kv_read;
  const double pp_tps = pp.empty() ? 0 : median(pp), tg_tps = tg.empty() ? 0 : median(tg);
  if (bc.json) {
    std::printf(
        "{\"model\":%s,\"threads\":%d,\"prompt_len\":%d,\"gen_len\":%d,\"depth\":%d,"
        "\"kv_cache\":\"%s\",\"repeats\":%lld,"
        "\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,\"prefill_runs\":%s,\"decode_runs\":%s,"
        "\"weight_bytes\":%zu,\"decode_bytes_per_token\":%.0f,\"load_s\":%.3f}\n",
        json_string(model_path).c_str(), pool.size(), P, G, depth, kv_name,
        static_cast<long long>(bc.repeats), pp_tps, tg_tps, json_array(pp).c_str(),
        json_array(tg).c_str(), model.weight_bytes(), bytes_per_token, loaded.load_seconds);
  } else {
    std::printf("model %s (%s), %d threads, %s KV cache, depth %d\n", model_path.c_str(),
                c.name.c_str(), pool.size(), kv_name, depth);
    if (P > 0) std::printf("prefill pp%d: %.1f tok/s (median of %zu)\n", P, pp_tps, pp.size());
    if (G > 0) std::printf("decode  tg%d: %.1f tok/s (median of %zu)\n", G, tg_tps, tg.size());
    std::printf("bytes read per decoded token: %.1f MB\n", bytes_per_token / 1e6);
  }
  return Status::ok();
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const std::vector<FlagSpec> specs = bench_flag_specs();
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("bench", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("bench",
                            "-m MODEL [--prompt-len P] [--gen-len G] [--threads T] [--json]", specs)
                          .c_str());
    return 0;
  }
  if (!args->has("--model")) return fail("bench", invalid_argument("missing -m MODEL"));
  DeviceSpec device;
  int threads = 0;
  const Result<RunnerBenchConfig> bc = read_bench_flags(*args, &device, &threads);
  if (!bc) return fail("bench", bc.status());
  if (device.is_cuda()) return bench_runner(*args->get("--model"), *bc);
  if (bc->parallel != 1 || bc->pipelined)
    return fail("bench",
                unsupported("--parallel and --async-scheduling need --device cuda for now"));
  if (Status s = bench_cpu(*args->get("--model"), *bc, threads); !s) return fail("bench", s);
  return 0;
}

}  // namespace pagoda::cli
