// Loading a model onto the GPU (a GGUF file or a checkpoint folder, model/tensor_source.h):
// configuration as the CPU Model reads it, weights copied from the file maps straight to
// device memory (quantized blocks repacked on the
// device), q/k/v and gate/up stacked so each layer runs two wide products instead of five.
#include "model/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "backend/cpu/convert_blocks.h"
#include "backend/cpu/matmul.h"
#include "backend/cuda/check.h"
#include "core/log.h"
#include "model/arch/arch.h"
#include "model/cuda/op_profiler.h"
#include "model/cuda/uploader.h"
#include "model/cuda_weight_types.h"

namespace pagoda {
namespace {

// Everything the loader keeps on the device goes through here.
class Loader {
 public:
  Loader(const TensorSource& f, cuda::DeviceContext& dev, std::vector<cuda::DeviceBuffer>& owned,
         ThreadPool& pool)
      : f_(f), dev_(dev), owned_(owned), pool_(pool), up_(pool, dev.stream()) {}

  Status init() { return up_.init(); }
  Status finish() { return up_.finish(); }
  size_t bytes() const { return bytes_; }

  // A vector as f32 on the device.
  Result<const float*> vector(const std::string& name, int64_t n) {
    PAGODA_ASSIGN_OR_RETURN(const WeightTensor* t, f_.find_tensor(name, {n, 1}));
    std::vector<float> v(static_cast<size_t>(n));
    if (t->type == DType::kF32) {
      std::memcpy(v.data(), f_.tensor_data(*t), static_cast<size_t>(n) * sizeof(float));
    } else {
      Status s = cpu::dequantize_row(t->type, f_.tensor_data(*t), v.data(), n);
      if (!s) return s.with_context("tensor '" + name + "'");
    }
    PAGODA_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::alloc(v.size() * 4));
    // Synchronous: v goes out of scope at return.
    PAGODA_CUDA_TRY(cudaMemcpy(b.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    bytes_ += v.size() * 4;
    const float* p = b.as<float>();
    owned_.push_back(std::move(b));
    return p;
  }

  // Matrices named in `names` ([cols] x rows[i] each) stacked into one device matrix.
  Result<cuda::DeviceMatrix> matrix(const std::vector<std::string>& names,
                                    const std::vector<int64_t>& rows, int64_t cols) {
    std::vector<const WeightTensor*> ts;
    std::vector<DType> types;
    int64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      PAGODA_ASSIGN_OR_RETURN(const WeightTensor* t, f_.find_tensor(names[i], {cols, rows[i]}));
      ts.push_back(t);
      types.push_back(t->type);
      total += rows[i];
    }
    // The ledger and `pagoda quantize CUDA` group tensors by cuda_stack_name; a stack
    // here that it does not name alike would make them count other types than these.
    for (const std::string& n : names)
      if (cuda_stack_name(n) != cuda_stack_name(names[0]) ||
          (names.size() == 1 && cuda_stack_name(n) != n))
        return internal_error("tensor '" + n + "' is stacked unlike cuda_stack_name says");
    // The type the device keeps (model/cuda_weight_types.h): the file's, or one the
    // tensors are converted to on the way.
    const std::optional<DType> stack = cuda_stack_type(types);
    if (!stack || !cuda::is_supported_device_type(*stack)) {
      std::string list;
      for (size_t i = 0; i < ts.size(); ++i)
        list += (i ? ", '" : "'") + names[i] + "' " + std::string(dtype_name(types[i]));
      return unsupported("tensor" + std::string(ts.size() > 1 ? "s " : " ") + list +
                         ": the CUDA backend multiplies F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                         "Q4_K, Q5_K and Q6_K (other block types converted at load)" +
                         (ts.size() > 1 ? ", and stacks them in one type" : ""));
    }
    cuda::DeviceMatrix m;
    m.type = *stack;
    m.rows = total;
    m.cols = cols;
    const size_t need = cuda::device_matrix_bytes(m.type, m.rows, m.cols);
    PAGODA_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::alloc(need));
    cuda::assign_matrix_storage(&m, b.get());
    bytes_ += need;
    const bool plain = m.type == DType::kF32 || m.type == DType::kF16 || m.type == DType::kBF16;
    int64_t row0 = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      const WeightTensor* t = ts[i];
      const void* src = f_.tensor_data(*t);
      size_t size = t->size;
      std::vector<uint8_t> converted;
      if (t->type != m.type) {
        PAGODA_ASSIGN_OR_RETURN(converted, convert(*t, m.type));
        src = converted.data();
        size = converted.size();
      }
      if (plain) {
        const size_t off = static_cast<size_t>(row0) * row_bytes(m.type, cols);
        PAGODA_RETURN_IF_ERROR(up_.copy(src, b.as<uint8_t>() + off, size));
      } else {
        // Raw blocks to a device staging buffer, then split into quants and scales.
        if (size > stage_.bytes()) {
          PAGODA_RETURN_IF_ERROR(up_.finish());  // the old stage may still be read
          PAGODA_ASSIGN_OR_RETURN(stage_, cuda::DeviceBuffer::alloc(size));
        }
        // copy() has taken the bytes into its pinned stage when it returns, so
        // `converted` may go.
        PAGODA_RETURN_IF_ERROR(up_.copy(src, stage_.get(), size));
        PAGODA_RETURN_IF_ERROR(cuda::repack_rows(stage_.get(), row0, t->ne[1], m, dev_.stream()));
      }
      row0 += t->ne[1];
    }
    // The copies are queued; pages are given back once they have been read.
    pending_release_.insert(pending_release_.end(), ts.begin(), ts.end());
    if (pending_release_.size() > 16) PAGODA_RETURN_IF_ERROR(release());
    owned_.push_back(std::move(b));
    return m;
  }

