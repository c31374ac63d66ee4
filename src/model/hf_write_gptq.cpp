// gptq: the GPTQ checkpoint format (v1) as GPTQModel writes it (model/hf_quantize.h).
#include <memory>

#include "model/gptq.h"
#include "model/hf_scheme_writer.h"

namespace pagoda {
namespace {

// GPTQ's quantization_config as GPTQModel writes it (the keys transformers' GPTQConfig and
// vLLM's GPTQConfig read; v1 "gptq" checkpoint format, int32 words).
ojson gptq_config(const GptqOptions& o) {
  ojson qc;
  qc["quant_method"] = "gptq";
  qc["bits"] = o.bits;
  qc["group_size"] = o.group_size;
  qc["desc_act"] = o.act_order;
  qc["sym"] = o.sym;
  qc["lm_head"] = false;
  qc["damp_percent"] = o.damp;
  qc["static_groups"] = o.static_groups;
  qc["true_sequential"] = false;
  qc["checkpoint_format"] = "gptq";
  qc["pack_dtype"] = "int32";
  qc["meta"] = {{"quantizer", {"pagoda"}}};
  return qc;
}

// One weight through GPTQ.
Result<GptqTensors> gptq_weight(const HfSource& src, const HessianCollector& hc,
                                const GptqOptions& o, ThreadPool& pool) {
  const SafetensorsTensor& t = *src.t;
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int layer = layer_of(t.name);
  const ActivationObserver::Input in = linear_input(t.name);
  if (layer < 0 || layer >= hc.n_layers() || hc.cols(layer, in) != cols)
    return internal_error("the calibration run saw no input of '" + t.name + "'");
  auto q = gptq_quantize(load_matrix(src, pool), rows, cols, hc.sum_xxt(layer, in), o, pool);
  if (!q) return q.status().with_context("'" + t.name + "'");
  return q;
}

class GptqWriter : public HfSchemeWriter {
 public:
  GptqWriter(const HfQuantizeOptions& o, ThreadPool& pool)
      : o_(o.gptq), hessian_(*o.hessian), pool_(pool) {}

  ojson quantization_config(const ojson&) const override { return gptq_config(o_); }

  Status add_linear(const HfSource& src, std::vector<HfOutTensor>* out) override {
    const SafetensorsTensor& t = *src.t;
    const std::string base = t.name.substr(0, t.name.size() - 7);  // less ".weight"
    const int64_t rows = t.shape[0], cols = t.shape[1], pack = 32 / o_.bits;
    const int64_t g = o_.group_size <= 0 || o_.group_size >= cols ? cols : o_.group_size;
    const int64_t groups = (cols + g - 1) / g;
    if (rows % pack != 0 || cols % pack != 0)
      return unsupported("'" + t.name + "' is not whole int32 words of " + std::to_string(o_.bits) +
                         "-bit weights");
    // qweight's fill runs GPTQ; the other three write what it kept.
    auto q = std::make_shared<GptqTensors>();
    out->push_back({{base + ".qweight", "I32", {cols / pack, rows}},
                    [this, src, q](std::vector<uint8_t>* bytes) -> Status {
                      PAGODA_ASSIGN_OR_RETURN(*q, gptq_weight(src, hessian_, o_, pool_));
                      put(q->qweight, bytes);
                      return Status::ok();
                    }});
    out->push_back(
        {{base + ".qzeros", "I32", {groups, rows / pack}}, [q](std::vector<uint8_t>* bytes) {
           put(q->qzeros, bytes);
           return Status::ok();
         }});
    out->push_back({{base + ".scales", "F16", {groups, rows}}, [q](std::vector<uint8_t>* bytes) {
                      put(q->scales, bytes);
                      return Status::ok();
                    }});
    out->push_back({{base + ".g_idx", "I32", {cols}}, [q](std::vector<uint8_t>* bytes) {
                      put(q->g_idx, bytes);
                      return Status::ok();
                    }});
    return Status::ok();
  }

 private:
  const GptqOptions o_;
  const HessianCollector& hessian_;
  ThreadPool& pool_;
};

}  // namespace

Result<std::unique_ptr<HfSchemeWriter>> make_gptq_writer(const HfQuantizeOptions& o,
                                                         ThreadPool& pool) {
  if (o.hessian == nullptr) return internal_error("gptq needs the calibration run's statistics");
  return std::unique_ptr<HfSchemeWriter>(std::make_unique<GptqWriter>(o, pool));
}

}  // namespace pagoda
