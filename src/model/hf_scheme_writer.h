// The parts of quantize_hf_folder (model/hf_quantize.h) that differ by scheme. The
// driver walks the input folder's tensors in order and asks the scheme's writer what each
// becomes in the output folder: a decoder linear becomes the scheme's tensors (weight and
// scales, or qweight/qzeros/scales/g_idx, ...), anything else is copied unless the scheme
// rewrites it (smoothquant and awq fold factors into the norms). Each writer lives in its
// own file: hf_write_ct.cpp (fp8, smoothquant), hf_write_gptq.cpp, hf_write_awq.cpp,
// hf_write_nf4.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/hf_quantize.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace pagoda {

using ojson = nlohmann::ordered_json;

// An input tensor and the shard that holds it.
struct HfSource {
  const SafetensorsFile* shard = nullptr;
  const SafetensorsTensor* t = nullptr;
  const uint8_t* data() const { return shard->tensor_data(*t); }
};

// One tensor of the output folder. `fill` runs once, in output order, when the writer
// reaches the tensor; it may compute state that the next tensors of the same input share
// (captured by their fills), which is freed when the last of those fills has run. The
// driver releases `src` (if any) after the last output tensor made from it.
struct HfOutTensor {
  SafetensorsSpec spec;
  std::function<Status(std::vector<uint8_t>*)> fill;
  const HfSource* src = nullptr;
};

// The input folder as the writers see it.
struct HfInput {
  std::vector<HfSource> order;  // every tensor, shard by shard, as stored
  std::map<std::string, HfSource> by_name;
};

class HfSchemeWriter {
 public:
  virtual ~HfSchemeWriter() = default;
  // config.json's quantization_config; `model_config` is the input's config.json.
  virtual ojson quantization_config(const ojson& model_config) const = 0;
  // The output tensors of a decoder linear (a 2-D F32/F16/BF16 "..._proj.weight").
  virtual Status add_linear(const HfSource& src, std::vector<HfOutTensor>* out) = 0;
  // The output tensors of any other tensor: by default a copy.
  virtual Status add_other(const HfSource& src, std::vector<HfOutTensor>* out);
  // Tensors after all the input's (fp8/smoothquant: the KV-cache scales).
  virtual Status finish(std::vector<HfOutTensor>* out) { return Status::ok(); }
  // A line on what the scheme chose (awq's searches), or empty; after the folder is written.
  virtual std::string note() const { return {}; }
};

// The writers, one per scheme; each checks the options it needs.
Result<std::unique_ptr<HfSchemeWriter>> make_compressed_tensors_writer(
    const HfQuantizeOptions& o, const HfInput& in, ThreadPool& pool);  // fp8, smoothquant
Result<std::unique_ptr<HfSchemeWriter>> make_gptq_writer(const HfQuantizeOptions& o,
                                                         ThreadPool& pool);
Result<std::unique_ptr<HfSchemeWriter>> make_awq_writer(const HfQuantizeOptions& o,
                                                        const HfInput& in, ThreadPool& pool);
Result<std::unique_ptr<HfSchemeWriter>> make_nf4_writer(const HfQuantizeOptions& o,
                                                        ThreadPool& pool);

// What awq can check of the input before a calibration run (hf_quantize_check).
Status check_awq_input(const HfInput& in, int64_t group);

// --- helpers the writers share (hf_scheme_writer.cpp) ---

// The decoder's linear layers, the ones the schemes quantize (vLLM's and transformers'
// "Linear" targets less lm_head, which stays 16-bit as llm-compressor leaves it).
bool is_decoder_linear(const SafetensorsTensor& t);
bool is_float(const SafetensorsTensor& t);  // F32, F16 or BF16
// Row r of a 2-D F32/F16/BF16 tensor as floats.
void load_row(const SafetensorsTensor& t, const uint8_t* data, int64_t r, int64_t cols, float* out);
// A whole 2-D F32/F16/BF16 tensor as row-major floats.
std::vector<float> load_matrix(const HfSource& src, ThreadPool& pool);
// A 1-D norm weight (or bias) divided elementwise by `s`, in its own dtype.
void divided_vector(const SafetensorsTensor& t, const uint8_t* data, const std::vector<float>& s,
                    std::vector<uint8_t>* bytes);
// The input a decoder linear layer reads, and so its calibration statistics.
ActivationObserver::Input linear_input(const std::string& name);
int layer_of(const std::string& name);  // "model.layers.N...." -> N
// A tensor's bytes as they are.
HfOutTensor copied(const HfSource& src);

template <typename T>
void put(const std::vector<T>& v, std::vector<uint8_t>* bytes) {
  bytes->resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(bytes->data(), v.data(), bytes->size());
}

}  // namespace pagoda
