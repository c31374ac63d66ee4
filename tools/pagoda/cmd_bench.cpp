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

}  // namespace

int cmd_bench(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--model", "-m", true, "GGUF model file"},
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
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("bench", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("bench",
                            "-m MODEL [--prompt-len P] [--gen-len G] [--threads T] [--json]", specs)
                          .c_str());
    return 0;
  }
  if (!args->has("--model")) return fail("bench", invalid_argument("missing -m MODEL"));
  FlagReader flags(*args);
  const int P = static_cast<int>(flags.integer("--prompt-len", 512, 0, 1 << 20));
  const int G = static_cast<int>(flags.integer("--gen-len", 128, 0, 1 << 20));
  const int threads = static_cast<int>(flags.integer("--threads", 0, 0, 1024));
  const int64_t reps = flags.integer("--repeats", 5, 1, 1000);
  const int n_batch = static_cast<int>(flags.integer("--batch-size", 512, 1, 1 << 16));
  const int depth = static_cast<int>(flags.integer("--depth", 0, 0, 1 << 20));
  const int parallel = static_cast<int>(flags.integer("--parallel", 1, 1, 4096));
  if (!flags.status()) return fail("bench", flags.status());
  const Result<DeviceSpec> spec = read_device_flag(*args, "cpu");
  if (!spec) return fail("bench", spec.status());
  const DeviceKind device = spec->kind;
  const int gpu = spec->index;
  EngineConfig kv_flag;
  kv_flag.kv_cache_dtype = args->get_or("--kv-cache-dtype", "auto");
  kv_flag.quantization = args->get_or("--quantization", "");
  const Result<KvCacheType> kv_type = kv_cache_type(kv_flag, device != DeviceKind::kCpu);
  if (!kv_type) return fail("bench", kv_type.status());
  const Result<bool> fp8 = fp8_weights(kv_flag, device != DeviceKind::kCpu);
  if (!fp8) return fail("bench", fp8.status());
  if (device != DeviceKind::kCpu) {
    RunnerBenchConfig bc{P,
                         G,
                         depth,
                         parallel,
                         n_batch,
                         reps,
                         gpu,
                         args->has("--json"),
                         *kv_type,
                         *fp8,
                         args->has("--async-scheduling")};
    return bench_runner(*args->get("--model"), bc);
  }
  if (parallel != 1 || args->has("--async-scheduling"))
    return fail("bench",
                unsupported("--parallel and --async-scheduling need --device cuda for now"));

  auto loaded = load(*args->get("--model"), true, false);
  if (!loaded) return fail("bench", loaded.status());
  const Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  const bool q8 = *kv_type == KvCacheType::kQ8_0;
  const char* kv_name = q8 ? "q8_0" : "f16";
  if (q8)
    if (Status s = KvStorage::supports_q8(c); !s) return fail("bench", s);
  const int n_ctx = depth + std::max({P, G, 1});
  if (n_ctx > c.context_length)
    return fail("bench", out_of_range(str_format("%d tokens exceed the model's context of %d",
                                                 n_ctx, c.context_length)));

  ThreadPool pool(threads);
  Session session(model, pool, n_ctx, n_batch, *kv_type);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0, c.n_vocab - 1);
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
  std::vector<double> pp, tg;
  for (int64_t r = 0; r <= reps; ++r) {
    if (P > 0) {
      if (Status s = fill(); !s) return fail("bench", s);
      const double t0 = now_seconds();
      std::vector<int32_t> p(prompt.begin(), prompt.begin() + P);
      if (Status s = session.eval(p, false, &logits); !s) return fail("bench", s);
      if (r > 0) pp.push_back(P / (now_seconds() - t0));
    }
    if (G > 0) {
      if (Status s = fill(); !s) return fail("bench", s);
      const double t0 = now_seconds();
      for (int i = 0; i < G; ++i)
        if (Status s = session.eval({prompt[static_cast<size_t>(i)]}, false, &logits); !s)
          return fail("bench", s);
      if (r > 0) tg.push_back(G / (now_seconds() - t0));
    }
  }
  // Bytes one decode step reads: the weights, plus the KV of the context at the run's
  // mean depth (depth + G/2).
  const double kv_read = static_cast<double>(KvStorage::bytes_per_token(c, q8)) * (depth + G / 2.0);
  const double bytes_per_token = static_cast<double>(model.decode_weight_bytes()) + kv_read;
  const double pp_tps = pp.empty() ? 0 : median(pp), tg_tps = tg.empty() ? 0 : median(tg);
  if (args->has("--json")) {
    std::printf(
        "{\"model\":%s,\"threads\":%d,\"prompt_len\":%d,\"gen_len\":%d,\"depth\":%d,"
        "\"kv_cache\":\"%s\",\"repeats\":%lld,"
        "\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,\"prefill_runs\":%s,\"decode_runs\":%s,"
        "\"weight_bytes\":%zu,\"decode_bytes_per_token\":%.0f,\"load_s\":%.3f}\n",
        json_string(*args->get("--model")).c_str(), pool.size(), P, G, depth, kv_name,
        static_cast<long long>(reps), pp_tps, tg_tps, json_array(pp).c_str(),
        json_array(tg).c_str(), model.weight_bytes(), bytes_per_token, loaded->load_seconds);
  } else {
    std::printf("model %s (%s), %d threads, %s KV cache, depth %d\n", args->get("--model")->c_str(),
                c.name.c_str(), pool.size(), kv_name, depth);
    if (P > 0) std::printf("prefill pp%d: %.1f tok/s (median of %zu)\n", P, pp_tps, pp.size());
    if (G > 0) std::printf("decode  tg%d: %.1f tok/s (median of %zu)\n", G, tg_tps, tg.size());
    std::printf("bytes read per decoded token: %.1f MB\n", bytes_per_token / 1e6);
  }
  return 0;
}

}  // namespace pagoda::cli
