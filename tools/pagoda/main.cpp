// The pagoda command line: one executable, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "common.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"run", pagoda::cli::cmd_run, "generate text from a prompt"},
    {"logits", pagoda::cli::cmd_logits, "print the top logits for a prompt"},
    {"bench", pagoda::cli::cmd_bench, "measure prefill and decode speed"},
    {"imatrix", pagoda::cli::cmd_imatrix,
     "importance matrix of a model over a text, for quantize --imatrix"},
    {"perplexity", pagoda::cli::cmd_perplexity,
     "perplexity over a text file, and KL divergence from a reference model"},
    {"tokenize", pagoda::cli::cmd_tokenize, "text to token ids (and vocabulary conformance tests)"},
    {"quantize", pagoda::cli::cmd_quantize, "convert a GGUF model's weights to another type"},
    {"mkmodel", pagoda::cli::cmd_mkmodel, "write a random-weight GGUF model for testing"},
    {"info", pagoda::cli::cmd_info, "show a GGUF file's metadata and tensors"},
    {"generate", pagoda::cli::cmd_generate,
     "offline batch generation from a JSONL file of requests"},
    {"plan", pagoda::cli::cmd_plan, "what fits in memory: weights, KV cache, concurrency"},
    {"template", pagoda::cli::cmd_template, "render a chat template for a list of messages"},
    {"serve", pagoda::cli::cmd_serve, "OpenAI-compatible HTTP server with Prometheus metrics"},
    {"cuda-check", pagoda::cli::cmd_cuda_check, "greedy generation on CUDA against the CPU"},
};

void print_usage(FILE* out) {
  std::fprintf(
      out, "usage: pagoda COMMAND [flags]   (pagoda COMMAND --help for its flags)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(stdout);
    return 0;
  }
  // Every PAGODA_* variable, once, before any command: a mistyped one fails here.
  if (const pagoda::Status s = pagoda::cli::init_settings(); !s.is_ok()) {
    std::fprintf(stderr, "pagoda: %s\n", s.message().c_str());
    return 2;
  }
  for (const Command& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) return c.fn(argc - 1, argv + 1);
  std::fprintf(stderr, "pagoda: unknown command '%s'\n", argv[1]);
  print_usage(stderr);
  return 2;
}
