// pagoda perplexity: a model's perplexity over a text file, and with --kl-base its KL
// divergence from a reference model, by llama-perplexity's procedure (engine/perplexity.h)
// so the numbers compare with the ones llama.cpp's users quote. --device cuda runs it on
// the GPU, with --kv-cache-dtype fp8 or --quantization fp8 weighed against a base run of
// the same device in 16 bits.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine/kv_budget.h"
#include "engine/perplexity.h"
#include "json_out.h"

namespace pagoda::cli {
namespace {

// A loaded model and its runner on the chosen device.
struct Evaluated {
  Loaded loaded;
  std::unique_ptr<ModelRunner> runner;
};

Result<Evaluated> open_runner(const std::string& path, DeviceKind device, bool tokenizer,
                              const RunnerOptions& o, ThreadPool& pool) {
  Evaluated e;
  PAGODA_ASSIGN_OR_RETURN(e.loaded, load(path, device == DeviceKind::kCpu, tokenizer));
  if (device == DeviceKind::kCpu) {
    if (o.kv_cache_type == KvCacheType::kQ8_0)
      PAGODA_RETURN_IF_ERROR(KvStorage::supports_q8(e.loaded.model->config()));
    e.runner = make_cpu_runner(*e.loaded.model, pool, o);
  } else {
    auto r = make_cuda_runner(*e.loaded.file, o);
    if (!r) return r.status().with_context("loading '" + path + "' on the GPU");
    e.runner = std::move(r).value();
  }
  return e;
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--model", "-m", true, "GGUF model file or Hugging Face checkpoint folder"},
      {"--file", "-f", true, "text file to evaluate (tokenized with the model's tokenizer)"},
      {"--ctx-size", "-c", true, "tokens a chunk; the second half of each is scored (default 512)"},
      {"--chunks", "", true, "evaluate at most this many chunks (default: all)"},
      {"--batch-size", "-b", true, "tokens a forward pass (default 512)"},
      {"--kl-base", "", true,
       "reference model (the same vocabulary): report the KL divergence from it, its "
       "perplexity and how often both rank the same token first"},
      {"--device", "", true, "cpu, cuda or cuda:N (default cpu)"},
      {"--kv-cache-dtype", "", true,
       "auto (16-bit), fp8 (--device cuda) or q8_0 (--device cpu); the base model keeps 16 "
       "bits"},
      {"--quantization", "", true,
       "fp8: layers' float weights to FP8 at load (--device cuda); not the base model"},
      {"--threads", "-t", true, "threads (default: all cores)"},
      {"--json", "", false, "print JSON"},
      {"--help", "-h", false, "show this help"},
  };
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("perplexity", args.status());
  if (args->has("--help")) {
    std::printf("%s",
                usage("perplexity", "-m MODEL -f TEXT [--kl-base MODEL] [-c 512]", specs).c_str());
    return 0;
  }
  if (!args->has("--model")) return fail("perplexity", invalid_argument("missing -m MODEL"));
  if (!args->has("--file")) return fail("perplexity", invalid_argument("missing -f TEXT"));
  const Result<ChunkFlags> cf = parse_chunk_flags(*args);
  if (!cf) return fail("perplexity", cf.status());
  PerplexityOptions po = cf->chunks;
  const Result<DeviceSpec> spec = read_device_flag(*args, "cpu");
  if (!spec) return fail("perplexity", spec.status());
  const DeviceKind device = spec->kind;
  EngineConfig ef;  // the engine's reading of --kv-cache-dtype and --quantization
  ef.kv_cache_dtype = args->get_or("--kv-cache-dtype", "auto");
  ef.quantization = args->get_or("--quantization", "");
  const Result<KvCacheType> kv_type = kv_cache_type(ef, device != DeviceKind::kCpu);
  if (!kv_type) return fail("perplexity", kv_type.status());
  const Result<bool> fp8 = fp8_weights(ef, device != DeviceKind::kCpu);
  if (!fp8) return fail("perplexity", fp8.status());

