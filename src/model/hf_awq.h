// AWQ (model/awq.h) over the decoder layers of a Llama-family checkpoint, for
// `pagoda quantize FOLDER OUT awq`. Per layer, as AutoAWQ's Llama recipe:
//
//   products                 their input      the scale is folded into
//   q_proj, k_proj, v_proj   kQkv             input_layernorm's weight (divided)
//   o_proj                   kWo              v_proj's output rows (and bias), only when
//                                             v_proj's outputs are o_proj's inputs (no
//                                             grouped-query attention); else no scale
//   gate_proj, up_proj       kGateUp          post_attention_layernorm's weight
//   down_proj                kDown            up_proj's output rows
//
// Every scale is searched on the 16-bit weights, then all are applied; then the clip
// search runs on each scaled product but q_proj and k_proj (AutoAWQ skips them: the
// query-key product makes their error hard to measure), against its input's Hessian
// with the scale folded in; then each product is quantized and packed. The statistics
// come from one calibration run of the 16-bit model (model/hessian.h, model/channel_max.h),
// as AutoAWQ's inputs, which it takes from the layers before quantizing them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/awq.h"
#include "model/channel_max.h"
#include "model/hessian.h"

namespace pagoda {

// A weight as floats, row-major [rows, cols] (an HF nn.Linear: [out, in]).
struct AwqMatrix {
  std::vector<float> w;
  int64_t rows = 0, cols = 0;
};

// The seven products of a decoder layer, as module names under "model.layers.N.".
const std::vector<std::string>& awq_layer_products();

// The group-size check that precedes any work: every product's input size a multiple of
// `group` and its output size of 8 (AWQ's words), given the decoder linears' names and
// [rows, cols]. The error names the first layer that fails and suggests a group size that
// divides every layer.
Status awq_check_shapes(const std::vector<std::pair<std::string, std::vector<int64_t>>>& linears,
                        int64_t group);

// What one layer's search found, for the report.
struct AwqLayerReport {
  // Per scale group ("qkv", "o", "gate_up", "down"): the chosen alpha and the group's
  // output error with it and with round-to-nearest (alpha 0), before clipping.
  std::vector<std::string> groups;
  std::vector<double> alpha, error, error_rtn;
};

// Runs the searches layer by layer as the writer asks for a layer's tensors, keeping each
// layer's results until they are taken.
class AwqFolderQuantizer {
 public:
  // Reads a 2-D weight of the input folder by tensor name.
  using Loader = std::function<Result<AwqMatrix>(const std::string& name)>;
  AwqFolderQuantizer(Loader load, const HessianCollector& hessian, const ChannelMaxCollector& act,
                     int64_t group, ThreadPool& pool);

  // The AWQ tensors of "model.layers.N.<product>.weight".
  Result<AwqTensors> take_linear(const std::string& weight_name);
  // The divisors for "model.layers.N.input_layernorm.weight",
  // "...post_attention_layernorm.weight" or "...self_attn.v_proj.bias" (empty: unchanged).
  Result<std::vector<float>> take_divisors(const std::string& tensor_name);
  // Whether take_divisors may change the tensor (it is one of those three names).
  static bool may_divide(const std::string& tensor_name);

  const std::vector<AwqLayerReport>& reports() const { return reports_; }

 private:
  struct LayerResult {
    std::map<std::string, AwqTensors> packed;          // by product
    std::map<std::string, std::vector<float>> divide;  // by tensor name under the layer
  };
  Result<LayerResult*> layer(int l);

  Loader load_;
  const HessianCollector& hessian_;
  const ChannelMaxCollector& act_;
  int64_t group_;
  ThreadPool& pool_;
  std::map<int, LayerResult> done_;
  std::vector<AwqLayerReport> reports_;
};

// One layer through the recipe above: `weights` maps each of awq_layer_products() to its
// weight (scaled in place). Exposed for tests.
Result<std::map<std::string, AwqTensors>> awq_quantize_layer(
    int layer, std::map<std::string, AwqMatrix>& weights, const HessianCollector& hessian,
    const ChannelMaxCollector& act, int64_t group, ThreadPool& pool,
    std::map<std::string, std::vector<float>>* divide, AwqLayerReport* report);

}  // namespace pagoda
