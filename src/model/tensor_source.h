// Where a model's configuration and weights come from, as every loader takes them (the
// CPU Model, the CUDA model, the memory ledger): a GGUF file, or a Hugging Face checkpoint
// folder (config.json + model.safetensors or its shards, model/hf_checkpoint.h). Tensors
// are found by the GGUF names the architecture files use (arch/arch.h); a checkpoint's
// names are mapped onto them when it is opened, so each backend's loader is written once.
//
// Shapes follow GGUF: ne[0] is the row length. A safetensors [out, in] matrix is the same
// bytes with ne = {in, out}.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace pagoda {

struct WeightTensor {
  std::string name;       // as the loaders ask for it (GGUF's naming)
  std::string file_name;  // as the file names it (a checkpoint's own name), for messages
  DType type = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};   // ne[0] is the contiguous (row) dimension
  uint64_t size = 0;              // bytes
  const uint8_t* data = nullptr;  // in the source's mapping (or memory the source owns)
  uint32_t part = 0;              // which of the source's files holds it
  uint64_t offset = 0;            // of the bytes within that file
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// "[ne0, ne1, ...]" over the tensor's dimensions, for messages.
std::string tensor_shape(const WeightTensor& t);

// Calibrated FP8 KV-cache scales, one for K and one for V a layer (real value = stored
// value x scale), as a checkpoint carries them (compressed-tensors kv_cache_scheme:
// model.layers.N.self_attn.k_scale / v_scale); empty without.
struct KvCacheScales {
  std::vector<float> k, v;
  bool empty() const { return k.empty(); }
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  // The file or folder it was opened from.
  const std::string& path() const { return path_; }
  // "gguf" or "safetensors".
  virtual std::string_view format() const = 0;
  // The GGUF file behind it (metadata, vocabulary), or null for a checkpoint folder.
  virtual const GgufFile* gguf() const { return nullptr; }
  // The model's configuration and layer recipe (arch/): from the GGUF metadata, or from
  // config.json.
  virtual Result<ModelConfig> model_config() const = 0;

  const std::vector<WeightTensor>& tensors() const { return tensors_; }
  const WeightTensor* find_tensor(std::string_view name) const;
  // The tensor `name` with exactly `shape` (ne[0] first; missing dimensions are 1):
  // not_found without it, corrupt with another shape.
  Result<const WeightTensor*> find_tensor(const std::string& name,
                                          const std::vector<int64_t>& shape) const;
  // The tensor's bytes. A tensor the source converts at load (a compressed-tensors
  // layer, model/compressed_tensors.h) has no data until asked for: it is converted then
  // and kept until release_tensor, so the host holds about one converted tensor at a time.
  const uint8_t* tensor_data(const WeightTensor& t) const {
    return t.data != nullptr ? t.data : materialize(t);
  }

  // Gives back the resident pages of a tensor once it has been copied, so a model is never
  // resident twice while it loads; release_tensor_data does it for every tensor.
  virtual void release_tensor(const WeightTensor& t) const = 0;
  virtual void release_tensor_data() const = 0;

  const KvCacheScales& kv_cache_scales() const { return kv_scales_; }

 protected:
  explicit TensorSource(std::string path) : path_(std::move(path)) {}
  // corrupt when the name is taken.
  Status add_tensor(WeightTensor t);
  // The bytes of a tensor added without data (converted on demand); null by default.
  virtual const uint8_t* materialize(const WeightTensor& /*t*/) const { return nullptr; }

  KvCacheScales kv_scales_;

 private:
  std::string path_;
  std::vector<WeightTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// A view of an opened GGUF file, which the caller keeps alive.
Result<std::unique_ptr<TensorSource>> gguf_tensor_source(const GgufFile& file);
// Opens a model as the user names it: a directory is a Hugging Face checkpoint folder,
// anything else a GGUF file (which the source then owns).
Result<std::unique_ptr<TensorSource>> open_tensor_source(const std::string& path);
// Whether `path` names a directory (a checkpoint folder rather than a GGUF file).
bool is_model_folder(const std::string& path);

// The configuration every backend and the ledger take (TensorSource::model_config).
inline Result<ModelConfig> read_model_config(const TensorSource& source) {
  return source.model_config();
}

}  // namespace pagoda
