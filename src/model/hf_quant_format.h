// The quantized-checkpoint formats a Hugging Face folder's config.json names in
// quantization_config.quant_method, as model/hf_checkpoint.cpp sees them: which tensors
// belong to a quantized layer, and how a layer's tensors become one matrix of a block
// type the backends multiply. Each format lives in its own file (compressed_tensors.cpp,
// awq_gptq.cpp, bnb_nf4.cpp, fp8_checkpoint.cpp: "compressed-tensors", "awq" and "gptq",
// "bitsandbytes", "fp8") and is chosen by open_hf_quant_format; a method none of them reads
// is refused there by name.
//
// The checkpoint holds every tensor of a quantized layer without reading it, asks the
// format to check the layer once all shards are open, and converts the layer when a
// loader asks for the matrix (so the host holds about one converted matrix at a time).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/safetensors.h"

namespace pagoda {

// One tensor of a quantized layer in its shard.
struct QuantPiece {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensor* tensor = nullptr;
  uint32_t part = 0;  // the shard's index
  const uint8_t* data() const { return file->tensor_data(*tensor); }
};

// A quantized layer, checked: rows x cols of `type` once converted.
class QuantLayer {
 public:
  virtual ~QuantLayer() = default;
  // rows x row_bytes(type, cols) bytes.
  virtual std::vector<uint8_t> convert() const = 0;

  std::string module;  // "model.layers.0.mlp.up_proj"
  int64_t rows = 0, cols = 0;
  DType type = DType::kBF16;
  std::vector<QuantPiece> all;  // every tensor of the layer (to release its pages)
};

class HfQuantFormat {
 public:
  virtual ~HfQuantFormat() = default;
  // "compressed-tensors", "awq"... for messages.
  virtual std::string_view method() const = 0;
  // Whether the checkpoint carries FP8 KV-cache scales (model.layers.N.self_attn.k_scale
  // and v_scale, one float each), which the reader then requires for every layer.
  virtual bool kv_cache_scales() const { return false; }
  // The checkpoint name split into module and parameter ("model.layers.0.mlp.up_proj",
  // "weight_scale"); by default at the last dot.
  virtual std::pair<std::string, std::string> split(const std::string& name) const;
  // Whether module.param is a tensor of a quantized layer, to hold for make_layer.
  // `known`: module.weight is a matrix Pagoda places; `linear`: it is an nn.Linear. A
  // false answer leaves the tensor to the 16-bit reader (which refuses what it cannot
  // place).
  virtual Result<bool> holds(const std::string& module, const std::string& param, bool known,
                             bool linear) const = 0;
  // The layer from every tensor held for it (param -> piece), checked: dtypes, shapes,
  // a place for each one; an error when the config leaves the module unquantized.
  virtual Result<std::unique_ptr<QuantLayer>> make_layer(
      const std::string& module, const std::map<std::string, QuantPiece>& params,
      bool linear) const = 0;
};

// The format quantization_config (JSON text) names, with its options checked; what it
// does not support refused by name.
Result<std::unique_ptr<HfQuantFormat>> open_hf_quant_format(std::string_view json_text);

// For the formats' messages: 'module.param'.
std::string quant_piece_name(const std::string& module, std::string_view param);
// Element i of a F32, F16 or BF16 piece as a float (the caller checked the dtype).
float quant_float_at(const QuantPiece& p, int64_t i);
// Element i of an I32 or I64 piece (the caller checked the dtype).
int64_t quant_int_at(const QuantPiece& p, int64_t i);

}  // namespace pagoda
