// pagoda imatrix: an importance matrix for `pagoda quantize --imatrix`, as llama-imatrix
// computes one (model/imatrix.h): the text in chunks, each from an empty cache with BOS
// first, every token's input to every layer matrix squared and summed. The chunks are
// the perplexity run's (engine/perplexity.h), whose figure is printed on the way.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine/perplexity.h"
#include "model/imatrix.h"

namespace pagoda::cli {

int cmd_imatrix(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--model", "-m", true, "GGUF model file (F16 / BF16 / F32 is best: the weights to keep)"},
      {"--file", "-f", true, "calibration text (tokenized with the model's tokenizer)"},
      {"--output", "-o", true, "the importance matrix to write (default imatrix.gguf)"},
      {"--ctx-size", "-c", true, "tokens a chunk (default 512)"},
      {"--chunks", "", true, "use at most this many chunks (default: all)"},
      {"--batch-size", "-b", true, "tokens a forward pass (default 512)"},
      {"--threads", "-t", true, "threads (default: all cores)"},
      {"--help", "-h", false, "show this help"},
  };
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("imatrix", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("imatrix", "-m MODEL -f TEXT [-o imatrix.gguf]", specs).c_str());
    return 0;
  }
  if (!args->has("--model")) return fail("imatrix", invalid_argument("missing -m MODEL"));
  if (!args->has("--file")) return fail("imatrix", invalid_argument("missing -f TEXT"));
  const Result<ChunkFlags> cf = parse_chunk_flags(*args);
  if (!cf) return fail("imatrix", cf.status());
  PerplexityOptions po = cf->chunks;
  const std::string out = args->get_or("--output", "imatrix.gguf");
  const std::string text_path = *args->get("--file");
  const Result<std::string> text = read_text_file(text_path);
  if (!text) return fail("imatrix", text.status());

  auto loaded = load(*args->get("--model"), true, true);
  if (!loaded) return fail("imatrix", loaded.status());
  const ModelConfig& c = loaded->model->config();
  ThreadPool pool(cf->threads);
  ImatrixCollector collector(c.n_layers);
  RunnerOptions o = perplexity_runner_options(po);
  o.observer = &collector;
  auto runner = make_cpu_runner(*loaded->model, pool, o);
  const Tokenizer& tok = *loaded->tokenizer;
  const std::vector<int32_t> tokens = tok.encode(*text, true, false);
  po.bos = tok.add_bos() ? tok.bos() : -1;
  std::fprintf(stderr, "imatrix: %zu tokens; chunks of %d\n", tokens.size(), po.n_ctx);
  const double t0 = now_seconds();
  auto r = evaluate_perplexity(*runner, nullptr, tokens, po, pool, [](const PerplexityResult& p) {
    std::printf("[%d]%.4f,", p.chunks, p.ppl());
    std::fflush(stdout);
  });
  if (!r) return fail("imatrix", r.status());
  if (Status s = collector.write(out, {text_path}, r->chunks, po.n_ctx); !s)
    return fail("imatrix", s.with_context("writing '" + out + "'"));
  std::printf(
      "\nFinal estimate: PPL = %.4f +/- %.5f; importance matrix of %d chunks of %d "
      "tokens written to %s (%.1f s)\n",
      r->ppl(), r->ppl_error(), r->chunks, po.n_ctx, out.c_str(), now_seconds() - t0);
  return 0;
}

}  // namespace pagoda::cli
