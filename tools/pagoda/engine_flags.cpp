#include "engine_flags.h"

#include <cmath>
#include <cstdlib>

#include "common.h"
#include "ledger/plan.h"

namespace pagoda::cli {

std::vector<FlagSpec> engine_flag_specs() {
  return {
      {"--model", "-m", true, "GGUF model file or Hugging Face checkpoint folder"},
      {"--threads", "-t", true, "threads (default: all cores)"},
      {"--max-num-seqs", "", true, "most sequences running at once (default 256)"},
      {"--max-num-batched-tokens", "", true,
       "token budget of one step, shared by decodes and prefill chunks (default 2048)"},
      {"--max-model-len", "", true, "longest prompt + output (default: the model's context)"},
      {"--kv-cache-memory", "", true,
       "bytes for the KV pool, e.g. 2GiB (default: --kv-cache-fraction of free memory)"},
      {"--kv-cache-fraction", "", true, "share of available memory for the KV pool (default 0.25)"},
      {"--block-size", "", true, "tokens per KV block, a multiple of 16 (default 16)"},
      {"--scheduling-policy", "", true, "fcfs or priority (default fcfs)"},
      {"--enable-prefix-caching", "", false, "reuse the KV of shared prompt prefixes (default)"},
      {"--no-enable-prefix-caching", "", false, "turn prefix caching off"},
      {"--async-scheduling", "", false,
       "queue each step before handling the previous step's tokens (default off)"},
      {"--device", "", true, "cpu, cuda or cuda:N (default cpu)"},
      {"--gpu-memory-utilization", "", true,
       "share of the GPU's memory for the engine; the KV pool gets what the memory ledger "
       "leaves (default 0.9)"},
      {"--kv-cache-dtype", "", true,
       "auto (16-bit), fp8 (E4M3, half the KV bytes; --device cuda) or q8_0 (int8 with an "
       "fp16 scale per 32 values, 0.53x the bytes; CPU) (default auto)"},
      {"--quantization", "", true,
       "fp8: the layers' float weights to FP8 E4M3 at load (--device cuda) (default none)"},
  };
}

Result<int64_t> parse_bytes(const std::string& s) {
  // One grammar for sizes everywhere: the ledger's (`pagoda plan` takes the same).
  return ledger::parse_bytes(s);
}

Status read_engine_flags(const Args& args, EngineConfig* c) {
  if (!args.has("--model")) return invalid_argument("missing -m MODEL");
  c->model_path = *args.get("--model");
  c->settings = settings();
  FlagReader f(args);
  c->threads = static_cast<int>(f.integer("--threads", 0, 0, 1024));
  c->max_num_seqs = static_cast<int>(f.integer("--max-num-seqs", c->max_num_seqs, 1, 1 << 20));
  c->max_num_batched_tokens = static_cast<int>(
      f.integer("--max-num-batched-tokens", c->max_num_batched_tokens, 1, 1 << 24));
  c->max_model_len = f.integer("--max-model-len", 0, 0, int64_t{1} << 30);
  c->kv_cache_fraction = f.number("--kv-cache-fraction", c->kv_cache_fraction, 1e-6, 1);
  c->block_size = static_cast<int>(f.integer("--block-size", c->block_size, 16, 4096));
  c->gpu_memory_utilization =
      f.number("--gpu-memory-utilization", c->gpu_memory_utilization, 1e-6, 1);
  c->device = args.get_or("--device", c->device);
  c->kv_cache_dtype = args.get_or("--kv-cache-dtype", c->kv_cache_dtype);
  c->quantization = args.get_or("--quantization", c->quantization);
  PAGODA_RETURN_IF_ERROR(f.status());
  // Checked here too, so that a mistyped device fails before the model loads.
  PAGODA_RETURN_IF_ERROR(parse_device_spec(c->device).status());
  if (args.has("--kv-cache-memory")) {
    PAGODA_ASSIGN_OR_RETURN(c->kv_cache_memory, parse_bytes(*args.get("--kv-cache-memory")));
    if (c->kv_cache_memory <= 0) return invalid_argument("--kv-cache-memory must be positive");
  }
  const std::string policy = args.get_or("--scheduling-policy", "fcfs");
  if (policy == "fcfs")
    c->scheduling_policy = SchedulingPolicy::kFcfs;
  else if (policy == "priority")
    c->scheduling_policy = SchedulingPolicy::kPriority;
  else
    return invalid_argument("--scheduling-policy must be fcfs or priority, not '" + policy + "'");
  if (args.has("--enable-prefix-caching") && args.has("--no-enable-prefix-caching"))
    return invalid_argument("give one of --enable-prefix-caching and --no-enable-prefix-caching");
  c->enable_prefix_caching = !args.has("--no-enable-prefix-caching");
  c->async_scheduling = args.has("--async-scheduling");
  return Status::ok();
}

std::vector<FlagSpec> sampling_flag_specs() {
  return {
      {"--max-tokens", "-n", true, "tokens to generate per request (default 16)"},
      {"--temperature", "", true, "sampling temperature; 0 is greedy (default 1)"},
      {"--top-k", "", true, "keep the k most likely tokens; 0 is off (default 0)"},
      {"--top-p", "", true, "nucleus sampling; 1 is off (default 1)"},
      {"--min-p", "", true, "drop tokens below min-p x the top probability (default 0)"},
      {"--repetition-penalty", "", true, "repetition penalty; 1 is off (default 1)"},
      {"--presence-penalty", "", true, "OpenAI presence penalty (default 0)"},
      {"--frequency-penalty", "", true, "OpenAI frequency penalty (default 0)"},
      {"--seed", "-s", true, "random seed (default: random per request)"},
      {"--ignore-eos", "", false, "keep generating past end-of-generation tokens"},
  };
}

Status read_sampling_flags(const Args& args, SamplingParams* p) {
  FlagReader f(args);
  p->max_tokens = static_cast<int>(f.integer("--max-tokens", p->max_tokens, 1, 1 << 24));
  p->temperature = static_cast<float>(f.number("--temperature", p->temperature, 0, 100));
  p->top_k = static_cast<int>(f.integer("--top-k", p->top_k, 0, 1 << 30));
  p->top_p = static_cast<float>(f.number("--top-p", p->top_p, 1e-9, 1));
  p->min_p = static_cast<float>(f.number("--min-p", p->min_p, 0, 1));
  p->repetition_penalty =
      static_cast<float>(f.number("--repetition-penalty", p->repetition_penalty, 0.01, 100));
  p->presence_penalty = static_cast<float>(f.number("--presence-penalty", 0, -2, 2));
  p->frequency_penalty = static_cast<float>(f.number("--frequency-penalty", 0, -2, 2));
  if (args.has("--seed")) p->seed = static_cast<uint64_t>(f.integer("--seed", 0, 0, INT64_MAX));
  if (args.has("--ignore-eos")) p->ignore_eos = true;
  return f.status();
}

}  // namespace pagoda::cli
