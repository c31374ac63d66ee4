// Benchmarks on a backend other than the CPU Model (see bench_runner.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "model/runner.h"

namespace pagoda::cli {

struct RunnerBenchConfig {
  int prompt_len = 512;
  int gen_len = 128;
  int depth = 0;     // context already in the KV cache before the decode test
  int parallel = 1;  // sequences decoded together
  int n_batch = 512;
  int64_t repeats = 5;
  int device = 0;
  bool json = false;
  KvCacheType kv_cache_type = KvCacheType::k16Bit;
  bool fp8_weights = false;
  // Decode as the engine's --async-scheduling does: step i + 1 is queued before step i's
  // picks are read, its tokens the placeholders for them (ModelRunner::launch).
  bool pipelined = false;
};

int bench_runner(const std::string& model_path, const RunnerBenchConfig& config);

}  // namespace pagoda::cli
