// A deployment plan: for a model, a device and a workload, where every byte of device
// memory goes (weights, activations and workspace, runtime context, KV pool), how many
// sequences of a given context fit, and -- when they do not -- which change would make
// them fit (each suggestion is a re-run of the plan with that change).
//
// Overheads counted, per rank:
//  * activations: the forward pass's per-token buffers at --max-num-batched-tokens, laid
//    out as Pagoda's workspace is (residual, normed input, projection out and final-norm
//    input: 4 x hidden; q; k and v (MLA: latent and decompressed k/v); attention out; gate,
//    up and activated FFN: 3 x the widest FFN of the stage, MoE counting the experts a
//    token is routed to; rotary cos/sin tables), in fp32 on CPU and bf16 on GPU.
//  * logits: --max-num-seqs rows of the vocabulary in fp32 on the last stage (twice on GPU:
//    the sampler's probabilities).
//  * fp8 activations: with fp8 weights on GPU, the FP8 products' scratch (Gemm::reserve_fp8):
//    the activations of --max-num-batched-tokens (rounded up to 16) quantized to one byte at
//    the widest input of a quantized matrix (hidden, attention out, FFN), 16-byte aligned,
//    and a 16-token fp32 output tile at the widest output (q, k and v together; gate and up
//    together; hidden).
//  * runtime: on GPU a CUDA context with cuBLAS workspaces, an estimate of 512 MiB; on CPU
//    the process baseline: code, libraries and allocator arenas (8 MiB) plus the tokenizer's
//    tables (384 bytes per vocabulary entry). Fitted to the steady-state RSS of `pagoda run`
//    minus weights and KV on stories260K, SmolLM2-135M (Q4_1, Q8_0) and the 128K- and
//    152K-vocabulary random models: within 12 MB of each (SmolLM2 F16 holds 19 MB more).
// The KV pool is what remains of device memory x --gpu-memory-utilization, as vLLM sizes it;
// --kv-cache-memory instead fixes the pool and checks the total against the device.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ledger/memory.h"
#include "ledger/model_shape.h"
#include "ledger/sources.h"

namespace pagoda::ledger {

inline constexpr int64_t kGpuRuntimeBytes = int64_t{512} << 20;
inline constexpr int64_t kCpuRuntimeBaseBytes = int64_t{8} << 20;
inline constexpr int64_t kCpuRuntimeBytesPerVocab = 384;

struct NamedGpu {
  std::string_view name;  // "H100-80G"
  int64_t memory_mib;     // memory.total as nvidia-smi reports it
};
std::span<const NamedGpu> named_gpus();

// "80GiB", "141GB", "512MiB", "1.5T", "85899345920": decimal SI suffixes (kB MB GB TB),
// binary ones (KiB MiB GiB TiB, and the bare K M G T as in `free -g`).
Result<int64_t> parse_bytes(std::string_view text);

struct Device {
  std::string name;
  int64_t memory_bytes = 0;
  bool gpu = true;
};
// A named GPU (case-insensitive) or a size; a size describes a GPU unless `gpu` is false
// (and a GPU name with `gpu` false is an error).
Result<Device> parse_device(std::string_view spec, bool gpu);

struct PlanInput {
  ModelShape shape;
  WeightType weight_type;             // the weights' storage type
  bool exact_weights = false;         // take weights from `tensors` / `checkpoint_bytes`
  std::vector<SourceTensor> tensors;  // exact per-tensor bytes (GGUF)
  int64_t checkpoint_bytes = 0;       // exact total (safetensors), scaled per rank by shape
  KvDtype kv_dtype = KvDtype::kBf16;
  int64_t context = 0;      // tokens per sequence (prompt and output)
  int64_t concurrency = 1;  // sequences at once, for max_context_tokens and `fits`
  Device device;
  double gpu_memory_utilization = 0.9;
  int64_t kv_cache_memory = 0;  // > 0: the KV pool per rank is exactly this
  int tp = 1, pp = 1;
  int64_t max_num_batched_tokens = 2048;  // the engine's defaults (EngineConfig)
  int64_t max_num_seqs = 256;
  int block_size = 16;
};

struct Overheads {
  int64_t activations = 0;
  int64_t fp8_activations = 0;  // the FP8 products' scratch; 0 unless fp8 weights on GPU
  int64_t logits = 0;
  int64_t runtime = 0;
  int64_t total() const { return activations + fp8_activations + logits + runtime; }
};

// Forward-pass buffer elements per batched token on one rank for a stage's layers.
int64_t activation_elems_per_token(const ModelShape& shape, int tp, LayerRange layers);
// Bytes of the FP8 products' activation scratch for `max_tokens` batched tokens on one rank
// of a stage (see "fp8 activations" above).
int64_t fp8_activation_bytes(const ModelShape& shape, int tp, LayerRange layers,
                             int64_t max_tokens);
Overheads overheads(const PlanInput& in, LayerRange layers, bool last_stage);

// One pipeline stage on one of its tensor-parallel ranks.
struct StagePlan {
  LayerRange layers;
  int64_t weight_bytes = 0;
  Overheads overheads;
  KvRate kv;
  int64_t kv_bytes_per_sequence = 0;  // at the planned context
  int64_t kv_pool_bytes = 0;
  int64_t kv_pool_blocks = 0;
  int64_t shortfall_bytes = 0;  // how far weights and overheads exceed the budget
  int64_t max_concurrent_sequences = 0;
  int64_t max_context_tokens = 0;  // memory-limited, at the planned concurrency
};

struct Suggestion {
  std::string flags;  // what to pass: "--kv-cache-dtype fp8"
  std::string why;    // what it changes, with the numbers
  int64_t max_concurrent_sequences = 0;
  int64_t max_context_tokens = 0;
};

struct Plan {
  int64_t budget_bytes = 0;  // device memory x utilization (or all of it with kv_cache_memory)
  std::vector<StagePlan> stages;
  size_t bottleneck = 0;  // the stage that limits the plan; the headline numbers are its
  int64_t weight_bytes = 0;
  int64_t weight_params = 0;  // the whole model
  int64_t kv_bytes_per_token = 0;
  int64_t kv_bytes_per_sequence = 0;
  int64_t mha_equivalent_kv_bytes_per_token = 0;
  Overheads overheads;
  int64_t kv_pool_bytes = 0;
  int64_t kv_pool_blocks = 0;
  int64_t shortfall_bytes = 0;
  int64_t max_concurrent_sequences = 0;
  int64_t max_context_tokens = 0;  // also capped by the model's trained context
  bool fits = false;
  std::vector<std::string> notes;
  std::vector<Suggestion> suggestions;
};

// The model half of a PlanInput: shape, and weights as exact as the source knows them
// (GGUF tensors, checkpoint total) in the source's own type. The caller fills in the
// workload and device (and may set weight_type with exact_weights = false to re-plan the
// weights in another type).
PlanInput input_from_source(const ModelSource& source);

// Plans `in`; suggestions are searched only when it does not fit and `suggest` is set.
Result<Plan> make_plan(const PlanInput& in, bool suggest = true);

}  // namespace pagoda::ledger
