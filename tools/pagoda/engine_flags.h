// The engine's flags, shared by every command that runs the batching engine (generate,
// serve), named as vLLM names them.
#pragma once

#include <string>
#include <vector>

#include "args.h"
#include "pagoda/engine.h"

namespace pagoda::cli {

std::vector<FlagSpec> engine_flag_specs();
// Fills config from the flags (the model path from -m).
Status read_engine_flags(const Args& args, EngineConfig* config);

// "4GiB", "512MB", "1.5e9", "1073741824" to bytes.
Result<int64_t> parse_bytes(const std::string& s);

// Sampling flags with vLLM's defaults; a request may override them.
std::vector<FlagSpec> sampling_flag_specs();
Status read_sampling_flags(const Args& args, SamplingParams* params);

}  // namespace pagoda::cli
