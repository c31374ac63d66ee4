// The memory ledger's arithmetic: bytes of weights and of KV cache for a ModelShape, per
// tensor-parallel rank and pipeline stage. `pagoda plan` prints it, and the serving path
// sizes its KV pool with the same functions, so what the plan promises is what the engine
// allocates.
//
// Engine API (the layer that builds the engine -- cli/server, above ledger -- calls it and
// hands the block count down; the engine itself sits below ledger and never includes it):
//
//   ledger::ModelShape shape = ledger::shape_from_config(model.config());
//   int64_t per_token = ledger::kv_bytes_per_token(shape, ledger::KvDtype::kFp16);
//   int64_t n_blocks  = ledger::kv_pool_blocks(shape, ledger::KvDtype::kFp16,
//                                              kv_cache_memory_bytes, block_size);
//   KvStorage kv(model.config(), n_blocks, block_size);   // kv.bytes() == n_blocks *
//                                                          //   block_size * per_token
//
// Conventions (stated once, used everywhere):
//  * KV bytes per token are exact: K and V of every attention layer (MLA: one latent of
//    kv_lora_rank + qk_rope_head_dim per layer, shared by all heads); layers without
//    attention hold none; sliding-window layers stop growing at their window.
//  * Tensor parallelism splits KV heads over ranks; when there are fewer KV heads than
//    ranks each rank holds one head (heads are replicated). The MLA latent is replicated
//    on every rank. Pipeline parallelism gives each stage its own layers.
//  * KV element types: bf16/fp16 2 bytes, fp8 1 byte (per-tensor scale, not counted),
//    int8 and int4 in GGUF's q8_0/q4_0 layout along each head vector: blocks of 32 values
//    with one fp16 scale, 34 and 18 bytes per block (8.5 and 4.5 bits per value).
//  * Weight types: see WeightType. fp32/fp16/bf16 store every tensor in that type. The
//    serving formats fp8, int8, int4-g128 and nf4 quantize the linear layers of the
//    blocks; embeddings, LM head, norms, biases and MoE routers stay bf16 (as AWQ, GPTQ,
//    FP8 and bitsandbytes checkpoints keep them). GGUF types (q4_0, q8_0, q4_k, ...)
//    quantize every matrix including token embeddings and output (llama-quantize --pure);
//    norms, biases and routers stay f32. A row whose length is not a multiple of the block
//    is padded to whole blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ledger/model_shape.h"

