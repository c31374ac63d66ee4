// awq: the AWQ GEMM format AutoAWQ writes, after AWQ's searches (model/hf_awq.h).
#include <algorithm>
#include <map>
#include <memory>

#include "model/hf_awq.h"
#include "model/hf_scheme_writer.h"

namespace pagoda {
namespace {

// AWQ's quantization_config as AutoAWQ writes it (the keys transformers' AwqConfig and
// vLLM's AWQConfig read).
ojson awq_config(int64_t group) {
  ojson qc;
  qc["quant_method"] = "awq";
  qc["zero_point"] = true;
  qc["group_size"] = group;
  qc["bits"] = 4;
  qc["version"] = "gemm";
  qc["modules_to_not_convert"] = nullptr;
  return qc;
}

// A line on what the AWQ searches chose.
std::string awq_note(const std::vector<AwqLayerReport>& reports) {
  std::map<std::string, std::pair<double, int>> alpha;
  double err = 0, rtn = 0;
  for (const AwqLayerReport& r : reports)
    for (size_t i = 0; i < r.groups.size(); ++i) {
      alpha[r.groups[i]].first += r.alpha[i];
      ++alpha[r.groups[i]].second;
      err += r.error[i] / std::max(r.error_rtn[i], 1e-30);
      rtn += 1;
    }
  std::string s = "awq: mean alpha";
  for (const char* g : {"qkv", "o", "gate_up", "down"})
    if (const auto it = alpha.find(g); it != alpha.end())
      s += str_format(" %s %.2f", g, it->second.first / it->second.second);
  if (rtn > 0)
    s += str_format(
        "; scaled output error %.2fx round-to-nearest's (mean over products, "
        "before clipping)",
        err / rtn);
  return s;
}

class AwqWriter : public HfSchemeWriter {
 public:
  AwqWriter(const HfQuantizeOptions& o, const HfInput& in, ThreadPool& pool)
      : group_(o.awq_group_size),
        q_(
            [&in, &pool](const std::string& name) -> Result<AwqMatrix> {
              const auto it = in.by_name.find(name);
              if (it == in.by_name.end() || !is_decoder_linear(*it->second.t))
                return unsupported("awq needs '" + name + "' (a Llama-family decoder layer)");
              AwqMatrix m;
              m.rows = it->second.t->shape[0];
              m.cols = it->second.t->shape[1];
              m.w = load_matrix(it->second, pool);
              return m;
            },
            *o.hessian, *o.act_max, o.awq_group_size, pool) {}

  ojson quantization_config(const ojson&) const override { return awq_config(group_); }

  Status add_linear(const HfSource& src, std::vector<HfOutTensor>* out) override {
    const SafetensorsTensor& t = *src.t;
    const std::string base = t.name.substr(0, t.name.size() - 7);  // less ".weight"
    const int64_t rows = t.shape[0], cols = t.shape[1], g = group_;
    // qweight's fill takes the layer's result (running the layer's searches the first
    // time one of its tensors is asked for); qzeros and scales write what it kept.
    auto q = std::make_shared<AwqTensors>();
    const std::string name = t.name;
    out->push_back({{base + ".qweight", "I32", {cols, rows / 8}},
                    [this, q, name](std::vector<uint8_t>* bytes) -> Status {
                      PAGODA_ASSIGN_OR_RETURN(*q, q_.take_linear(name));
                      put(q->qweight, bytes);
                      return Status::ok();
                    }});
    out->push_back(
        {{base + ".qzeros", "I32", {cols / g, rows / 8}}, [q](std::vector<uint8_t>* bytes) {
           put(q->qzeros, bytes);
           return Status::ok();
         }});
    out->push_back({{base + ".scales", "F16", {cols / g, rows}}, [q](std::vector<uint8_t>* bytes) {
                      put(q->scales, bytes);
                      return Status::ok();
                    }});
    return Status::ok();
  }

  // The norms (and v_proj's bias) before each product take the inverse of its scales.
  Status add_other(const HfSource& src, std::vector<HfOutTensor>* out) override {
    const SafetensorsTensor& t = *src.t;
    if (!AwqFolderQuantizer::may_divide(t.name)) return HfSchemeWriter::add_other(src, out);
    if (!is_float(t) || t.shape.size() != 1)
      return unsupported("awq folds its scales into '" + t.name +
                         "', which is not a 1-D F32, F16 or BF16 tensor");
    out->push_back({{t.name, t.dtype, t.shape}, [this, src](std::vector<uint8_t>* bytes) -> Status {
                      PAGODA_ASSIGN_OR_RETURN(const std::vector<float> d,
                                              q_.take_divisors(src.t->name));
                      const uint8_t* data = src.data();
                      if (d.empty())
                        bytes->assign(data, data + (src.t->end - src.t->begin));
                      else
                        divided_vector(*src.t, data, d, bytes);
                      return Status::ok();
                    }});
    return Status::ok();
  }

  std::string note() const override { return awq_note(q_.reports()); }

 private:
  const int64_t group_;
  AwqFolderQuantizer q_;
};

}  // namespace

Status check_awq_input(const HfInput& in, int64_t group) {
  if (group <= 0 || group % 32 != 0)
    return invalid_argument(str_format(
        "awq group size %lld: a positive multiple of 32 (whole 32-weight blocks, which Pagoda "
        "loads exactly)",
        static_cast<long long>(group)));
  std::vector<std::pair<std::string, std::vector<int64_t>>> linears;
  for (const HfSource& s : in.order)
    if (is_decoder_linear(*s.t)) linears.emplace_back(s.t->name, s.t->shape);
  return awq_check_shapes(linears, group);
}

Result<std::unique_ptr<HfSchemeWriter>> make_awq_writer(const HfQuantizeOptions& o,
                                                        const HfInput& in, ThreadPool& pool) {
  if (o.hessian == nullptr || o.act_max == nullptr)
    return internal_error("awq needs the calibration run's statistics");
  PAGODA_RETURN_IF_ERROR(check_awq_input(in, o.awq_group_size));
  return std::unique_ptr<HfSchemeWriter>(std::make_unique<AwqWriter>(o, in, pool));
}

}  // namespace pagoda
