// nf4: bitsandbytes' 4-bit NF4 as transformers saves a BitsAndBytesConfig model
// (model/hf_quantize.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "backend/cpu/quant_blocks.h"
#include "model/bnb_double_quant.h"
#include "model/hf_scheme_writer.h"

namespace pagoda {
namespace {

// Blocks of 64 weights of the flattened matrix, absmax per block in f32, each weight the
// nearest of NF4's 16 code values times absmax, two codes a byte with the first in the
// high nibble; with double quantization the absmax values in turn as bytes
// (model/bnb_double_quant.h).
constexpr int64_t kNf4Block = 64;

struct Nf4Tensors {
  std::vector<uint8_t> packed;  // n / 2 bytes
  std::vector<float> absmax;    // one per started block
  BnbNestedAbsmax nested;       // double quantization: absmax as codes (else empty)
};

// Block b of the flattened weights w (n of them) into q's absmax and codes; a block
// holding an infinite or NaN weight gets a NaN absmax (which nf4_weight refuses).
void nf4_block(const float* w, int64_t b, int64_t n, Nf4Tensors* q) {
  const int64_t e0 = b * kNf4Block, e1 = std::min(n, e0 + kNf4Block);
  float amax = 0;
  bool finite = true;
  for (int64_t e = e0; e < e1; ++e) {
    amax = std::fmax(amax, std::fabs(w[e]));  // (fmax passes NaN over)
    finite = finite && std::isfinite(w[e]);
  }
  q->absmax[b] = finite ? amax : std::nanf("");
  if (!finite) return;
  const float inv = amax > 0 ? 1.0f / amax : 0.0f;
  for (int64_t e = e0; e < e1; ++e) {
    const float x = w[e] * inv;
    int best = 0;
    for (int c = 1; c < 16; ++c)
      if (std::fabs(x - cpu::kNf4Code[c]) < std::fabs(x - cpu::kNf4Code[best])) best = c;
    q->packed[e / 2] |= static_cast<uint8_t>((e & 1) != 0 ? best : best << 4);
  }
}

Result<Nf4Tensors> nf4_weight(const HfSource& src, bool double_quant, ThreadPool& pool) {
  const SafetensorsTensor& t = *src.t;
  const int64_t n = t.shape[0] * t.shape[1];
  const std::vector<float> w = load_matrix(src, pool);
  Nf4Tensors q;
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  q.absmax.resize(static_cast<size_t>(blocks));
  q.packed.assign(static_cast<size_t>(n / 2), 0);
  // Blocks start at even elements, so no byte of `packed` is shared between two of them.
  pool.parallel_for(blocks, 256, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) nf4_block(w.data(), b, n, &q);
  });
  for (size_t b = 0; b < q.absmax.size(); ++b)
    if (!std::isfinite(q.absmax[b]))
      return invalid_argument("'" + t.name +
                              "' holds an infinite or NaN weight (NF4 has no code for it)");
  if (double_quant) q.nested = bnb_double_quantize(q.absmax, pool);
  return q;
}

// The quant_state JSON bitsandbytes keeps beside each weight (stored as uint8 bytes).
// With double quantization its last field, nested_offset, is known only once the weight
// is quantized: this text then stops after `"nested_offset":` and nf4_state_end completes
// it in a fixed width, so that the tensor's size is known before.
std::string nf4_quant_state(const SafetensorsTensor& t, bool double_quant) {
  ojson qs;
  qs["quant_type"] = "nf4";
  qs["blocksize"] = kNf4Block;
  qs["dtype"] = t.dtype == "F32" ? "float32" : t.dtype == "F16" ? "float16" : "bfloat16";
  qs["shape"] = t.shape;
  if (!double_quant) return qs.dump();
  qs["nested_blocksize"] = kBnbNestedBlock;
  qs["nested_dtype"] = "float32";  // the absmax values' dtype (bitsandbytes keeps them f32)
  std::string text = qs.dump();
  text.pop_back();  // the closing brace
  return text + ",\"nested_offset\":";
}

// The offset as 17 significant digits (the double it widens to, exactly) and the closing
// brace: 23 characters for any finite offset >= 0, which a mean of absmax values is.
constexpr size_t kNf4StateEnd = 23;

std::string nf4_state_end(float offset) {
  return str_format("%.16e}", static_cast<double>(offset));
}

