#include "model/hf_awq.h"

#include <cstdlib>
#include <cstring>
#include <numeric>

namespace pagoda {
namespace {

using In = ActivationObserver::Input;

constexpr const char* kLayerPrefix = "model.layers.";

// A scale group of the recipe (hf_awq.h's table).
struct ScaleGroup {
  const char* label;
  std::vector<const char*> products;
  In input;
  const char* norm;  // the norm weight divided by the factors, or null
  const char* prev;  // the product whose output rows are divided, or null
};

const std::vector<ScaleGroup>& scale_groups() {
  static const std::vector<ScaleGroup> g = {
      {"qkv",
       {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
       In::kQkv,
       "input_layernorm",
       nullptr},
      {"o", {"self_attn.o_proj"}, In::kWo, nullptr, "self_attn.v_proj"},
      {"gate_up",
       {"mlp.gate_proj", "mlp.up_proj"},
       In::kGateUp,
       "post_attention_layernorm",
       nullptr},
      {"down", {"mlp.down_proj"}, In::kDown, nullptr, "mlp.up_proj"},
  };
  return g;
}

In input_of(const std::string& product) {
  for (const ScaleGroup& g : scale_groups())
    for (const char* p : g.products)
      if (product == p) return g.input;
  return In::kQkv;
}

// AutoAWQ leaves q and k unclipped.
bool clipped(const std::string& product) {
  return product != "self_attn.q_proj" && product != "self_attn.k_proj";
}

// "model.layers.N.REST" -> N and REST; -1 when the name is not under a layer.
int split_layer(const std::string& name, std::string* rest) {
  if (name.rfind(kLayerPrefix, 0) != 0) return -1;
  char* end = nullptr;
  const long l = std::strtol(name.c_str() + std::strlen(kLayerPrefix), &end, 10);
  if (end == nullptr || *end != '.' || l < 0) return -1;
  *rest = std::string(end + 1);
  return static_cast<int>(l);
}

// The largest power of two from 32 up to `limit` dividing `n`, or 0.
int64_t pow2_divisor(int64_t n, int64_t limit) {
  int64_t best = 0;
  for (int64_t g = 32; g <= limit; g *= 2)
    if (n % g == 0) best = g;
  return best;
}

}  // namespace

const std::vector<std::string>& awq_layer_products() {
  static const std::vector<std::string> p = {
      "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
      "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  return p;
}

Status awq_check_shapes(const std::vector<std::pair<std::string, std::vector<int64_t>>>& linears,
                        int64_t group) {
  int64_t all_cols = 0;
  for (const auto& [name, shape] : linears) all_cols = std::gcd(all_cols, shape[1]);
  for (const auto& [name, shape] : linears) {
    if (shape[0] % 8 != 0)
      return unsupported(str_format("'%s' has %lld outputs; AWQ packs 8 a word (a multiple of 8)",
                                    name.c_str(), static_cast<long long>(shape[0])));
    if (shape[1] % group == 0) continue;
    const int64_t g = pow2_divisor(all_cols, std::max<int64_t>(group, 128));
    return unsupported(
        str_format("'%s' has %lld inputs, not whole groups of %lld (AWQ quantizes whole "
                   "groups only); ",
                   name.c_str(), static_cast<long long>(shape[1]), static_cast<long long>(group)) +
        (g > 0 ? str_format("--group-size %lld divides every layer", static_cast<long long>(g))
               : std::string("no group size of 32, 64 or 128 divides every layer")));
  }
  return Status::ok();
}

Result<std::map<std::string, AwqTensors>> awq_quantize_layer(
    int layer, std::map<std::string, AwqMatrix>& weights, const HessianCollector& hessian,
    const ChannelMaxCollector& act, int64_t group, ThreadPool& pool,
    std::map<std::string, std::vector<float>>* divide, AwqLayerReport* report) {
  const std::string where = kLayerPrefix + std::to_string(layer) + ".";
  for (const std::string& p : awq_layer_products()) {
    const auto it = weights.find(p);
    if (it == weights.end())
      return unsupported("awq needs '" + where + p + ".weight' (a Llama-family layer)");
    const AwqMatrix& m = it->second;
    const In in = input_of(p);
    if (layer >= hessian.n_layers() || hessian.cols(layer, in) != m.cols ||
        static_cast<int64_t>(act.mean_abs(layer, in).size()) != m.cols)
      return internal_error("the calibration run saw no input of '" + where + p + "'");
    if (m.cols % group != 0 || m.rows % 8 != 0)
      return unsupported("'" + where + p + ".weight' is not whole AWQ groups and words");
  }
  // Every scale searched on the 16-bit weights first.
  std::map<In, std::vector<float>> col_scale;  // by input; absent: none
  std::map<std::string, std::vector<float>> row_div;
  for (const ScaleGroup& g : scale_groups()) {
    const int64_t cols = weights[g.products[0]].cols;
    if (g.prev != nullptr && weights[g.prev].rows != cols) continue;  // grouped-query o_proj
    std::vector<AwqProduct> products;
    for (const char* p : g.products) products.push_back({weights[p].w.data(), weights[p].rows});
    auto s = awq_search_scales(products, hessian.sum_xxt(layer, g.input),
                               act.mean_abs(layer, g.input), group, pool);
    if (!s) return s.status().with_context("'" + where + g.products[0] + "'");
    if (report != nullptr) {
      report->groups.push_back(g.label);
      report->alpha.push_back(s->alpha);
      report->error.push_back(s->error);
      report->error_rtn.push_back(s->error_rtn);
    }
    if (g.norm != nullptr) (*divide)[std::string(g.norm) + ".weight"] = s->scales;
    if (g.prev != nullptr) {
      row_div[g.prev] = s->scales;
      if (std::string(g.prev) == "self_attn.v_proj") (*divide)["self_attn.v_proj.bias"] = s->scales;
    }
    col_scale[g.input] = std::move(s->scales);
  }
  // Then applied: columns times the input's factors, rows divided by the next product's.
  for (auto& entry : weights) {
    // A named reference, not a structured binding: C++17 lambdas may not capture bindings.
    AwqMatrix& m = entry.second;
    const auto cs = col_scale.find(input_of(entry.first));
    const auto rd = row_div.find(entry.first);
    pool.parallel_for(m.rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* w = m.w.data() + r * m.cols;
        if (cs != col_scale.end())
          for (int64_t c = 0; c < m.cols; ++c) w[c] *= cs->second[static_cast<size_t>(c)];
        if (rd != row_div.end()) {
          const float d = rd->second[static_cast<size_t>(r)];
          for (int64_t c = 0; c < m.cols; ++c) w[c] /= d;
        }
      }
    });
  }
  // Clip search against each input's Hessian with its factors folded in, then packing.
  std::map<In, std::vector<float>> scaled_h;
  std::map<std::string, AwqTensors> out;
  for (const std::string& p : awq_layer_products()) {
    const AwqMatrix& m = weights[p];
    const In in = input_of(p);
    std::vector<float> clip;
    if (clipped(p)) {
      auto h = scaled_h.find(in);
      if (h == scaled_h.end()) {
        const auto cs = col_scale.find(in);
        h = scaled_h
                .emplace(in, cs == col_scale.end()
                                 ? hessian.sum_xxt(layer, in)
                                 : awq_scale_hessian(hessian.sum_xxt(layer, in), cs->second))
                .first;
      }
      auto c = awq_search_clip(m.w.data(), m.rows, m.cols, h->second, group, pool);
      if (!c) return c.status().with_context("'" + where + p + "'");
      clip = std::move(c).value();
    }
    out[p] =
        awq_pack(m.w.data(), m.rows, m.cols, group, clip.empty() ? nullptr : clip.data(), pool);
  }
  return out;
}

AwqFolderQuantizer::AwqFolderQuantizer(Loader load, const HessianCollector& hessian,
                                       const ChannelMaxCollector& act, int64_t group,
                                       ThreadPool& pool)
    : load_(std::move(load)), hessian_(hessian), act_(act), group_(group), pool_(pool) {}

bool AwqFolderQuantizer::may_divide(const std::string& tensor_name) {
  std::string rest;
  if (split_layer(tensor_name, &rest) < 0) return false;
  return rest == "input_layernorm.weight" || rest == "post_attention_layernorm.weight" ||
         rest == "self_attn.v_proj.bias";
}

Result<AwqFolderQuantizer::LayerResult*> AwqFolderQuantizer::layer(int l) {
  if (auto it = done_.find(l); it != done_.end()) return &it->second;
  std::map<std::string, AwqMatrix> weights;
  const std::string where = kLayerPrefix + std::to_string(l) + ".";
  for (const std::string& p : awq_layer_products()) {
    PAGODA_ASSIGN_OR_RETURN(weights[p], load_(where + p + ".weight"));
  }
  LayerResult r;
  AwqLayerReport rep;
  PAGODA_ASSIGN_OR_RETURN(
      r.packed, awq_quantize_layer(l, weights, hessian_, act_, group_, pool_, &r.divide, &rep));
  reports_.push_back(std::move(rep));
  return &done_.emplace(l, std::move(r)).first->second;
}

Result<AwqTensors> AwqFolderQuantizer::take_linear(const std::string& weight_name) {
  std::string rest;
  const int l = split_layer(weight_name, &rest);
  const std::string product = rest.size() > 7 ? rest.substr(0, rest.size() - 7) : "";
  if (l < 0 || rest.compare(product.size(), std::string::npos, ".weight") != 0)
    return internal_error("'" + weight_name + "' is not a decoder layer's weight");
  PAGODA_ASSIGN_OR_RETURN(LayerResult * r, layer(l));
  const auto it = r->packed.find(product);
  if (it == r->packed.end())
    return unsupported("'" + weight_name + "' is not one of the products awq quantizes (" +
                       "q/k/v/o_proj, gate/up/down_proj)");
  AwqTensors t = std::move(it->second);
  r->packed.erase(it);
  if (r->packed.empty() && r->divide.empty()) done_.erase(l);
  return t;
}

Result<std::vector<float>> AwqFolderQuantizer::take_divisors(const std::string& tensor_name) {
  std::string rest;
  const int l = split_layer(tensor_name, &rest);
  if (l < 0) return std::vector<float>{};
  PAGODA_ASSIGN_OR_RETURN(LayerResult * r, layer(l));
  std::vector<float> d;
  if (const auto it = r->divide.find(rest); it != r->divide.end()) {
    d = std::move(it->second);
    r->divide.erase(it);
  }
  if (r->packed.empty() && r->divide.empty()) done_.erase(l);
  return d;
}

}  // namespace pagoda
