// The largest |key| (after RoPE) and |value| each layer writes to the KV cache over a
// calibration run (RunnerOptions::observer): `pagoda quantize ... --kv-cache-scales`
// turns them into per-layer FP8 KV-cache scales (amax / 448, E4M3's largest finite value),
// written as compressed-tensors' kv_cache_scheme k_scale / v_scale.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/model.h"

namespace pagoda {

class KvAmaxCollector : public ActivationObserver {
 public:
  explicit KvAmaxCollector(int n_layers)
      : k_(static_cast<size_t>(n_layers), 0.0f), v_(static_cast<size_t>(n_layers), 0.0f) {}
  void observe(int, Input, const float*, int64_t, int64_t) override {}
  void observe_kv(int layer, const float* k, const float* v, int64_t n, int64_t stride,
                  int64_t kv_dim) override;
  const std::vector<float>& k_amax() const { return k_; }
  const std::vector<float>& v_amax() const { return v_; }
  int64_t tokens() const { return tokens_; }  // rows layer 0 saw

 private:
  std::vector<float> k_, v_;
  int64_t tokens_ = 0;
};

// Forwards every call to each non-null one of `parts` (one calibration pass feeding
// several statistics).
class ObserverFan : public ActivationObserver {
 public:
  explicit ObserverFan(const std::vector<ActivationObserver*>& parts) {
    for (ActivationObserver* p : parts)
      if (p != nullptr) parts_.push_back(p);
  }
  void observe(int layer, Input which, const float* x, int64_t n, int64_t cols) override {
    for (ActivationObserver* p : parts_) p->observe(layer, which, x, n, cols);
  }
  void observe_kv(int layer, const float* k, const float* v, int64_t n, int64_t stride,
                  int64_t kv_dim) override {
    for (ActivationObserver* p : parts_) p->observe_kv(layer, k, v, n, stride, kv_dim);
  }

 private:
  std::vector<ActivationObserver*> parts_;
};

}  // namespace pagoda
