// fp8 and smoothquant: compressed-tensors' float-quantized and int-quantized folders
// (model/hf_quantize.h), with the FP8 KV-cache scales when calibrated.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/fp8.h"
#include "model/hf_scheme_writer.h"

namespace pagoda {
namespace {

// One scale per output channel, amax / (448 or 127) in f32 (1 for an all-zero row, as
// nothing then depends on it); each weight E4M3(w / scale), or round(w / scale) clamped
// to int8 (ties to even, as torch.round). `smooth` (may be null) multiplies column j
// first.
void quantize_rows(const SafetensorsTensor& t, const uint8_t* data, const float* smooth, bool fp8,
                   ThreadPool& pool, std::vector<uint8_t>* q, std::vector<float>* scales) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const float qmax = fp8 ? kE4M3Max : 127.0f;
  q->resize(static_cast<size_t>(rows * cols));
  scales->resize(static_cast<size_t>(rows));
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      load_row(t, data, r, cols, row.data());
      if (smooth)
        for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] *= smooth[c];
      float amax = 0.0f;
      for (float v : row) amax = std::max(amax, std::fabs(v));
      const float s = amax > 0.0f ? amax / qmax : 1.0f;
      (*scales)[static_cast<size_t>(r)] = s;
      uint8_t* out = q->data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = row[static_cast<size_t>(c)] / s;
        out[c] = fp8 ? f32_to_e4m3(v)
                     : static_cast<uint8_t>(
                           static_cast<int8_t>(std::clamp(std::nearbyint(v), -128.0f, 127.0f)));
      }
    }
  });
}

// compressed-tensors' description of the scheme: weights per channel, activations per
// token at run time (the keys its QuantizationArgs serialises).
ojson ct_config(bool fp8) {
  const char* type = fp8 ? "float" : "int";
  const char* format = fp8 ? "float-quantized" : "int-quantized";
  auto args = [&](const char* strategy, bool dynamic, const char* observer) {
    ojson a;
    a["num_bits"] = 8;
    a["type"] = type;
    a["symmetric"] = true;
    a["group_size"] = nullptr;
    a["strategy"] = strategy;
    a["block_structure"] = nullptr;
    a["dynamic"] = dynamic;
    a["actorder"] = nullptr;
    a["observer"] = observer ? ojson(observer) : ojson(nullptr);
    a["observer_kwargs"] = ojson::object();
    return a;
  };
  ojson group;
  group["targets"] = {"Linear"};
  group["weights"] = args("channel", false, "minmax");
  group["input_activations"] = args("token", true, nullptr);
  group["output_activations"] = nullptr;
  group["format"] = format;
  ojson qc;
  qc["quant_method"] = "compressed-tensors";
  qc["format"] = format;
  qc["quantization_status"] = "compressed";
  qc["config_groups"] = {{"group_0", group}};
  qc["ignore"] = {"lm_head"};
  qc["kv_cache_scheme"] = nullptr;
  qc["global_compression_ratio"] = nullptr;
  return qc;
}

// compressed-tensors' FP8 KV-cache scheme: one static scale per layer for K and for V.
ojson kv_cache_scheme() {
  ojson kv;
  kv["num_bits"] = 8;
  kv["type"] = "float";
  kv["symmetric"] = true;
  kv["group_size"] = nullptr;
  kv["strategy"] = "tensor";
  kv["block_structure"] = nullptr;
  kv["dynamic"] = false;
  kv["actorder"] = nullptr;
  kv["observer"] = "minmax";
  kv["observer_kwargs"] = ojson::object();
  return kv;
}

// SmoothQuant's factors per layer for the products after each norm: s_j = max|X_j|^alpha /
// max|W_j|^(1 - alpha), W_j column j of every weight of the group (1 where either max is
// 0: nothing to migrate), kept within [1e-5, 1e5]. `out` maps each weight and norm name to
// its group's factors.
Status compute_smoothing(const std::map<std::string, HfSource>& by_name,
                         const ChannelMaxCollector& act, float alpha, ThreadPool& pool,
                         std::map<std::string, std::vector<float>>* out) {
  struct Group {
    std::vector<const char*> weights;
    const char* norm;
    ActivationObserver::Input input;
  };
  const Group groups[] = {
      {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
       "input_layernorm",
       ActivationObserver::Input::kQkv},
      {{"mlp.gate_proj", "mlp.up_proj"},
       "post_attention_layernorm",
       ActivationObserver::Input::kGateUp},
  };
  for (int l = 0; l < act.n_layers(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const Group& g : groups) {
      const std::vector<float>& amax = act.max_abs(l, g.input);
      const auto norm = by_name.find(p + g.norm + ".weight");
      if (norm == by_name.end() || !is_float(*norm->second.t) || norm->second.t->shape.size() != 1)
        return unsupported("smoothquant needs a 16- or 32-bit '" + p + g.norm + ".weight'");
      const int64_t cols = norm->second.t->shape[0];
      if (static_cast<int64_t>(amax.size()) != cols)
        return internal_error("the calibration run saw no input of layer " + std::to_string(l));
      std::vector<float> wmax(static_cast<size_t>(cols), 0.0f);
      std::mutex mu;
      for (const char* w : g.weights) {
        const auto it = by_name.find(p + w + ".weight");
        if (it == by_name.end() || it->second.t->shape.size() != 2 ||
            it->second.t->shape[1] != cols)
          return unsupported("smoothquant needs '" + p + w + ".weight' of " + std::to_string(cols) +
                             " columns");
        const SafetensorsTensor& t = *it->second.t;
        const uint8_t* data = it->second.data();
        pool.parallel_for(t.shape[0], 64, [&](int64_t r0, int64_t r1) {
          std::vector<float> row(static_cast<size_t>(cols)), m(static_cast<size_t>(cols), 0.0f);
          for (int64_t r = r0; r < r1; ++r) {
            load_row(t, data, r, cols, row.data());
            for (int64_t c = 0; c < cols; ++c)
              m[static_cast<size_t>(c)] =
                  std::max(m[static_cast<size_t>(c)], std::fabs(row[static_cast<size_t>(c)]));
          }
          std::lock_guard<std::mutex> lock(mu);
          for (int64_t c = 0; c < cols; ++c)
            wmax[static_cast<size_t>(c)] = std::max(wmax[static_cast<size_t>(c)], m[c]);
        });
      }
      std::vector<float> s(static_cast<size_t>(cols));
      for (size_t c = 0; c < s.size(); ++c) {
        const double a = amax[c], w = wmax[c];
        const double f = a > 0 && w > 0 ? std::pow(a, alpha) / std::pow(w, 1.0 - alpha) : 1.0;
        s[c] = static_cast<float>(std::clamp(f, 1e-5, 1e5));
      }
      for (const char* w : g.weights) (*out)[p + w + ".weight"] = s;
      (*out)[p + g.norm + ".weight"] = std::move(s);
    }
  }
  return Status::ok();
}

