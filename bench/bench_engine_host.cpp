// The engine core's host cost per step, with a model that costs nothing: what the GPU
// waits for between two forward passes (scheduling, batch building, token handling,
// detokenization, outputs). The offline run of issue 6 spent 3-4% of its time here.
//
//   build/bench_engine_host VOCAB.gguf [requests=1000] [prompt=1000] [output=1000]
//                           [max_seqs=512] [n_blocks=110000] [wait_ms=0] [streams=0]
//                           [async=0]
//
// The runner answers every greedy step at once with a token derived from the step and
// row (never an end-of-generation token: EOS is ignored as in the offline run). With
// wait_ms > 0 it sleeps that long in each step, as the engine thread does while the GPU
// runs, so caches and the core it wakes on are as cold as in a real run. With streams=1
// the outputs go as the Engine hands them on (moved into a locked per-request queue) to
// a consumer thread that reads the requests in order, as `pagoda generate` does; the
// time to hand them on is reported apart. With async=1 the engine pipelines its steps
// (--async-scheduling) and the runner acts as a device queue: a launched step
// "runs" for wait_ms after the one before it ends, and collect() sleeps until it has;
// the elapsed time then shows how much of the host's work the device's time hides.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_core.h"
#include "model/gguf.h"
#include "pagoda/engine.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

class InstantRunner : public ModelRunner {
 public:
  InstantRunner(int32_t n_vocab, double wait_ms) : wait_ms_(wait_ms) { config_.n_vocab = n_vocab; }
  const ModelConfig& config() const override { return config_; }
  DeviceKind device_kind() const override { return DeviceKind::kCpu; }
  std::string describe() const override { return "instant"; }
  size_t decode_weight_bytes() const override { return 0; }
  size_t weight_bytes() const override { return 0; }
  Status forward(const Batch& b, const StepOutput& out) override {
    if (!out.tokens || out.sampling) return unsupported("greedy only");
    if (wait_ms_ > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait_ms_));
    pick(b, out.tokens);
    return Status::ok();
  }
  bool picks_tokens(bool sampled) const override { return !sampled; }
  Status copy_block(int, int) override { return Status::ok(); }
  // A device queue: each step ends wait_ms after it starts, and starts when it is
  // launched or when the step before it ends, whichever is later.
  Status launch(const Batch& b, const StepSampling*) override {
    for (int32_t t : b.tokens)
      if (t < 0 && static_cast<size_t>(-(static_cast<int64_t>(t) + 1)) >= last_rows_)
        return internal_error("placeholder outside the previous step");
    const double start = std::max(Engine::now(), device_free_);
    device_free_ = start + wait_ms_ / 1000.0;
    std::vector<int32_t> tokens(b.logit_rows.size());
    pick(b, tokens.data());
    last_rows_ = tokens.size();
    queue_.push_back({device_free_, std::move(tokens)});
    return Status::ok();
  }
  Status collect(std::vector<int32_t>* tokens) override {
    if (queue_.empty()) return internal_error("nothing queued");
    const double wait = queue_.front().first - Engine::now();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    *tokens = std::move(queue_.front().second);
    queue_.pop_front();
    return Status::ok();
  }

 private:
  void pick(const Batch& b, int32_t* tokens) {
    for (size_t i = 0; i < b.logit_rows.size(); ++i)
      tokens[i] = static_cast<int32_t>(1000 + (step_ * 7919 + i * 104729) % 100000);
    ++step_;
  }
  ModelConfig config_;
  double wait_ms_;
  uint64_t step_ = 0;
  double device_free_ = 0;
  size_t last_rows_ = 0;
  std::deque<std::pair<double, std::vector<int32_t>>> queue_;
};