  // Replaces a float matrix this loader made by an E4M3 copy with one scale per matrix
  // (amax / 448), as vLLM's --quantization fp8 does to a 16-bit checkpoint at load. A
  // matrix with a dimension that is not a multiple of 16 (cuBLASLt's FP8 kernels need
  // that) stays as it is.
  Status to_fp8(cuda::DeviceMatrix* m, const std::string& what) {
    if (m->rows % 16 != 0 || m->cols % 16 != 0) return Status::ok();
    if (m->type != DType::kF32 && m->type != DType::kF16 && m->type != DType::kBF16)
      return unsupported("--quantization fp8 takes float weights; " + what + " is " +
                         std::string(dtype_name(m->type)));
    auto old = std::find_if(owned_.rbegin(), owned_.rend(),
                            [&](const cuda::DeviceBuffer& b) { return b.get() == m->data; });
    if (old == owned_.rend()) return internal_error("to_fp8: not a matrix of this loader");
    PAGODA_RETURN_IF_ERROR(up_.finish());  // the float rows have arrived
    const size_t n = static_cast<size_t>(m->rows) * static_cast<size_t>(m->cols);
    const size_t body = (n + 15) / 16 * 16;
    // The bytes, then the scale and the max |w| 16 bytes apart (aligned as cuBLASLt's
    // operands are).
    PAGODA_ASSIGN_OR_RETURN(cuda::DeviceBuffer q, cuda::DeviceBuffer::alloc(body + 32));
    float* scale = reinterpret_cast<float*>(q.as<uint8_t>() + body);
    uint32_t* amax = reinterpret_cast<uint32_t*>(q.as<uint8_t>() + body + 16);
    cudaStream_t st = dev_.stream();
    const cuda::ActType t = cuda::act_type_for(m->type);
    const size_t elem = cuda::act_bytes(t);
    constexpr int64_t kChunk = 32768;  // rows per launch (a grid's y extent)
    PAGODA_CUDA_TRY(cudaMemsetAsync(amax, 0, sizeof(uint32_t), st));
    for (int64_t r0 = 0; r0 < m->rows; r0 += kChunk)
      PAGODA_RETURN_IF_ERROR(cuda::fp8_amax(
          static_cast<const uint8_t*>(m->data) + static_cast<size_t>(r0 * m->cols) * elem, t,
          std::min(kChunk, m->rows - r0), m->cols, m->cols, amax, st));
    for (int64_t r0 = 0; r0 < m->rows; r0 += kChunk)
      PAGODA_RETURN_IF_ERROR(cuda::fp8_quantize(
          static_cast<const uint8_t*>(m->data) + static_cast<size_t>(r0 * m->cols) * elem, t,
          std::min(kChunk, m->rows - r0), m->cols, m->cols, amax,
          q.as<uint8_t>() + static_cast<size_t>(r0 * m->cols), scale, st));
    float host_scale = 0;
    PAGODA_CUDA_TRY(
        cudaMemcpyAsync(&host_scale, scale, sizeof host_scale, cudaMemcpyDeviceToHost, st));
    PAGODA_CUDA_TRY(cudaStreamSynchronize(st));
    bytes_ = bytes_ - n * elem + body + 32;
    m->data = q.get();
    m->fp8 = true;
    m->fp8_scale = host_scale;
    m->fp8_scale_dev = scale;
    *old = std::move(q);  // frees the float copy
    return Status::ok();
  }

