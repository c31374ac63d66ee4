// The engine as a library: many requests share one model and one paged KV pool, batched
// continuously by one engine thread. Any thread may add or abort requests; each request's
// outputs arrive on its own stream as they are generated.
//
//   auto engine = pagoda::Engine::create(config);           // loads the model
//   auto stream = (*engine)->add_request("r1", "Hello", params);
//   while (auto out = (*stream)->next()) std::cout << out->text;
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/sampling_params.h"
#include "pagoda/settings.h"
#include "pagoda/status.h"

namespace pagoda {

class Tokenizer;
struct ModelConfig;

enum class SchedulingPolicy { kFcfs, kPriority };

struct EngineConfig {
  std::string model_path;  // GGUF file
  int threads = 0;         // 0: one per core
  int block_size = 16;     // tokens per KV block (a multiple of 16)
  // Bytes for the KV pool; 0: kv_cache_fraction of the memory available at start, capped
  // at what max_num_seqs sequences of max_model_len tokens can use.
  int64_t kv_cache_memory = 0;
  double kv_cache_fraction = 0.25;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;  // 0: the model's context length
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  bool enable_prefix_caching = true;
  // Queue each step before handling the previous one's tokens (vLLM's
  // --async-scheduling): greedy and device-sampled requests without penalties,
  // log-probabilities or n > 1; others run plain steps. Off by default until measured:
  // the CUDA runner queues steps (ModelRunner::launch); the CPU runs each at once.
  bool async_scheduling = false;
  // "cpu", or "cuda" / "cuda:N" for GPU N (the CUDA backend plugin).
  std::string device = "cpu";
  // On a GPU without kv_cache_memory: the share of the GPU's memory this engine may use
  // (weights, activations, runtime and the KV pool, which gets the rest), as in vLLM.
  double gpu_memory_utilization = 0.9;
  // How the KV cache is stored, as vLLM's --kv-cache-dtype: "auto" (16-bit floats), or
  // "fp8" (E4M3 with a scale per tensor: half the bytes per token; CUDA only).
  std::string kv_cache_dtype = "auto";
  // Weight quantization at load, as vLLM's --quantization: "" (none) or "fp8" (the
  // blocks' float matrices to FP8 E4M3 with one scale each; CUDA only).
  std::string quantization;
  // Developer and test switches (PAGODA_* in the CLI; include/pagoda/settings.h).
  Settings settings;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

// Times are seconds on the engine's steady clock (Engine::now()).
struct RequestMetrics {
  double arrival = 0, first_scheduled = 0, first_token = 0, last_token = 0, finished = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0, cached_tokens = 0;
  int preemptions = 0;
};

// New tokens and text of one completion since its previous output.
struct RequestOutput {
  std::string request_id;
  int index = 0;  // which of the n completions
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprob> logprobs;  // one per token in token_ids, when asked
  double time = 0;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;       // when finish_reason is kError
  RequestMetrics metrics;  // complete when finished
};

struct EngineStats {
  int num_running = 0, num_waiting = 0;
  int kv_blocks_total = 0, kv_blocks_used = 0;
  double kv_usage = 0;  // used / total
  int64_t kv_pool_bytes = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // tokens
  int64_t preemptions = 0;
  int64_t requests_added = 0, requests_finished = 0, requests_aborted = 0;
  int64_t prompt_tokens = 0;           // of admitted requests
  int64_t generation_tokens = 0;       // sampled
  int64_t computed_tokens = 0;         // run through the model, all kinds
  int64_t prompt_tokens_computed = 0;  // of which prompt positions (prefill, recompute)
  int64_t steps = 0;
  int64_t pipelined_steps = 0;  // of which queued ahead (async_scheduling)
  // Steps whose model run failed (their requests finished with an error), and whether the
  // latest step that ran the model was one of them.
  int64_t failed_steps = 0;
  bool last_step_failed = false;
  // Reserved but unfilled KV slots over reserved slots, averaged over steps (slot-weighted).
  double kv_waste = 0;
  // Wall time spent in steps, and of it in the model run (the runner, waiting for the
  // device included); the rest is the host's scheduling and bookkeeping.
  double step_s = 0, execute_s = 0;
};

// A request's outputs, in order. Safe to read from one thread while the engine writes.
class RequestStream {
 public:
  virtual ~RequestStream() = default;
  // Waits for the next output; nullopt once every completion has finished and all
  // outputs were taken.
  virtual std::optional<RequestOutput> next() = 0;
  // As next(), waiting at most timeout_s; nullopt on timeout too (then done() is false).
  virtual std::optional<RequestOutput> next_for(double timeout_s) = 0;
  virtual bool done() const = 0;
  // Calls `fn` after every new output (and once at once, in case outputs are already
  // waiting), from the engine's thread without the stream's lock held: an event loop
  // wakes on it instead of blocking a thread per stream. `fn` must be quick and must not
  // block; an empty `fn` removes it.
  virtual void set_listener(std::function<void()> fn) = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config);
  virtual ~Engine() = default;

  // Queues a request. Fails at once for a duplicate id, bad parameters, or a request
  // that can never fit (over max_model_len or the whole KV pool).
  virtual Result<std::shared_ptr<RequestStream>> add_request(const std::string& id,
                                                             const std::string& prompt,
                                                             const SamplingParams& params,
                                                             int priority = 0) = 0;
  virtual Result<std::shared_ptr<RequestStream>> add_request(const std::string& id,
                                                             const std::vector<int32_t>& prompt,
                                                             const SamplingParams& params,
                                                             int priority = 0) = 0;
  // Stops a request wherever it is and frees what it holds; its stream ends with
  // finish reason abort. Unknown ids are ignored.
  virtual void abort(const std::string& id) = 0;
  virtual EngineStats stats() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  virtual const EngineConfig& config() const = 0;  // with the sizes actually used
  static double now();
};

}  // namespace pagoda
