// pagoda run: generate a continuation of a prompt, streaming it to stdout.
#include <algorithm>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "json_out.h"

namespace pagoda::cli {
namespace {

// ChatML, the format SmolLM2 and Qwen use; the full Jinja renderer comes with the server.
Result<std::string> chatml(const Tokenizer& tok, const std::string& system,
                           const std::string& user) {
  if (!tok.find_token("<|im_start|>") || !tok.find_token("<|im_end|>"))
    return unsupported(
        "--chat wraps the prompt in ChatML, and this model's vocabulary has no "
        "<|im_start|>/<|im_end|> tokens");
  std::string s;
  if (!system.empty()) s += "<|im_start|>system\n" + system + "<|im_end|>\n";
  return s + "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

std::vector<FlagSpec> run_flag_specs() {
  return {
      {"--model", "-m", true, "GGUF model file or Hugging Face checkpoint folder"},
      {"--prompt", "-p", true, "prompt text"},
      {"--tokens", "", true, "prompt as token ids instead of text: \"1 2 3\""},
      {"--n-predict", "-n", true, "tokens to generate (default 128)"},
      {"--temperature", "", true, "sampling temperature; 0 is greedy (default 0.8)"},
      {"--top-k", "", true, "keep the k most likely tokens; 0 is off (default 40)"},
      {"--top-p", "", true, "nucleus sampling; 1 is off (default 0.95)"},
      {"--min-p", "", true, "drop tokens below min-p x the top probability (default 0.05)"},
      {"--repeat-penalty", "", true, "repetition penalty; 1 is off (default 1)"},
      {"--presence-penalty", "", true, "OpenAI presence penalty (default 0)"},
      {"--frequency-penalty", "", true, "OpenAI frequency penalty (default 0)"},
      {"--seed", "-s", true, "random seed (default: random)"},
      {"--threads", "-t", true, "threads (default: all cores)"},
      {"--ctx-size", "-c", true, "context length (default: the model's, at most 4096)"},
      {"--chat", "", false, "wrap the prompt in the model's chat format (ChatML)"},
      {"--system", "", true, "system message for --chat"},
      {"--ignore-eos", "", false, "keep generating past end-of-generation tokens"},
      {"--stop-token-ids", "", true, "also stop at these token ids: \"1,2\""},
      {"--json", "", false, "print one JSON object at the end instead of streaming"},
      {"--help", "-h", false, "show this help"},
  };
}

struct RunFlags {
  SamplingParams sp;  // llama-cli's defaults
  int threads = 0;
  int64_t ctx_size = 0;  // 0: the model's context, at most 4096
};

Result<RunFlags> read_run_flags(const Args& args) {
  RunFlags r;
  SamplingParams& sp = r.sp;
  FlagReader flags(args);
  auto num = [&](const char* flag, double def, double lo, double hi) {
    return static_cast<float>(flags.number(flag, def, lo, hi));
  };
  auto integer = [&](const char* flag, int64_t def, int64_t lo, int64_t hi) {
    return flags.integer(flag, def, lo, hi);
  };
  sp.temperature = num("--temperature", 0.8, 0, 100);
  sp.top_k = static_cast<int>(integer("--top-k", 40, 0, 1 << 30));
  sp.top_p = num("--top-p", 0.95, 0, 1);
  sp.min_p = num("--min-p", 0.05, 0, 1);
  sp.repetition_penalty = num("--repeat-penalty", 1.0, 0.01, 100);
  sp.presence_penalty = num("--presence-penalty", 0, -2, 2);
  sp.frequency_penalty = num("--frequency-penalty", 0, -2, 2);
  sp.max_tokens = static_cast<int>(integer("--n-predict", 128, 0, 1 << 24));
  sp.ignore_eos = args.has("--ignore-eos");
  if (args.has("--stop-token-ids")) {
    PAGODA_ASSIGN_OR_RETURN(sp.stop_token_ids, parse_token_list(*args.get("--stop-token-ids")));
  }
  if (args.has("--seed")) sp.seed = static_cast<uint64_t>(integer("--seed", 0, 0, INT64_MAX));
  r.threads = static_cast<int>(integer("--threads", 0, 0, 1024));
  r.ctx_size = integer("--ctx-size", 0, 0, 1 << 24);
  PAGODA_RETURN_IF_ERROR(flags.status());
  return r;
}

// --tokens as given, or -p tokenized (in ChatML with --chat).
Result<std::vector<int32_t>> prompt_tokens(const Args& args, const Model& model,
                                           const Tokenizer& tok) {
  std::vector<int32_t> tokens;
  if (args.has("--tokens")) {
    PAGODA_ASSIGN_OR_RETURN(tokens, parse_token_list(*args.get("--tokens")));
    for (int32_t id : tokens)
      if (id >= model.config().n_vocab)
        return invalid_argument(str_format("token id %d is outside the vocabulary", id));
  } else {
    std::string prompt = *args.get("--prompt");
    if (args.has("--chat")) {
      PAGODA_ASSIGN_OR_RETURN(prompt, chatml(tok, args.get_or("--system", ""), prompt));
    }
    // Special-token text in a prompt becomes those tokens, as Hugging Face tokenizers and
    // vLLM treat prompts.
    tokens = tok.encode(prompt, true, true);
  }
  if (tokens.empty()) return invalid_argument("the prompt has no tokens");
  return tokens;
}

struct Generated {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish = "length";
  double seconds = 0;
};

// Samples up to max_tokens after the prompt's logits, streaming whole UTF-8 characters to
// stdout unless `quiet`.
Result<Generated> generate(Session& session, Sampler& sampler, const Tokenizer& tok,
                           const SamplingParams& sp, int n_vocab, int n_ctx,
                           std::vector<float>& logits, bool quiet) {
  Generated g;
  Utf8Stream stream;
  const double t1 = now_seconds();
  for (int i = 0; i < sp.max_tokens; ++i) {
    const int32_t next = sampler.sample(logits.data(), n_vocab);
    g.tokens.push_back(next);
    const bool stop = std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), next) !=
                      sp.stop_token_ids.end();
    if (!sp.ignore_eos && (tok.is_end_of_generation(next) || stop)) {
      g.finish = "stop";
      break;
    }
    const std::string piece(tok.token_to_piece(next));
    g.text += piece;
    if (!quiet) {
      const std::string out = stream.push(piece);
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == sp.max_tokens) break;
    if (session.n_past() >= n_ctx) {
      g.finish = "length";
      break;
    }
    PAGODA_RETURN_IF_ERROR(session.eval({next}, false, &logits));
  }
  g.seconds = now_seconds() - t1;
  if (!quiet) {
    const std::string rest = stream.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::printf("\n");
  }
  return g;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const std::vector<FlagSpec> specs = run_flag_specs();
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("run", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("run", "-m MODEL -p PROMPT [flags]", specs).c_str());
    return 0;
  }
  if (!args->has("--model")) return fail("run", invalid_argument("missing -m MODEL"));
  if (args->has("--prompt") == args->has("--tokens"))
    return fail("run", invalid_argument("give exactly one of -p PROMPT or --tokens IDS"));
  const Result<RunFlags> flags = read_run_flags(*args);
  if (!flags) return fail("run", flags.status());
  const SamplingParams& sp = flags->sp;