ojson nf4_config(const std::string& compute_dtype, bool double_quant) {
  ojson qc;
  qc["quant_method"] = "bitsandbytes";
  qc["load_in_4bit"] = true;
  qc["load_in_8bit"] = false;
  qc["_load_in_4bit"] = true;
  qc["_load_in_8bit"] = false;
  qc["bnb_4bit_quant_type"] = "nf4";
  qc["bnb_4bit_use_double_quant"] = double_quant;
  qc["bnb_4bit_compute_dtype"] = compute_dtype;
  qc["bnb_4bit_quant_storage"] = "uint8";
  qc["llm_int8_skip_modules"] = {"lm_head"};
  qc["llm_int8_threshold"] = 6.0;
  qc["llm_int8_has_fp16_weight"] = false;
  qc["llm_int8_enable_fp32_cpu_offload"] = false;
  return qc;
}

class Nf4Writer : public HfSchemeWriter {
 public:
  Nf4Writer(bool double_quant, ThreadPool& pool) : dq_(double_quant), pool_(pool) {}

  ojson quantization_config(const ojson& model_config) const override {
    return nf4_config(model_config.value("torch_dtype", "bfloat16"), dq_);
  }

  Status add_linear(const HfSource& src, std::vector<HfOutTensor>* out) override {
    const SafetensorsTensor& t = *src.t;
    const int64_t n = t.shape[0] * t.shape[1];
    if (n % 2 != 0)
      return unsupported("'" + t.name + "' holds an odd number of weights (NF4 packs two a byte)");
    const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
    // The weight's fill quantizes; absmax (and the nested tensors, and the state's
    // nested_offset) write what it kept.
    auto q = std::make_shared<Nf4Tensors>();
    const bool dq = dq_;
    out->push_back(
        {{t.name, "U8", {n / 2, 1}}, [this, src, q](std::vector<uint8_t>* bytes) -> Status {
           PAGODA_ASSIGN_OR_RETURN(*q, nf4_weight(src, dq_, pool_));
           put(q->packed, bytes);
           return Status::ok();
         }});
    out->push_back(
        {{t.name + ".absmax", dq ? "U8" : "F32", {blocks}}, [q, dq](std::vector<uint8_t>* bytes) {
           if (dq)
             put(q->nested.codes, bytes);
           else
             put(q->absmax, bytes);
           return Status::ok();
         }});
    out->push_back({{t.name + ".quant_map", "F32", {16}}, [](std::vector<uint8_t>* bytes) {
                      bytes->resize(sizeof cpu::kNf4Code);
                      std::memcpy(bytes->data(), cpu::kNf4Code, bytes->size());
                      return Status::ok();
                    }});
    if (dq) {
      out->push_back(
          {{t.name + ".nested_absmax", "F32", {(blocks + kBnbNestedBlock - 1) / kBnbNestedBlock}},
           [q](std::vector<uint8_t>* bytes) {
             put(q->nested.absmax, bytes);
             return Status::ok();
           }});
      out->push_back(
          {{t.name + ".nested_quant_map", "F32", {256}}, [](std::vector<uint8_t>* bytes) {
             const std::array<float, 256>& map = bnb_dynamic_map();
             put(std::vector<float>(map.begin(), map.end()), bytes);
             return Status::ok();
           }});
    }
    std::string state = nf4_quant_state(t, dq);
    const size_t size = state.size() + (dq ? kNf4StateEnd : 0);
    const std::string name = t.name;
    out->push_back({{t.name + ".quant_state.bitsandbytes__nf4", "U8", {static_cast<int64_t>(size)}},
                    [q, dq, name, state = std::move(state)](std::vector<uint8_t>* bytes) -> Status {
                      bytes->assign(state.begin(), state.end());
                      if (dq) {
                        const std::string end = nf4_state_end(q->nested.offset);
                        if (end.size() != kNf4StateEnd)
                          return internal_error("nested_offset '" + end + "' of '" + name +
                                                "' is not the width its quant_state was sized for");
                        bytes->insert(bytes->end(), end.begin(), end.end());
                      }
                      return Status::ok();
                    }});
    return Status::ok();
  }

 private:
  const bool dq_;
  ThreadPool& pool_;
};

}  // namespace

Result<std::unique_ptr<HfSchemeWriter>> make_nf4_writer(const HfQuantizeOptions& o,
                                                        ThreadPool& pool) {
  return std::unique_ptr<HfSchemeWriter>(std::make_unique<Nf4Writer>(o.nf4_double_quant, pool));
}

}  // namespace pagoda