class CompressedTensorsWriter : public HfSchemeWriter {
 public:
  CompressedTensorsWriter(const HfQuantizeOptions& o, ThreadPool& pool)
      : fp8_(o.scheme == "fp8"), kv_amax_(o.kv_amax), pool_(pool) {}

  Status smooth(const HfQuantizeOptions& o, const HfInput& in) {
    return compute_smoothing(in.by_name, *o.act_max, o.alpha, pool_, &smooth_);
  }

  ojson quantization_config(const ojson&) const override {
    ojson qc = ct_config(fp8_);
    if (kv_amax_ != nullptr) qc["kv_cache_scheme"] = kv_cache_scheme();
    return qc;
  }

  Status add_linear(const HfSource& src, std::vector<HfOutTensor>* out) override {
    const SafetensorsTensor& t = *src.t;
    const std::string base = t.name.substr(0, t.name.size() - 7);  // less ".weight"
    const std::vector<float>* factors = factors_of(t.name);
    // The weight's fill computes both; the scale's, right after it, writes the scales.
    auto scales = std::make_shared<std::vector<float>>();
    out->push_back({{t.name, fp8_ ? "F8_E4M3" : "I8", t.shape},
                    [this, src, factors, scales](std::vector<uint8_t>* bytes) {
                      quantize_rows(*src.t, src.data(), factors ? factors->data() : nullptr, fp8_,
                                    pool_, bytes, scales.get());
                      return Status::ok();
                    }});
    out->push_back(
        {{base + ".weight_scale", "F32", {t.shape[0], 1}}, [scales](std::vector<uint8_t>* bytes) {
           put(*scales, bytes);
           return Status::ok();
         }});
    return Status::ok();
  }

  Status add_other(const HfSource& src, std::vector<HfOutTensor>* out) override {
    const std::vector<float>* factors = factors_of(src.t->name);
    if (factors == nullptr) return HfSchemeWriter::add_other(src, out);
    out->push_back(
        {{src.t->name, src.t->dtype, src.t->shape}, [src, factors](std::vector<uint8_t>* bytes) {
           divided_vector(*src.t, src.data(), *factors, bytes);
           return Status::ok();
         }});
    return Status::ok();
  }

  Status finish(std::vector<HfOutTensor>* out) override {
    if (kv_amax_ == nullptr) return Status::ok();
    const std::vector<float>& k = kv_amax_->k_amax();
    const std::vector<float>& v = kv_amax_->v_amax();
    for (size_t l = 0; l < k.size(); ++l) {
      if (!(k[l] > 0) || !(v[l] > 0) || !std::isfinite(k[l]) || !std::isfinite(v[l]))
        return internal_error("the calibration run saw no keys or values in layer " +
                              std::to_string(l));
      for (const auto& [which, amax] : {std::pair{"k_scale", k[l]}, std::pair{"v_scale", v[l]}}) {
        const float scale = amax / kE4M3Max;  // the calibration's amax onto E4M3's largest
        out->push_back({{"model.layers." + std::to_string(l) + ".self_attn." + which, "F32", {1}},
                        [scale](std::vector<uint8_t>* bytes) {
                          bytes->resize(sizeof scale);
                          std::memcpy(bytes->data(), &scale, sizeof scale);
                          return Status::ok();
                        }});
      }
    }
    return Status::ok();
  }

 private:
  const std::vector<float>* factors_of(const std::string& name) const {
    const auto it = smooth_.find(name);
    return it == smooth_.end() ? nullptr : &it->second;
  }

  bool fp8_;
  const KvAmaxCollector* kv_amax_;
  ThreadPool& pool_;
  std::map<std::string, std::vector<float>> smooth_;  // smoothquant: by weight and norm name
};

}  // namespace

Result<std::unique_ptr<HfSchemeWriter>> make_compressed_tensors_writer(const HfQuantizeOptions& o,
                                                                       const HfInput& in,
                                                                       ThreadPool& pool) {
  const bool smoothquant = o.scheme == "smoothquant";
  if (smoothquant && o.act_max == nullptr)
    return internal_error("smoothquant needs the calibration run's statistics");
  auto w = std::make_unique<CompressedTensorsWriter>(o, pool);
  if (smoothquant) PAGODA_RETURN_IF_ERROR(w->smooth(o, in));
  return std::unique_ptr<HfSchemeWriter>(std::move(w));
}

}  // namespace pagoda