  const Result<std::string> text = read_text_file(*args->get("--file"));
  if (!text) return fail("perplexity", text.status());

  ThreadPool pool(cf->threads);
  RunnerOptions base_opts = perplexity_runner_options(po);
  base_opts.device = spec->index;
  base_opts.cuda = settings().cuda;
  RunnerOptions opts = base_opts;
  opts.kv_cache_type = *kv_type;
  opts.fp8_weights = *fp8;
  const double t0 = now_seconds();
  auto model = open_runner(*args->get("--model"), device, true, opts, pool);
  if (!model) return fail("perplexity", model.status());
  Result<Evaluated> base = invalid_argument("no base");
  if (args->has("--kl-base")) {
    base = open_runner(*args->get("--kl-base"), device, false, base_opts, pool);
    if (!base) return fail("perplexity", base.status());
  }
  const Tokenizer& tok = *model->loaded.tokenizer;
  // As llama.cpp tokenizes the file (special tokens added, none parsed from the text).
  const std::vector<int32_t> tokens = tok.encode(*text, true, false);
  po.bos = tok.add_bos() ? tok.bos() : -1;
  const bool json = args->has("--json");
  if (!json)
    std::fprintf(stderr, "perplexity: %zu tokens; chunks of %d, the last %d of each scored; %s\n",
                 tokens.size(), po.n_ctx, po.n_ctx - 1 - po.n_ctx / 2,
                 model->runner->describe().c_str());
  const double t1 = now_seconds();
  auto r = evaluate_perplexity(*model->runner, base ? base->runner.get() : nullptr, tokens, po,
                               pool, [&](const PerplexityResult& p) {
                                 if (json) return;
                                 std::printf("[%d]%.4f,", p.chunks, p.ppl());
                                 std::fflush(stdout);
                               });
  if (!r) return fail("perplexity", r.status());
  const double seconds = now_seconds() - t1;
  if (json) {
    std::string out = "{\"model\":" + json_string(*args->get("--model")) +
                      str_format(
                          ",\"n_ctx\":%d,\"chunks\":%d,\"tokens\":%zu,\"scored\":%lld,"
                          "\"ppl\":%.6f,\"ppl_error\":%.6f,\"seconds\":%.3f,\"load_s\":%.3f",
                          po.n_ctx, r->chunks, tokens.size(), static_cast<long long>(r->scored),
                          r->ppl(), r->ppl_error(), seconds, t1 - t0);
    if (r->has_base)
      out += ",\"base\":" + json_string(*args->get("--kl-base")) +
             str_format(
                 ",\"base_ppl\":%.6f,\"kld\":{\"mean\":%.8f,\"error\":%.8f,\"median\":%.8f,"
                 "\"p99\":%.8f,\"max\":%.8f},\"same_top\":%.6f",
                 r->base_ppl(), r->mean_kld(), r->kld_error(), r->kld_quantile(0.5),
                 r->kld_quantile(0.99), r->kld_quantile(1.0), r->same_top_fraction());
    std::printf("%s}\n", out.c_str());
    return 0;
  }
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f (%d chunks, %lld tokens scored, %.1f s)\n",
              r->ppl(), r->ppl_error(), r->chunks, static_cast<long long>(r->scored), seconds);
  if (r->has_base) {
    std::printf("base model: PPL = %.4f; ln(PPL / base PPL) = %.5f\n", r->base_ppl(),
                std::log(r->ppl() / r->base_ppl()));
    std::printf(
        "KL divergence from the base: mean %.6f +/- %.6f, median %.6f, 99%% %.6f, max "
        "%.6f\n",
        r->mean_kld(), r->kld_error(), r->kld_quantile(0.5), r->kld_quantile(0.99),
        r->kld_quantile(1.0));
    std::printf("same top token as the base: %.3f%%\n", 100.0 * r->same_top_fraction());
  }
  return 0;
}

}  // namespace pagoda::cli