  auto loaded = load(*args->get("--model"), true, true);
  if (!loaded) return fail("run", loaded.status());
  const Model& model = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  const Result<std::vector<int32_t>> tokens = prompt_tokens(*args, model, tok);
  if (!tokens) return fail("run", tokens.status());
  const int n_ctx =
      flags->ctx_size > 0
          ? static_cast<int>(std::min<int64_t>(flags->ctx_size, model.config().context_length))
          : std::min(model.config().context_length, 4096);
  if (static_cast<int>(tokens->size()) >= n_ctx)
    return fail("run",
                out_of_range(str_format("the prompt has %zu tokens; the context holds %d "
                                        "(use --ctx-size, at most the model's %d)",
                                        tokens->size(), n_ctx, model.config().context_length)));

  ThreadPool pool(flags->threads);
  Session session(model, pool, n_ctx);
  Sampler sampler(sp, *tokens);
  std::vector<float> logits;
  const double t0 = now_seconds();
  if (Status s = session.eval(*tokens, false, &logits); !s) return fail("run", s);
  const double t_prompt = now_seconds() - t0;
  const bool json = args->has("--json");
  const Result<Generated> g =
      generate(session, sampler, tok, sp, model.config().n_vocab, n_ctx, logits, json);
  if (!g) return fail("run", g.status());
  if (json)
    std::printf("{\"prompt_tokens\":%s,\"tokens\":%s,\"text\":%s,\"finish_reason\":\"%s\"}\n",
                json_array(*tokens).c_str(), json_array(g->tokens).c_str(),
                json_string(g->text).c_str(), g->finish.c_str());
  std::fflush(stdout);
  std::fprintf(stderr,
               "pagoda run: load %.2f s; prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu "
               "tokens in %.3f s (%.1f tok/s)\n",
               loaded->load_seconds, tokens->size(), t_prompt, tokens->size() / t_prompt,
               g->tokens.size(), g->seconds,
               g->tokens.size() > 1 ? (g->tokens.size() - 1) / g->seconds : 0.0);
  return 0;
}

}  // namespace pagoda::cli
