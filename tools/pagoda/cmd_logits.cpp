// pagoda logits: the top logits at the last prompt position (or every position), to
// compare against reference implementations.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine/session.h"
#include "json_out.h"

namespace pagoda::cli {

int cmd_logits(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--model", "-m", true, "GGUF model file or Hugging Face checkpoint folder"},
      {"--prompt", "-p", true, "prompt text (tokenized with the model's tokenizer)"},
      {"--tokens", "", true, "prompt as token ids instead of text: \"1 2 3\""},
      {"--all", "", false, "logits at every prompt position, not only the last"},
      {"--top", "", true, "how many of the largest logits to print (default 20)"},
      {"--json", "", false, "print JSON"},
      {"--threads", "-t", true, "threads (default: all cores)"},
      {"--batch-size", "-b", true, "prompt tokens per forward pass (default 512)"},
      {"--help", "-h", false, "show this help"},
  };
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("logits", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("logits",
                            "-m MODEL (-p PROMPT | --tokens IDS) [--all] [--top N] [--json]", specs)
                          .c_str());
    return 0;
  }
  if (!args->has("--model")) return fail("logits", invalid_argument("missing -m MODEL"));
  if (args->has("--prompt") == args->has("--tokens"))
    return fail("logits", invalid_argument("give exactly one of -p PROMPT or --tokens IDS"));
  FlagReader flags(*args);
  const int top = static_cast<int>(flags.integer("--top", 20, 1, 1 << 20));
  const int threads = static_cast<int>(flags.integer("--threads", 0, 0, 1024));
  const int n_batch = static_cast<int>(flags.integer("--batch-size", 512, 1, 1 << 16));
  if (!flags.status()) return fail("logits", flags.status());

  auto loaded = load(*args->get("--model"), true, args->has("--prompt"));
  if (!loaded) return fail("logits", loaded.status());
  const Model& model = *loaded->model;
  std::vector<int32_t> tokens;
  if (args->has("--prompt")) {
    // Special-token text in a prompt becomes those tokens, as Hugging Face tokenizers and
    // vLLM treat prompts.
    tokens = loaded->tokenizer->encode(*args->get("--prompt"), true, true);
  } else {
    auto t = parse_token_list(*args->get("--tokens"));
    if (!t) return fail("logits", t.status());
    tokens = *t;
  }
  if (tokens.empty()) return fail("logits", invalid_argument("the prompt has no tokens"));
  const int n_ctx = std::min<int>(model.config().context_length, static_cast<int>(tokens.size()));
  if (static_cast<int>(tokens.size()) > model.config().context_length)
    return fail("logits",
                out_of_range(str_format("the prompt has %zu tokens, more than the model's "
                                        "context of %d",
                                        tokens.size(), model.config().context_length)));
  ThreadPool pool(threads);
  Session session(model, pool, n_ctx, n_batch);
  const bool all = args->has("--all");
  std::vector<float> logits;
  if (Status s = session.eval(tokens, all, &logits); !s) return fail("logits", s);

  const int n_vocab = model.config().n_vocab;
  const int k = std::min(top, n_vocab);
  const size_t n_rows = all ? tokens.size() : 1;
  std::string out = "{\"n_vocab\":" + std::to_string(n_vocab) +
                    ",\"tokens\":" + json_array(tokens) + ",\"logits\":[";
  for (size_t r = 0; r < n_rows; ++r) {
    const float* row = logits.data() + r * static_cast<size_t>(n_vocab);
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [row](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    idx.resize(static_cast<size_t>(k));
    std::vector<float> vals;
    for (int32_t i : idx) vals.push_back(row[i]);
    const size_t pos = all ? r : tokens.size() - 1;
    if (args->has("--json")) {
      out += (r ? "," : "") + std::string("{\"pos\":") + std::to_string(pos) +
             ",\"ids\":" + json_array(idx) + ",\"values\":" + json_array(vals) + "}";
    } else {
      std::printf("position %zu:", pos);
      for (int i = 0; i < k; ++i)
        std::printf(" %d:%.4f", idx[static_cast<size_t>(i)], vals[static_cast<size_t>(i)]);
      std::printf("\n");
    }
  }
  if (args->has("--json")) std::printf("%s]}\n", out.c_str());
  return 0;
}

}  // namespace pagoda::cli