namespace pagoda::ledger {

// ---- element types ---------------------------------------------------------------------

enum class WeightFamily : uint8_t {
  kFloat,  // fp32, fp16, bf16: every tensor in the type
  kServe,  // fp8, int8, int4-g128, nf4: block linears quantized, the rest bf16
  kGguf,   // GGUF block types: every matrix quantized, vectors and routers f32
};

struct WeightType {
  std::string name;  // as the user writes it: "bf16", "int4-g128", "q4_k"
  WeightFamily family = WeightFamily::kFloat;
  int64_t block_elems = 1;     // weights per block along a row (the input dimension)
  int64_t block_bits = 16;     // bits per block, scales and zero points included
  int64_t row_extra_bits = 0;  // per output row (int8's per-channel scale)
  double bits_per_weight() const { return static_cast<double>(block_bits) / block_elems; }
  bool operator==(const WeightType&) const = default;
};

// fp32 bf16 fp16 fp8 int8 int4-g128 nf4, and GGUF block types (q4_0 q4_1 q5_0 q5_1 q8_0
// q2_k q3_k q4_k q5_k q6_k), case-insensitive. The error lists what is accepted.
Result<WeightType> parse_weight_type(std::string_view name);
std::string weight_type_names();

enum class KvDtype : uint8_t { kBf16, kFp16, kFp8, kInt8, kInt4 };
Result<KvDtype> parse_kv_dtype(std::string_view name);  // "auto" means bf16
std::string_view kv_dtype_name(KvDtype t);
// Bytes of one cached vector of `elems` values.
int64_t kv_vector_bytes(KvDtype t, int64_t elems);

// ---- parallelism -----------------------------------------------------------------------

// Layers [begin, end) of one pipeline stage.
struct LayerRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
// Contiguous stages, the remainder given one layer each to the stages before the last
// (the last stage also holds the LM head), as vLLM partitions them.
std::vector<LayerRange> pipeline_stages(int64_t n_layers, int pp);
// Refuses splits an engine cannot make: query heads not divisible by tp, KV heads neither
// a multiple nor a divisor of tp, more stages than layers.
Status check_parallel(const ModelShape& shape, int tp, int pp);
int64_t kv_heads_per_rank(const ModelShape& shape, int tp);

// ---- KV cache --------------------------------------------------------------------------

// Bytes one token occupies in layer `layer` on one tensor-parallel rank.
int64_t kv_layer_bytes_per_token(const ModelShape& shape, int64_t layer, KvDtype t, int tp = 1);

// Per-token bytes of a group of layers, split by how they grow.
struct KvRate {
  int64_t full = 0;     // full-attention layers: every token of the sequence
  int64_t sliding = 0;  // sliding-window layers: at most `window` tokens
  int64_t window = 0;
  int64_t total() const { return full + sliding; }
};
KvRate kv_rate(const ModelShape& shape, KvDtype t, int tp, LayerRange layers);

// Bytes one token occupies in every attention layer on one rank: the size of a token's
// slot in a block pool shared by all layers.
int64_t kv_bytes_per_token(const ModelShape& shape, KvDtype t, int tp = 1);

// Bytes a sequence of `tokens` holds in a paged pool of `block_size`-token blocks:
// full layers round the sequence up to whole blocks; sliding layers hold at most the
// blocks a window can touch (ceil((window + block_size - 1) / block_size)), which needs
// an allocator that frees blocks once they leave the window.
int64_t kv_bytes_per_sequence(const KvRate& rate, int64_t tokens, int block_size);

// Blocks of `block_size` tokens (all attention layers of the model on one rank) that fit
// in `budget_bytes`; 0 when the budget is not positive. This is the number the engine's
// KV pool is built with.
int64_t kv_pool_blocks(const ModelShape& shape, KvDtype t, int64_t budget_bytes, int block_size,
                       int tp = 1);

// The figure that ignores GQA, MLA and windows: every query head with its own K and V
// (n_heads x (K size + V size) per layer), for comparison with the real one.
int64_t mha_equivalent_kv_bytes_per_token(const ModelShape& shape, KvDtype t, int tp = 1);

// ---- weights ---------------------------------------------------------------------------

enum class WeightRole : uint8_t {
  kLinear,     // a matrix inside a block: quantized by every weight type
  kEmbedding,  // token embedding table (and the tied output copy on the last stage)
  kOutput,     // untied LM head
  kRouter,     // MoE router matrix
  kVector,     // norms, biases, routing biases
};

// One kind of tensor as one rank stores it: `count` matrices of rows x cols (rows are
// outputs, cols are inputs; quantization blocks run along cols).
struct WeightPart {
  std::string_view group;  // "embedding", "attention", "ffn", "experts", ...
  WeightRole role = WeightRole::kLinear;
  int64_t rows = 0, cols = 0, count = 1;
};

// The tensors of pipeline stage `layers` on one tensor-parallel rank. The first stage
// holds the token embedding, the last the final norm and LM head (and, with tied
// embeddings and more than one stage, its own copy of the embedding table).
std::vector<WeightPart> stage_weight_parts(const ModelShape& shape, int tp, LayerRange layers,
                                           bool first_stage, bool last_stage);
int64_t part_bytes(const WeightPart& part, const WeightType& type);
// Total over a stage (tp and pp as above) or, with defaults, the whole model.
int64_t weight_bytes(const ModelShape& shape, const WeightType& type, int tp = 1);
int64_t stage_weight_bytes(const ModelShape& shape, const WeightType& type, int tp,
                           LayerRange layers, bool first_stage, bool last_stage);
// Parameter count of the whole model (tp = 1).
int64_t weight_params(const ModelShape& shape);

}  // namespace pagoda::ledger