  // Tensors converted on the way; empty when the file's types went as they were.
  std::string conversions() const { return converted_.describe(); }

  Status release() {
    PAGODA_RETURN_IF_ERROR(up_.finish());
    for (const WeightTensor* t : pending_release_) f_.release_tensor(*t);
    pending_release_.clear();
    return Status::ok();
  }

 private:
  // The tensor's rows in type `to`, GGUF layout, converted on the host by the pool.
  Result<std::vector<uint8_t>> convert(const WeightTensor& t, DType to) {
    auto out =
        cpu::convert_matrix(t.type, f_.tensor_data(t), t.ne[1], t.ne[0], to, pool_, &converted_);
    if (!out)
      return out.status().with_context("converting tensor '" + t.name + "' for the CUDA backend");
    return out;
  }

  const TensorSource& f_;
  cuda::DeviceContext& dev_;
  std::vector<cuda::DeviceBuffer>& owned_;
  ThreadPool& pool_;
  WeightUploader up_;
  cpu::ConversionTally converted_;
  cuda::DeviceBuffer stage_;
  std::vector<const WeightTensor*> pending_release_;
  size_t bytes_ = 0;
};

}  // namespace

CudaModel::~CudaModel() {
  if (dev_) (void)dev_->sync();  // queued pipelined steps still write into our buffers
  for (cudaEvent_t e : done_)
    if (e) cudaEventDestroy(e);
  graphs_.clear();
  profiler_.reset();
}