// A request's outputs on their way to the consumer (the Engine's StreamImpl, reduced).
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<RequestOutput> q;
  bool done = false;
  void push(RequestOutput o) {
    {
      std::lock_guard<std::mutex> l(mu);
      done = done || o.finished;
      q.push_back(std::move(o));
    }
    cv.notify_all();
  }
  // Drains the stream; returns the outputs read.
  int64_t drain() {
    int64_t n = 0;
    for (;;) {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return !q.empty(); });
      const bool last = q.front().finished;
      q.pop_front();
      ++n;
      if (last) return n;
    }
  }
};

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s VOCAB.gguf [requests] [prompt] [output] [max_seqs] [n_blocks] "
                 "[wait_ms]\n",
                 argv[0]);
    return 2;
  }
  const auto arg = [&](int i, double def) { return argc > i ? std::atof(argv[i]) : def; };
  const int requests = static_cast<int>(arg(2, 1000));
  const int prompt_len = static_cast<int>(arg(3, 1000));
  const int output_len = static_cast<int>(arg(4, 1000));
  const int max_seqs = static_cast<int>(arg(5, 512));
  const int n_blocks = static_cast<int>(arg(6, 110000));
  const double wait_ms = arg(7, 0);
  const bool streams = arg(8, 0) != 0;
  const bool async = arg(9, 0) != 0;

  auto file = GgufFile::open(argv[1]);
  if (!file) return std::fprintf(stderr, "%s\n", file.status().message().c_str()), 1;
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) return std::fprintf(stderr, "%s\n", tok.status().message().c_str()), 1;

  InstantRunner runner((*tok)->n_vocab(), wait_ms);
  EngineCoreConfig c;
  c.n_blocks = n_blocks;
  c.block_size = 16;
  c.sched.max_num_seqs = max_seqs;
  c.sched.max_num_batched_tokens = 8192;
  c.sched.max_model_len = prompt_len + output_len;
  c.async_scheduling = async;
  EngineCore core(c, runner, tok->get());

  std::mt19937 rng(1);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = output_len;
  p.ignore_eos = true;
  for (int i = 0; i < requests; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int32_t& t : prompt) t = static_cast<int32_t>(1000 + rng() % 119000);
    if (Status s = core.add_request(std::to_string(i), prompt, p, 0, Engine::now()); !s)
      return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
  }
  std::vector<Stream> stream(static_cast<size_t>(requests));
  std::atomic<int64_t> consumed{0};
  std::thread consumer;
  if (streams)
    consumer = std::thread([&] {
      for (Stream& st : stream) consumed += st.drain();
    });
  std::vector<RequestOutput> out;
  int64_t outputs = 0;
  double hand_on_s = 0;
  const double t0 = Engine::now();
  while (core.has_work()) {
    out.clear();
    core.step(&out);
    outputs += static_cast<int64_t>(out.size());
    if (streams) {
      const double h0 = Engine::now();
      for (RequestOutput& o : out) stream[std::stoul(o.request_id)].push(std::move(o));
      hand_on_s += Engine::now() - h0;
    }
  }
  if (consumer.joinable()) consumer.join();
  const double elapsed = Engine::now() - t0;
  const EngineStats st = core.stats();
  const double host = st.step_s - st.execute_s;
  std::printf(
      "%d requests x (%d + %d), %d seqs%s: %lld steps, %lld tokens generated, %lld outputs; "
      "host %.3f s (%.1f us a step), execute %.3f s, elapsed %.3f s\n",
      requests, prompt_len, output_len, max_seqs, async ? ", pipelined" : "",
      static_cast<long long>(st.steps), static_cast<long long>(st.generation_tokens),
      static_cast<long long>(outputs), host, 1e6 * host / static_cast<double>(st.steps),
      st.execute_s, elapsed);
  if (streams)
    std::printf("handing outputs on: %.3f s (%.1f us a step); the consumer read %lld\n", hand_on_s,
                1e6 * hand_on_s / static_cast<double>(st.steps),
                static_cast<long long>(consumed.load()));
  return 0;
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  return pagoda::run(argc, argv);
}
