#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace pagoda::server {
namespace {

// Seconds, from 1 ms up, as vLLM's latency histograms.
std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,  0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160., 640., 2560.};
}

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

std::string escape_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

void header(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string* out) const {
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    *out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  *out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

Metrics::Metrics(MetricsInfo info)
    : info_(std::move(info)),
      ttft_(latency_buckets()),
      itl_(latency_buckets()),
      e2e_(latency_buckets()),
      queue_(latency_buckets()) {}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> l(mu_);
  prompt_tokens_ += n;
}

void Metrics::add_generation_tokens(int64_t n) {
  std::lock_guard<std::mutex> l(mu_);
  generation_tokens_ += n;
}

void Metrics::observe_inter_token(double seconds, int64_t tokens) {
  std::lock_guard<std::mutex> l(mu_);
  for (int64_t i = 0; i < tokens; ++i) itl_.observe(seconds / static_cast<double>(tokens));
}

void Metrics::completion_finished(const RequestMetrics& m, FinishReason reason) {
  std::lock_guard<std::mutex> l(mu_);
  ++success_[finish_reason_name(reason)];
  if (m.first_token > 0) ttft_.observe(std::max(0.0, m.first_token - m.arrival));
  if (m.first_scheduled > 0) queue_.observe(std::max(0.0, m.first_scheduled - m.arrival));
  if (m.finished > 0) e2e_.observe(std::max(0.0, m.finished - m.arrival));
}

void Metrics::error_response(int status) {
  std::lock_guard<std::mutex> l(mu_);
  ++errors_[status];
}

std::string Metrics::render(const EngineStats& s) const {
  const std::string model = "model_name=\"" + escape_label(info_.model_name) + "\"";
  std::string o;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(&o, name, "gauge", help);
    o += std::string(name) + "{" + model + "} " + num(v) + "\n";
  };
  auto counter = [&](const std::string& name, const char* help, double v) {
    header(&o, name, "counter", help);
    o += name + "{" + model + "} " + num(v) + "\n";
  };
  header(&o, "pagoda:build_info", "gauge", "Pagoda build and model information.");
  o += "pagoda:build_info{" + model + ",version=\"" + escape_label(info_.version) +
       "\",revision=\"" + escape_label(info_.revision) + "\"} 1\n";
  gauge("pagoda:num_requests_running", "Requests in the running batch.", s.num_running);
  gauge("pagoda:num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting);
  gauge("pagoda:kv_cache_usage_perc", "KV-cache usage, 0 to 1.", s.kv_usage);
  gauge("pagoda:kv_cache_blocks_total", "KV-cache blocks in the pool.", s.kv_blocks_total);
  std::lock_guard<std::mutex> l(mu_);
  counter("pagoda:prompt_tokens_total", "Prompt tokens of the requests served.",
          static_cast<double>(prompt_tokens_));
  counter("pagoda:generation_tokens_total", "Tokens generated and delivered.",
          static_cast<double>(generation_tokens_));
  counter("pagoda:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(s.prefix_queries));
  counter("pagoda:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          static_cast<double>(s.prefix_hits));
  counter("pagoda:num_preemptions_total", "Preemptions of running requests.",
          static_cast<double>(s.preemptions));
  header(&o, "pagoda:request_success_total", "counter", "Completions finished, by reason.");
  for (const char* reason : {"stop", "length", "abort"}) {
    auto it = success_.find(reason);
    o += "pagoda:request_success_total{" + model + ",finished_reason=\"" + reason + "\"} " +
         std::to_string(it == success_.end() ? 0 : it->second) + "\n";
  }
  header(&o, "pagoda:request_errors_total", "counter", "Error responses, by HTTP status.");
  for (const auto& [code, n] : errors_)
    o += "pagoda:request_errors_total{" + model + ",code=\"" + std::to_string(code) + "\"} " +
         std::to_string(n) + "\n";
  header(&o, "pagoda:time_to_first_token_seconds", "histogram", "Time to first token.");
  ttft_.render("pagoda:time_to_first_token_seconds", model, &o);
  header(&o, "pagoda:inter_token_latency_seconds", "histogram", "Time between output tokens.");
  itl_.render("pagoda:inter_token_latency_seconds", model, &o);
  header(&o, "pagoda:e2e_request_latency_seconds", "histogram", "Arrival to finish.");
  e2e_.render("pagoda:e2e_request_latency_seconds", model, &o);
  header(&o, "pagoda:request_queue_time_seconds", "histogram", "Arrival to first scheduled.");
  queue_.render("pagoda:request_queue_time_seconds", model, &o);
  return o;
}

}  // namespace pagoda::server
