// The thread-safe Engine: callers' threads queue commands; one engine thread applies
// them between steps, runs the step loop, and hands outputs to per-request streams.
#include "pagoda/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/device.h"
#include "core/log.h"
#include "engine/engine_core.h"
#include "engine/fault_injection.h"
#include "engine/kv_budget.h"
#include "engine/model_tokenizer.h"
#include "model/gguf.h"
#include "model/runner.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

double Engine::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

class StreamImpl : public RequestStream {
 public:
  explicit StreamImpl(int n) : n_(n) {}

  void push(RequestOutput o) {
    std::function<void()> listener;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (o.finished) ++finished_;
      q_.push_back(std::move(o));
      listener = listener_;
    }
    cv_.notify_all();
    if (listener) listener();
  }
  void set_listener(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      listener_ = fn;
    }
    if (fn) fn();
  }
  // One completion is left to finish (only the engine thread pushes, so this holds until
  // it pushes again).
  bool last_one_pending() {
    std::lock_guard<std::mutex> l(mu_);
    return finished_ + 1 >= n_;
  }
  std::optional<RequestOutput> next() override {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !q_.empty() || finished_ >= n_; });
    return pop_locked();
  }
  std::optional<RequestOutput> next_for(double timeout_s) override {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::duration<double>(timeout_s),
                 [&] { return !q_.empty() || finished_ >= n_; });
    return pop_locked();
  }
  bool done() const override {
    std::lock_guard<std::mutex> l(mu_);
    return finished_ >= n_ && q_.empty();
  }

 private:
  std::optional<RequestOutput> pop_locked() {
    if (q_.empty()) return std::nullopt;
    RequestOutput o = std::move(q_.front());
    q_.pop_front();
    return o;
  }
  const int n_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> q_;
  int finished_ = 0;
  std::function<void()> listener_;
};

class EngineImpl : public Engine {
 public:
  ~EngineImpl() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Status init(const EngineConfig& cfg) {
    config_ = cfg;
    // Checked before the load, so that a mistyped value fails at once.
    PAGODA_ASSIGN_OR_RETURN(const FaultPlan faults, parse_fault_plan(cfg.settings.fault_inject));
    PAGODA_ASSIGN_OR_RETURN(file_, open_tensor_source(cfg.model_path));
    auto tok = load_tokenizer(*file_);
    if (!tok) return tok.status().with_context("loading the tokenizer of '" + cfg.model_path + "'");
    tok_ = std::move(tok).value();
    if (cfg.block_size <= 0 || cfg.block_size % cpu::kKvBlockQuantum != 0)
      return invalid_argument(
          str_format("--block-size must be a positive multiple of %d", cpu::kKvBlockQuantum));
    if (cfg.max_num_seqs < 1) return invalid_argument("--max-num-seqs must be at least 1");
    if (cfg.max_num_batched_tokens < 1)
      return invalid_argument("--max-num-batched-tokens must be at least 1");
    PAGODA_ASSIGN_OR_RETURN(const DeviceSpec device, parse_device_spec(cfg.device));
    PAGODA_ASSIGN_OR_RETURN(const KvBudget budget,
                            device.is_cuda() ? load_cuda(device.index) : load_cpu());
    config_.kv_cache_memory = budget.pool_bytes;
    file_.reset();  // the weights are copied; the mapping is no longer needed

    // Tests make forward passes fail so (fault_injection.h).
    ModelRunner* runner = runner_.get();
    if (faults.active()) {
      log_warn("PAGODA_FAULT_INJECT=" + cfg.settings.fault_inject + ": forward passes will fail");
      faulty_ = std::make_unique<FaultInjectingRunner>(*runner_, faults);
      runner = faulty_.get();
    }
    EngineCoreConfig cc;
    cc.n_blocks = budget.n_blocks;
    cc.block_size = cfg.block_size;
    cc.enable_prefix_caching = cfg.enable_prefix_caching;
    cc.async_scheduling = cfg.async_scheduling;
    cc.device_sampling = cfg.settings.device_sampling;
    cc.sched.max_num_seqs = cfg.max_num_seqs;
    cc.sched.max_num_batched_tokens = cfg.max_num_batched_tokens;
    cc.sched.max_model_len = config_.max_model_len;
    cc.sched.policy = cfg.scheduling_policy == SchedulingPolicy::kPriority
                          ? sched::Policy::kPriority
                          : sched::Policy::kFcfs;
    core_ = std::make_unique<EngineCore>(cc, *runner, tok_.get());
    publish_stats();
    thread_ = std::thread([this] { loop(); });
    return Status::ok();
  }

