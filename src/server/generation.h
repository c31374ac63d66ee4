// One HTTP request's generation: its prompts queued on the engine, their outputs read
// back in arrival order as (choice, output) events, metrics recorded as they pass.
// Destroying a Generation that has not finished aborts it, so a client that goes away
// frees its KV blocks; each completion whose end was not read then counts as finished
// with reason abort (request_success_total), without latency observations.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/engine.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace pagoda::server {

class Metrics;

struct GenerationEvent {
  int choice = 0;  // prompt index x n + completion index
  RequestOutput out;
};

class Generation {
 public:
  static ApiResult<std::unique_ptr<Generation>> start(Engine& engine, Metrics& metrics,
                                                      const GenerationRequest& req,
                                                      const std::string& id);
  ~Generation();

  // The next output if one is ready; never waits (for an event loop).
  std::optional<GenerationEvent> poll();
  // Calls `fn` from the engine's thread whenever an output may be ready (see
  // RequestStream::set_listener); cleared when the Generation ends.
  void set_listener(const std::function<void()>& fn);
  bool done() const;
  void abort();
  const std::vector<std::string>& ids() const { return ids_; }
  int num_choices() const { return static_cast<int>(streams_.size()) * n_; }

 private:
  Generation(Engine& engine, Metrics& metrics, int n) : engine_(engine), metrics_(metrics), n_(n) {}
  void account(const GenerationEvent& e);

  Engine& engine_;
  Metrics& metrics_;
  const int n_;
  std::vector<std::string> ids_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<double> last_time_;  // per choice, of its latest output with tokens
  std::vector<bool> ended_;        // per choice, its final output was read and counted
  bool started_ = false;           // every prompt was queued
  bool failed_ = false;            // an engine error was read: an error response
  size_t rr_ = 0;                  // round-robin position over streams
  bool aborted_ = false;
};

}  // namespace pagoda::server