// PAGODA_CUDA_OMIT: comma-separated kinds of op to leave out of every step.
Result<std::unique_ptr<CudaModel>> CudaModel::load(const TensorSource& f,
                                                   const RunnerOptions& options) {
  if (options.kv_block_size <= 0 || options.kv_block_size % 16 != 0)
    return invalid_argument("KV block size must be a positive multiple of 16");
  if (!(options.kv_k_scale > 0 && options.kv_v_scale > 0 && std::isfinite(options.kv_k_scale) &&
        std::isfinite(options.kv_v_scale)))
    return invalid_argument("KV cache scales must be positive and finite");
  const CudaSwitches& sw = options.cuda;
  if (sw.q8_unroll != 2 && sw.q8_unroll != 4)
    return invalid_argument("the q8 products' unroll must be 2 or 4");
  if (sw.split_keys < 0) return invalid_argument("split_keys must be 0 or more");
  if (sw.omit) log_warn("PAGODA_CUDA_OMIT: ops left out of every step; the outputs are wrong");
  // Launch-wide switches of the kernels: the process has one model per device.
  cuda::set_pdl_allowed(sw.pdl);
  cuda::set_gemv_q8_unroll_override(sw.q8_unroll == 4 ? 4 : 0);
  std::unique_ptr<CudaModel> m(new CudaModel());
  m->options_ = options;
  const KvCacheScales& kvs = f.kv_cache_scales();
  if (!kvs.empty() && options.kv_cache_type == KvCacheType::kFp8) {
    m->kv_k_scales_ = kvs.k;
    m->kv_v_scales_ = kvs.v;
    log_info("FP8 KV cache: the checkpoint's calibrated K and V scales, one a layer");
  } else if (!kvs.empty()) {
    log_info(
        "the checkpoint's FP8 KV-cache scales apply to an FP8 cache only (this one is "
        "16-bit)");
  }
  PAGODA_ASSIGN_OR_RETURN(m->dev_, cuda::DeviceContext::open(options.device));
  m->dev_->gemm().set_fp8_fast_accum(sw.fp8_fast_accum);
  m->use_graphs_ = sw.graphs;
  m->fuse_ = sw.fuse;
  m->split_keys_ = sw.split_keys;
  m->omit_ = sw.omit;
  if (sw.profile) m->profiler_ = std::make_unique<OpProfiler>(m->dev_->stream());
  PAGODA_RETURN_IF_ERROR(m->load_weights(f));
  m->rope_ = m->make_rope_params();
  PAGODA_RETURN_IF_ERROR(m->allocate_kv());
  PAGODA_RETURN_IF_ERROR(m->reserve(options.max_batch_tokens, options.max_logit_rows));
  return m;
}

Status CudaModel::load_weights(const TensorSource& f) {
  PAGODA_ASSIGN_OR_RETURN(config_, read_model_config(f));
  const ModelConfig& c = config_;
  PAGODA_RETURN_IF_ERROR(require_features(c.recipe, kRecipeFeatures, "the CUDA backend"));
  if (c.head_dim % 8 != 0 || c.head_dim > 256)
    return unsupported(
        str_format("head size %d: the CUDA backend takes multiples of 8 up to 256", c.head_dim));

  ThreadPool pool(std::min(8, hardware_threads()));
  Loader ld(f, *dev_, weights_, pool);
  PAGODA_RETURN_IF_ERROR(ld.init());
  PAGODA_ASSIGN_OR_RETURN(tok_embd_, ld.matrix({kTokEmbdTensor}, {c.n_vocab}, c.dim));
  PAGODA_ASSIGN_OR_RETURN(output_norm_, ld.vector(kOutputNormTensor, c.dim));
  if (c.recipe.tied_output) {
    output_ = tok_embd_;
  } else {
    PAGODA_ASSIGN_OR_RETURN(output_, ld.matrix({kOutputTensor}, {c.n_vocab}, c.dim));
  }
  if (c.rope_has_freq_factors) {
    PAGODA_ASSIGN_OR_RETURN(rope_factors_, ld.vector(kRopeFreqsTensor, c.rope_dims / 2));
  }
  layers_.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    const LayerTensors t = layer_tensors(c, l);
    PAGODA_ASSIGN_OR_RETURN(L.attn_norm, ld.vector(t.attn_norm, c.dim));
    PAGODA_ASSIGN_OR_RETURN(L.ffn_norm, ld.vector(t.ffn_norm, c.dim));
    PAGODA_ASSIGN_OR_RETURN(L.qkv, ld.matrix(t.qkv.names, t.qkv.rows, t.qkv.cols));
    if (options_.fp8_weights)
      PAGODA_RETURN_IF_ERROR(ld.to_fp8(&L.qkv, t.qkv.names[0] + " (stacked)"));
    if (!t.qkv_bias.empty()) {
      // One bias vector for the stacked rows: upload the three pieces side by side.
      std::vector<float> bias;
      for (size_t i = 0; i < t.qkv_bias.size(); ++i) {
        PAGODA_ASSIGN_OR_RETURN(const WeightTensor* bt,
                                f.find_tensor(t.qkv_bias[i], {t.qkv.rows[i]}));
        const int64_t n = bt->ne[0];
        std::vector<float> v(static_cast<size_t>(n));
        PAGODA_RETURN_IF_ERROR(cpu::dequantize_row(bt->type, f.tensor_data(*bt), v.data(), n));
        bias.insert(bias.end(), v.begin(), v.end());
      }
      PAGODA_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::alloc(bias.size() * 4));
      PAGODA_CUDA_TRY(cudaMemcpy(b.get(), bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
      L.qkv_bias = b.as<float>();
      weights_.push_back(std::move(b));
    }
    PAGODA_ASSIGN_OR_RETURN(L.wo, ld.matrix({t.wo.name}, {t.wo.rows}, t.wo.cols));
    PAGODA_ASSIGN_OR_RETURN(L.gate_up, ld.matrix(t.gate_up.names, t.gate_up.rows, t.gate_up.cols));
    PAGODA_ASSIGN_OR_RETURN(L.down, ld.matrix({t.down.name}, {t.down.rows}, t.down.cols));
    if (options_.fp8_weights) {
      PAGODA_RETURN_IF_ERROR(ld.to_fp8(&L.wo, t.wo.name));
      PAGODA_RETURN_IF_ERROR(ld.to_fp8(&L.gate_up, t.gate_up.names[0] + " (stacked)"));
      PAGODA_RETURN_IF_ERROR(ld.to_fp8(&L.down, t.down.name));
    }
  }
  PAGODA_RETURN_IF_ERROR(ld.release());
  weight_bytes_ = ld.bytes();
  conversions_ = ld.conversions();
  if (!conversions_.empty()) log_info("converted for the CUDA backend's kernels: " + conversions_);
  return Status::ok();
}

