// Where a model's shape and weight sizes come from: a GGUF file (exact tensor sizes), a
// Hugging Face config.json or checkpoint folder (the index's total_size, or the
// safetensors header), or the built-in catalog of published configurations.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ledger/model_shape.h"
#include "model/gguf.h"
#include "model/tensor_source.h"

namespace pagoda::ledger {

// Which pipeline stage holds a tensor of a file, and how tensor parallelism splits it.
enum class TensorPlace : uint8_t { kFirstStage, kLastStage, kLayer, kEveryStage };
enum class TensorSplit : uint8_t {
  kReplicated,      // norms, routers, MLA down-projections
  kTensorParallel,  // split evenly over ranks
  kKvHeads,         // split by KV heads: replicated when there are fewer heads than ranks
};

struct SourceTensor {
  std::string name;
  int64_t bytes = 0;
  int64_t elements = 0;  // GGUF: weights in the tensor (0: unknown, taken from bytes)
  int64_t layer = -1;    // for kLayer
  TensorPlace place = TensorPlace::kEveryStage;
  TensorSplit split = TensorSplit::kReplicated;
  bool matrix = false;  // two or more dimensions
  std::string type;     // storage type name ("q4_1", "f32")
};

struct ModelSource {
  ModelShape shape;
  std::string kind;   // "gguf", "config.json", "checkpoint", "catalog"
  std::string where;  // path, or the Hugging Face repository of a catalog entry
  // The type the source's weights are stored in ("bf16", "fp8"; for a GGUF file the type
  // holding most of its matrix bytes). Planning with another --dtype recounts from shape.
  std::string dtype;
  std::vector<SourceTensor> tensors;  // GGUF: every tensor with its exact size
  int64_t checkpoint_bytes = 0;       // safetensors checkpoint: total tensor bytes; 0 unknown
  std::vector<std::string> notes;     // assumptions made while reading
};

struct CatalogEntry {
  std::string_view name;     // "llama-3.1-70b"
  std::string_view hf_repo;  // where the configuration is published
  std::string_view dtype;    // the published checkpoint's weight type
  std::string_view summary;  // one line for --list
  ModelShape (*shape)();
};
std::span<const CatalogEntry> catalog();
const CatalogEntry* find_in_catalog(std::string_view name);  // case-insensitive
// The catalog name closest to `name` (edit distance), for "did you mean".
std::string_view closest_catalog_name(std::string_view name);

ModelSource source_from_catalog(const CatalogEntry& entry);
// From an opened GGUF file: the engine's ModelConfig when Pagoda supports the
// architecture, otherwise the common GGUF hyperparameter keys; weights are the tensors.
Result<ModelSource> source_from_gguf(const GgufFile& file);
// From a GGUF file or a checkpoint folder Pagoda runs (model/tensor_source.h): a GGUF
// file as source_from_gguf; a checkpoint's tensors as the loaders keep them (matrices in
// their checkpoint type, vectors in f32), so that the plan counts the engine's bytes.
Result<ModelSource> source_from_tensors(const TensorSource& source);
// From the text of a config.json (multimodal configs: their text_config).
Result<ModelSource> source_from_hf_config(std::string_view json_text, const std::string& where);
// Total tensor bytes of a single .safetensors file, from its header.
Result<int64_t> safetensors_data_bytes(const std::string& path);
// metadata.total_size of a sharded checkpoint's model.safetensors.index.json.
Result<int64_t> safetensors_index_total(const std::string& path);

// The tensors of a GGUF source as the CUDA backend stores them (model/cuda_weight_types.h):
// matrices of types its kernels do not take counted in the type they are converted to,
// and each layer's q/k/v and gate/up in their stack's one type. Adds a note saying what
// changed; other sources are left alone. `pagoda plan` for a GPU and the engine's GPU
// KV pool both count weights through this. Returns how many tensors it restated.
int restate_for_cuda(ModelSource* src);
// The same for the CPU backend (model/weight_types.h), which converts the block types
// it has no kernels for one tensor at a time. `pagoda plan --device cpu` counts through it.
int restate_for_cpu(ModelSource* src);

// MODEL as the user gives it: a .gguf file, a config.json, a folder with config.json
// (and model.safetensors.index.json or model.safetensors), or a catalog name.
Result<ModelSource> resolve_model(const std::string& spec);

}  // namespace pagoda::ledger
