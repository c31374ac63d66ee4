// Pieces the subcommands share: loading a model file with its tokenizer, prompt
// tokenization, and printing generated text safely.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "engine/detokenizer.h"
#include "engine/model_tokenizer.h"
#include "engine/perplexity.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/tensor_source.h"
#include "pagoda/settings.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

struct Loaded {
  // The GGUF file or checkpoint folder (model/tensor_source.h).
  std::unique_ptr<TensorSource> file;
  std::unique_ptr<Model> model;          // null when only the vocabulary was asked for
  std::unique_ptr<Tokenizer> tokenizer;  // null when not asked for
  double load_seconds = 0;
};

Result<Loaded> load(const std::string& path, bool want_model, bool want_tokenizer);

// A text file's bytes (a corpus for perplexity or an importance matrix).
Result<std::string> read_text_file(const std::string& path);

// The flags of the commands that run a text in chunks (perplexity, imatrix): -c,
// --chunks, -b and -t.
struct ChunkFlags {
  PerplexityOptions chunks;
  int threads = 0;
};
class Args;
Result<ChunkFlags> parse_chunk_flags(const Args& args);

// --device: cpu, cuda or cuda:N (core/device.h); `def` when the flag is not given.
Result<DeviceSpec> read_device_flag(const Args& args, const std::string& def);

// "1 2 3" or "1,2,3" to ids.
Result<std::vector<int32_t>> parse_token_list(const std::string& s);

// Prints a Status for a subcommand and returns the exit code to use.
int fail(const std::string& command, const Status& s);

double now_seconds();

// The PAGODA_* switches (core/settings.h), read once by main before any command runs and
// applied to the process-wide ones (log level, ISA cap, CUDA plugin path); commands pass
// the rest down in EngineConfig::settings and RunnerOptions::cuda.
Status init_settings();
const Settings& settings();

}  // namespace pagoda::cli