Status CudaModel::allocate_kv() {
  const ModelConfig& c = config_;
  if (options_.n_kv_blocks <= 0) return invalid_argument("the KV pool needs at least one block");
  kv_layer_elems_ = static_cast<size_t>(options_.n_kv_blocks) * options_.kv_block_size *
                    c.n_kv_heads * c.head_dim;
  const size_t bytes = kv_layer_elems_ * c.n_layers * cuda::kv_elem_bytes(kv_type());
  PAGODA_ASSIGN_OR_RETURN(kv_k_, cuda::DeviceBuffer::alloc(bytes));
  PAGODA_ASSIGN_OR_RETURN(kv_v_, cuda::DeviceBuffer::alloc(bytes));
  // Zeroed: a kernel bug that reads an unwritten slot then shows as a wrong value, not NaN.
  PAGODA_CUDA_TRY(cudaMemset(kv_k_.get(), 0, bytes));
  PAGODA_CUDA_TRY(cudaMemset(kv_v_.get(), 0, bytes));
  return Status::ok();
}

Status CudaModel::copy_block(int src, int dst) {
  if (src < 0 || dst < 0 || src >= options_.n_kv_blocks || dst >= options_.n_kv_blocks)
    return invalid_argument("KV block copy outside the pool");
  // A block is contiguous within each layer's pool (all its KV heads): one copy per
  // layer and tensor, queued on the model's stream before the next step.
  const size_t elem = cuda::kv_elem_bytes(kv_type());
  const size_t block = kv_layer_elems_ / static_cast<size_t>(options_.n_kv_blocks) * elem;
  for (int l = 0; l < config_.n_layers; ++l) {
    for (const cuda::DeviceBuffer* buf : {&kv_k_, &kv_v_}) {
      uint8_t* base = buf->as<uint8_t>() + kv_layer_elems_ * elem * static_cast<size_t>(l);
      PAGODA_CUDA_TRY(cudaMemcpyAsync(base + block * static_cast<size_t>(dst),
                                      base + block * static_cast<size_t>(src), block,
                                      cudaMemcpyDeviceToDevice, dev_->stream()));
    }
  }
  return Status::ok();
}

