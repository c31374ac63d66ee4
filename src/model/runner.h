// The backend-neutral face of a loaded model, so the engine can drive either backend:
// a runner owns the weights on its device, the paged KV pool and the scratch memory,
// and runs one forward pass per call over a Batch (the same description the CPU Model
// takes: token ids, per-sequence query rows, positions and block tables). Which blocks a
// sequence owns is decided above (the block manager); block ids index this runner's pool.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/device.h"
#include "core/sampling_row.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/gguf.h"
#include "model/model.h"
#include "pagoda/settings.h"

namespace pagoda {

// How the runner stores the KV cache: 16-bit floats (the CPU's fp16, the GPU's fp16),
// FP8 E4M3 with a scale per tensor (CUDA only), or 8-bit integers with an fp16 scale per 32
// values (llama.cpp's q8_0 cache; CPU only, cpu::KvLayer).
enum class KvCacheType : uint8_t { k16Bit, kFp8, kQ8_0 };

struct RunnerOptions {
  int n_kv_blocks = 0;         // KV pool size in blocks
  int kv_block_size = 16;      // tokens per block (a multiple of 16)
  int max_batch_tokens = 512;  // largest Batch::tokens the runner sizes its scratch for
  int max_logit_rows = 512;    // largest Batch::logit_rows
  int device = 0;              // GPU index (CUDA)
  KvCacheType kv_cache_type = KvCacheType::k16Bit;
  // FP8: real value = stored value x scale. 1.0 as vLLM uses without calibrated scales;
  // K and V of models in use stay far inside E4M3's +-448 at that scale.
  float kv_k_scale = 1.0f, kv_v_scale = 1.0f;
  // CUDA: quantize the blocks' float matrices to FP8 E4M3 at load, one scale per matrix
  // (vLLM's --quantization fp8); embeddings, LM head and norms stay as in the file.
  bool fp8_weights = false;
  // CPU: sees each layer product's input in every forward pass (importance matrices);
  // the CUDA backend refuses one.
  ActivationObserver* observer = nullptr;
  CudaSwitches cuda;  // the CUDA backend's A/B switches (PAGODA_CUDA_*)
};

// What a step hands back for batch.logit_rows. Neither pointer set: nothing (a prefill
// chunk that samples no row); both set: invalid_argument.
struct StepOutput {
  float* logits = nullptr;    // host, logit_rows.size() x n_vocab floats; or
  int32_t* tokens = nullptr;  // one token per logit row:
  // drawn as it says (one row per logit row); null: the most likely (first on ties)
  const StepSampling* sampling = nullptr;

  static StepOutput Logits(float* p) { return {p, nullptr, nullptr}; }
  static StepOutput Greedy(int32_t* p) { return {nullptr, p, nullptr}; }
  static StepOutput Sampled(int32_t* p, const StepSampling* s) { return {nullptr, p, s}; }
  Status check() const {
    return logits && tokens ? invalid_argument("a step hands back logits or tokens, not both")
                            : Status::ok();
  }
};

class SerialPipeline;  // the default launch / collect (runner.cpp)

class ModelRunner {
 public:
  ModelRunner();
  virtual ~ModelRunner();
  virtual const ModelConfig& config() const = 0;
  virtual DeviceKind device_kind() const = 0;
  // One line for logs: backend, device, weight types.
  virtual std::string describe() const = 0;
  // Bytes a single-token decode step reads from weights (for bandwidth figures).
  virtual size_t decode_weight_bytes() const = 0;
  // Bytes the loaded weights hold on the device (the figure `pagoda plan` predicts).
  virtual size_t weight_bytes() const = 0;
  // Runs the batch, writing its K/V into the pool, and hands back what `out` asks for:
  // the logit rows' logits, or one token each picked by the runner (on a GPU the logits
  // never leave the device). A pick the runner cannot make (picks_tokens) is unsupported.
  virtual Status forward(const Batch& batch, const StepOutput& out) = 0;
  // Whether forward picks tokens itself: the most likely (sampled false), or drawn as a
  // StepSampling row says (penalties, temperature, top-k / top-p / min-p, the given
  // uniform; sampled true).
  virtual bool picks_tokens(bool sampled) const = 0;
  // Copies block src's K and V to block dst in every layer (copy-on-write of shared
  // prefixes), ordered before the next forward pass.
  virtual Status copy_block(int src, int dst) = 0;
  // Pipelined steps (the engine's --async-scheduling): launch() queues a step that picks
  // its tokens (the most likely without `sampling`, else drawn as it says; the runner must
  // pick them, picks_tokens) and may return before it runs; collect() waits for the oldest
  // step launched and not yet collected and gives its tokens. A batch token t < 0 is the
  // token that the step launched just before picked for its logit row -t - 1, so a step
  // can be queued before the host has seen its input. At most two steps are outstanding,
  // and no plain forward runs while one is. A launch() that fails queued nothing; a step
  // that fails later fails its collect(). The default runs each step inside launch() (the
  // same tokens, no overlap; its failures wait for collect), so every runner can be driven
  // this way; a device that queues work overrides both.
  virtual Status launch(const Batch& batch, const StepSampling* sampling);
  virtual Status collect(std::vector<int32_t>* tokens);

 private:
  // Created by the first default launch(), so a runner that queues its own steps carries
  // one null pointer and none of the default's state.
  std::unique_ptr<SerialPipeline> serial_;
};

// The CPU backend over an already loaded Model (which the caller keeps alive).
std::unique_ptr<ModelRunner> make_cpu_runner(const Model& model, ThreadPool& pool,
                                             const RunnerOptions& options);

// The CUDA backend: loads the weights of `file` (a GGUF file or checkpoint folder,
// model/tensor_source.h) straight to the GPU. Unsupported when
// Pagoda was built without CUDA, its plugin cannot be loaded, or no GPU is present.
//
// The backend is a plugin (libpagoda_cuda.so beside the executable, or the file named by
// set_cuda_plugin_path: PAGODA_CUDA_PLUGIN) opened on first use: linking cuBLASLt into the
// executable cost every CPU process ~180 MB of resident memory (its relocations, data and static
// initialisers) and its load time, for a GPU it never touches.
Result<std::unique_ptr<ModelRunner>> make_cuda_runner(const TensorSource& file,
                                                      const RunnerOptions& options);
struct GpuMemory {
  int64_t free = 0, total = 0;  // bytes, as cudaMemGetInfo reports them
};
// Free and total memory of GPU `device` (creating its context on first use).
Result<GpuMemory> cuda_memory_info(int device);
// The plugin's path, "" for the default places; only before the backend's first use.
void set_cuda_plugin_path(const std::string& path);
// Whether this build produced the CUDA plugin (it may still fail to load or find no GPU).
bool cuda_built();
// Bumped whenever make_cuda_runner's types change, so a stale plugin is refused rather
// than called with the wrong layout.
inline constexpr int kCudaPluginAbi = 9;

}  // namespace pagoda
