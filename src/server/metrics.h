// Prometheus metrics named as vLLM names them (with the pagoda: prefix), so existing
// dashboards port. Request-level series are recorded here as requests finish; engine
// gauges and counters are read from EngineStats when /metrics is scraped.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pagoda/engine.h"

namespace pagoda::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket, _sum and _count lines of `name`.
  void render(const std::string& name, const std::string& labels, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct MetricsInfo {
  std::string model_name;
  std::string version;   // Pagoda's
  std::string revision;  // git describe of the build
};

class Metrics {
 public:
  explicit Metrics(MetricsInfo info);

  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  void observe_inter_token(double seconds, int64_t tokens);
  // One completion finished; its metrics are on the engine's clock.
  void completion_finished(const RequestMetrics& m, FinishReason reason);
  void error_response(int status);

  std::string render(const EngineStats& stats) const;

 private:
  const MetricsInfo info_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, int64_t> success_;  // by finish reason
  std::map<int, int64_t> errors_;           // by HTTP status
};

}  // namespace pagoda::server