cuda::KvLayerView CudaModel::kv_layer(int l) const {
  cuda::KvLayerView v;
  v.type = kv_type();
  const size_t layer_bytes = kv_layer_elems_ * cuda::kv_elem_bytes(v.type);
  v.k = kv_k_.as<uint8_t>() + layer_bytes * static_cast<size_t>(l);
  v.v = kv_v_.as<uint8_t>() + layer_bytes * static_cast<size_t>(l);
  if (v.type == cuda::KvType::kFp8E4M3) {
    const bool own = !kv_k_scales_.empty();
    v.k_scale = own ? kv_k_scales_[static_cast<size_t>(l)] : options_.kv_k_scale;
    v.v_scale = own ? kv_v_scales_[static_cast<size_t>(l)] : options_.kv_v_scale;
  }
  v.block_size = options_.kv_block_size;
  v.n_kv_heads = config_.n_kv_heads;
  v.head_dim = config_.head_dim;
  return v;
}

std::string CudaModel::describe() const {
  return str_format(
      "cuda:%d %s, weights %s%s%s %.2f GB, KV cache %s", dev_->index(), dev_->describe().c_str(),
      std::string(dtype_name(layers_.empty() ? tok_embd_.type : layers_[0].qkv.type)).c_str(),
      options_.fp8_weights ? " (layers in fp8 e4m3)" : "",
      conversions_.empty() ? "" : (" (converted " + conversions_ + ")").c_str(),
      weight_bytes_ / 1e9, kv_type() == cuda::KvType::kFp8E4M3 ? "fp8 e4m3" : "fp16");
}

size_t CudaModel::decode_weight_bytes() const {
  // Every matrix once; of the embedding one row unless it is also the output projection.
  const size_t embd = cuda::device_matrix_bytes(tok_embd_.type, tok_embd_.rows, tok_embd_.cols);
  return config_.recipe.tied_output ? weight_bytes_ : weight_bytes_ - embd + embd / tok_embd_.rows;
}

namespace cuda {

Result<std::unique_ptr<ModelRunner>> make_runner(const TensorSource& file,
                                                 const RunnerOptions& options) {
  if (options.kv_cache_type == KvCacheType::kQ8_0)
    return unsupported("the CUDA backend keeps the KV cache in fp16 or fp8, not q8_0");
  if (options.observer != nullptr)
    return unsupported(
        "the CUDA backend does not report its products' inputs (importance "
        "matrices are collected on the CPU)");
  PAGODA_ASSIGN_OR_RETURN(auto m, CudaModel::load(file, options));
  return std::unique_ptr<ModelRunner>(std::move(m));
}

}  // namespace cuda
}  // namespace pagoda

// The plugin's entry points, found by src/model/runner_cuda_loader.cpp with dlsym.
extern "C" __attribute__((visibility("default"))) int pagoda_cuda_plugin_abi() {
  return pagoda::kCudaPluginAbi;
}

extern "C" __attribute__((visibility("default"))) void pagoda_cuda_memory_info(
    int device, pagoda::Result<pagoda::GpuMemory>* out) {
  size_t free_b = 0, total_b = 0;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *out = pagoda::unsupported(pagoda::str_format("GPU %d: %s", device, cudaGetErrorString(e)));
    return;
  }
  *out = pagoda::GpuMemory{static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
}

extern "C" __attribute__((visibility("default"))) void pagoda_cuda_make_runner(
    const pagoda::TensorSource* file, const pagoda::RunnerOptions* options,
    pagoda::Result<std::unique_ptr<pagoda::ModelRunner>>* out) {
  *out = pagoda::cuda::make_runner(*file, *options);
}