  // Checks --max-model-len against the model's context and takes the default.
  Status set_max_model_len(const ModelConfig& mc) {
    config_.max_model_len = config_.max_model_len > 0 ? config_.max_model_len : mc.context_length;
    if (config_.max_model_len > mc.context_length)
      return invalid_argument(str_format("--max-model-len %lld is over the model's context %d",
                                         static_cast<long long>(config_.max_model_len),
                                         mc.context_length));
    return Status::ok();
  }

  Result<KvBudget> load_cpu() {
    PAGODA_ASSIGN_OR_RETURN(const KvCacheType kv, kv_cache_type(config_, /*gpu=*/false));
    PAGODA_RETURN_IF_ERROR(fp8_weights(config_, /*gpu=*/false).status());
    pool_ = std::make_unique<ThreadPool>(config_.threads);
    auto m = Model::load(*file_, pool_.get());
    if (!m) return m.status().with_context("loading the model '" + config_.model_path + "'");
    model_ = std::move(m).value();
    model_config_ = model_->config();
    PAGODA_RETURN_IF_ERROR(set_max_model_len(model_config_));
    const bool q8 = kv == KvCacheType::kQ8_0;
    if (q8) PAGODA_RETURN_IF_ERROR(KvStorage::supports_q8(model_config_));
    PAGODA_ASSIGN_OR_RETURN(const KvBudget budget, plan_kv_pool(model_config_, config_));
    RunnerOptions o;
    o.n_kv_blocks = budget.n_blocks;
    o.kv_block_size = config_.block_size;
    o.kv_cache_type = q8 ? KvCacheType::kQ8_0 : KvCacheType::k16Bit;
    runner_ = make_cpu_runner(*model_, *pool_, o);
    return budget;
  }

  // The KV pool is what the memory ledger's plan leaves of the GPU (the code behind
  // `pagoda plan`); the start-up log sets the plan beside what the GPU reports.
  Result<KvBudget> load_cuda(int gpu) {
    PAGODA_ASSIGN_OR_RETURN(const GpuMemory before, cuda_memory_info(gpu));
    PAGODA_ASSIGN_OR_RETURN(const ModelConfig mc, file_->model_config());
    PAGODA_ASSIGN_OR_RETURN(
        const GpuKvBudget g,
        plan_gpu_kv_pool(*file_, mc.context_length, config_, before.free, before.total));
    RunnerOptions o;
    o.n_kv_blocks = g.kv.n_blocks;
    o.kv_block_size = config_.block_size;
    o.max_batch_tokens = config_.max_num_batched_tokens;
    o.max_logit_rows = config_.max_num_seqs;
    o.device = gpu;
    o.kv_cache_type = g.kv_cache_type;
    o.fp8_weights = g.fp8_weights;
    o.cuda = config_.settings.cuda;
    auto runner = make_cuda_runner(*file_, o);
    if (!runner)
      return runner.status().with_context("loading '" + config_.model_path + "' on " +
                                          config_.device);
    model_config_ = (*runner)->config();
    PAGODA_RETURN_IF_ERROR(set_max_model_len(model_config_));
    if (auto after = cuda_memory_info(gpu)) {
      log_info(
          str_format("%s: plan %.2f GiB (weights %.2f, KV pool %.2f in %d blocks of %s, overheads "
                     "%.2f); the GPU reports %.2f GiB more in use since start (%.2f GiB free of "
                     "%.2f)",
                     config_.device.c_str(),
                     (g.weight_bytes + g.kv.pool_bytes + g.overhead_bytes) / 1073741824.0,
                     g.weight_bytes / 1073741824.0, g.kv.pool_bytes / 1073741824.0, g.kv.n_blocks,
                     o.kv_cache_type == KvCacheType::kFp8 ? "fp8" : "fp16",
                     g.overhead_bytes / 1073741824.0, (before.free - after->free) / 1073741824.0,
                     after->free / 1073741824.0, after->total / 1073741824.0));
    }
    runner_ = std::move(runner).value();
    return g.kv;
  }

  Result<std::shared_ptr<RequestStream>> add_request(const std::string& id,
                                                     const std::string& prompt,
                                                     const SamplingParams& params,
                                                     int priority) override {
    // Special-token text in a prompt becomes those tokens, as vLLM treats prompts.
    return add_request(id, tok_->encode(prompt, true, true), params, priority);
  }

  Result<std::shared_ptr<RequestStream>> add_request(const std::string& id,
                                                     const std::vector<int32_t>& prompt,
                                                     const SamplingParams& params,
                                                     int priority) override {
    if (prompt.empty()) return invalid_argument("the prompt has no tokens");
    auto stream = std::make_shared<StreamImpl>(std::max(1, params.n));
    Command c;
    c.kind = Command::kAdd;
    c.id = id;
    c.tokens = prompt;
    c.params = params;
    c.priority = priority;
    c.arrival = now();
    c.stream = stream;
    PAGODA_RETURN_IF_ERROR(core_->validate(c.tokens, params));
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return internal_error("the engine is shutting down");
    if (!live_.insert(id).second)
      return invalid_argument("a request with id '" + id + "' is already running");
    commands_.push_back(std::move(c));
    cv_.notify_all();
    return std::shared_ptr<RequestStream>(stream);
  }

  void abort(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    Command c;
    c.kind = Command::kAbort;
    c.id = id;
    commands_.push_back(std::move(c));
    cv_.notify_all();
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> l(stats_mu_);
    return stats_;
  }
  const Tokenizer& tokenizer() const override { return *tok_; }
  const ModelConfig& model_config() const override { return model_config_; }
  const EngineConfig& config() const override { return config_; }

 private:
  struct Command {
    enum Kind { kAdd, kAbort } kind = kAdd;
    std::string id;
    std::vector<int32_t> tokens;
    SamplingParams params;
    int priority = 0;
    double arrival = 0;
    std::shared_ptr<StreamImpl> stream;
  };

  void loop() {
    std::vector<RequestOutput> outs;
    for (;;) {
      std::deque<Command> cmds;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !commands_.empty() || core_->has_work(); });
        if (stop_) break;
        cmds.swap(commands_);
      }
      outs.clear();
      for (Command& c : cmds) apply(c, &outs);
      core_->step(&outs);
      // Stats first: a caller woken by its stream's last output sees the blocks it freed.
      publish_stats();
      dispatch(outs);
    }
    // Shutting down: every open stream ends with abort.
    outs.clear();
    std::vector<std::string> ids;
    for (const auto& [id, s] : streams_) ids.push_back(id);
    for (const std::string& id : ids) core_->abort(id, &outs);
    dispatch(outs);
    std::lock_guard<std::mutex> l(mu_);
    for (Command& c : commands_) end_unrun(c, FinishReason::kAbort, "");
  }

  // Ends every completion of a request that never ran (so none has output) on its stream.
  static void end_unrun(const Command& c, FinishReason reason, const std::string& error) {
    for (int i = 0; i < std::max(1, c.params.n); ++i) {
      RequestOutput o;
      o.request_id = c.id;
      o.index = i;
      o.finished = true;
      o.finish_reason = reason;
      o.error = error;
      c.stream->push(std::move(o));
    }
  }

  void apply(Command& c, std::vector<RequestOutput>* outs) {
    if (c.kind == Command::kAbort) {
      core_->abort(c.id, outs);
      return;
    }
    // Validated when queued; a failure here is an engine fault, reported on the stream.
    Status s = core_->add_request(c.id, c.tokens, c.params, c.priority, c.arrival);
    if (s) {
      streams_[c.id] = c.stream;
      return;
    }
    end_unrun(c, FinishReason::kError, s.message());
    std::lock_guard<std::mutex> l(mu_);
    live_.erase(c.id);
  }

  // Moves each output to its stream (the engine thread's time here is the GPU's idle
  // time too: a copy per token cost about as much as the step's own work).
  void dispatch(std::vector<RequestOutput>& outs) {
    for (RequestOutput& o : outs) {
      auto it = streams_.find(o.request_id);
      if (it == streams_.end()) continue;
      std::shared_ptr<StreamImpl> stream = it->second;
      if (o.finished && stream->last_one_pending()) {
        // Free the id before the client can see the end of its stream, so it may reuse
        // the id the moment it has read it.
        streams_.erase(it);
        std::lock_guard<std::mutex> l(mu_);
        live_.erase(o.request_id);
      }
      stream->push(std::move(o));
    }
  }

  void publish_stats() {
    EngineStats s = core_->stats();
    s.kv_pool_bytes = config_.kv_cache_memory;
    std::lock_guard<std::mutex> l(stats_mu_);
    stats_ = s;
  }

  EngineConfig config_;
  std::unique_ptr<TensorSource> file_;  // the GGUF file or checkpoint folder, while loading
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<FaultInjectingRunner> faulty_;  // wraps runner_ when faults are injected
  ModelConfig model_config_;
  std::unique_ptr<EngineCore> core_;
  std::thread thread_;

  std::mutex mu_;  // commands_, live_, stop_
  std::condition_variable cv_;
  std::deque<Command> commands_;
  std::unordered_set<std::string> live_;
  bool stop_ = false;
  std::unordered_map<std::string, std::shared_ptr<StreamImpl>> streams_;  // engine thread

  mutable std::mutex stats_mu_;
  EngineStats stats_;
};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  auto e = std::make_unique<EngineImpl>();
  PAGODA_RETURN_IF_ERROR(e->init(config));
  return std::unique_ptr<Engine>(std::move(e));
}

}  // namespace pagoda
