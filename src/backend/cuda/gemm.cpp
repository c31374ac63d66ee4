#include "backend/cuda/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/gemv_q8.h"
#include "core/fp8_scratch.h"

namespace pagoda::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's split-K and stream-K scratch
constexpr int kFp8Key = -1;                    // plan key type of E4M3 x E4M3 products
constexpr int kCandidates = 8;                 // cuBLASLt's algorithms kept per plan

cudaDataType_t cuda_type(ActType t) {
  switch (t) {
    case ActType::kF32:
      return CUDA_R_32F;
    case ActType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_16BF;
  }
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // cuBLASLt's candidates, best first
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

Result<std::unique_ptr<Gemm>> Gemm::create() {
  std::unique_ptr<Gemm> g(new Gemm());
  PAGODA_CUBLAS_TRY(cublasLtCreate(&g->lt_));
  PAGODA_CUDA_TRY(cudaMalloc(&g->workspace_, kWorkspaceBytes));
  g->workspace_bytes_ = kWorkspaceBytes;
  return g;
}

Gemm::~Gemm() {
  plans_.clear();
  if (lt_) cublasLtDestroy(lt_);
  cudaFree(workspace_);
  cudaFree(dequant_);
  cudaFree(q8_);
  cudaFree(x8_);
  cudaFree(x_scale_);
}

Result<Gemm::Plan*> Gemm::plan(const Key& key, const Fp8Scales* scales) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  const auto [type_i, m, n, k, ldb, ldc, accumulate] = key;
  const bool fp8 = type_i == kFp8Key;
  const cudaDataType_t t = fp8 ? CUDA_R_8F_E4M3 : cuda_type(static_cast<ActType>(type_i));
  auto p = std::make_unique<Plan>();
  // Column-major view: Y^T (m x n) = W (stored k x m, transposed) x X^T (k x n): the
  // "TN" form FP8 products require.
  PAGODA_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  PAGODA_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  PAGODA_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (fp8) {
    // Set before the heuristic, so it ranks algorithms for the product as it runs.
    if (scales == nullptr) return internal_error("an FP8 plan without scales");
    PAGODA_RETURN_IF_ERROR(set_scales(p.get(), *scales));
    if (fp8_fast_accum_) {
      const int8_t on = 1;
      PAGODA_CUBLAS_TRY(
          cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on));
    }
  }
  PAGODA_CUBLAS_TRY(
      cublasLtMatrixLayoutCreate(&p->a, t, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
  PAGODA_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->b, t, static_cast<uint64_t>(k),
                                               static_cast<uint64_t>(n), ldb));
  PAGODA_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, static_cast<uint64_t>(m),
                                               static_cast<uint64_t>(n), ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  PAGODA_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes_, sizeof(workspace_bytes_));
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p->op, p->a, p->b, p->c, p->c, pref,
                                                           kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  PAGODA_RETURN_IF_ERROR(cublas_status(st, "cublasLtMatmulAlgoGetHeuristic"));
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) p->algos.push_back(results[i].algo);
  if (p->algos.empty())
    return unsupported(str_format("cuBLASLt has no algorithm for a %lld x %lld x %lld product",
                                  static_cast<long long>(m), static_cast<long long>(n),
                                  static_cast<long long>(k)));
  (void)accumulate;  // part of the key only: beta is passed per call
  Plan* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

Status Gemm::set_scales(Plan* p, const Fp8Scales& scales) {
  PAGODA_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                   &scales.a, sizeof(scales.a)));
  PAGODA_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                   &scales.b, sizeof(scales.b)));
  return Status::ok();
}

// cuBLASLt's heuristic does not promise that its first algorithm runs (its FP8 sample
// says as much): one it refuses (CUBLAS_STATUS_NOT_SUPPORTED) is dropped from the plan
// and the next one tried.
Status Gemm::run(Plan* p, const void* a, const void* b, bool accumulate, float* y,
                 cudaStream_t stream) {
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  while (true) {
    const cublasStatus_t st =
        cublasLtMatmul(lt_, p->op, &alpha, a, p->a, b, p->b, &beta, y, p->c, y, p->c,
                       &p->algos.front(), workspace_, workspace_bytes_, stream);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED || p->algos.size() == 1)
      return cublas_status(st, "cublasLtMatmul");
    p->algos.erase(p->algos.begin());
  }
}

Status Gemm::ensure_q8_scratch(int64_t cols, int n, cudaStream_t stream) {
  // Sized for any row width up to 64K at once, so it is not regrown (and freed under
  // queued kernels) between the products of one step.
  const size_t need =
      std::max(gemv_q8_scratch_bytes(cols, n), gemv_q8_scratch_bytes(65536, kGemvMaxTokens));
  if (need <= q8_bytes_) return Status::ok();
  PAGODA_CUDA_TRY(cudaStreamSynchronize(stream));
  cudaFree(q8_);
  q8_ = nullptr;
  q8_bytes_ = 0;
  PAGODA_CUDA_TRY(cudaMalloc(&q8_, need));
  q8_bytes_ = need;
  return Status::ok();
}

Result<Q8Act> Gemm::q8_input(int64_t cols, int n, cudaStream_t stream) {
  if (n < 1 || n > kGemvMaxTokens) return invalid_argument("q8_input: 1 to 8 tokens");
  PAGODA_RETURN_IF_ERROR(ensure_q8_scratch(cols, n, stream));
  return q8_act_view(q8_, cols, n);
}

Status Gemm::matmul_q8(const DeviceMatrix& w, const Q8Act& x, int n, float* y, int64_t y_stride,
                       bool accumulate, cudaStream_t stream) {
  return gemv_q8_quantized(w, x, n, y, y_stride, accumulate, stream);
}

Status Gemm::matmul(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                    int64_t y_stride, bool accumulate, cudaStream_t stream) {
  if (n <= kGemvMaxTokens && takes_q8(w)) {
    // 8-bit activations, integer dot products (as the CPU backend and llama.cpp).
    PAGODA_RETURN_IF_ERROR(ensure_q8_scratch(w.cols, n, stream));
    return gemv_q8(w, x, x_stride, n, y, y_stride, accumulate, q8_, q8_bytes_, stream);
  }
  if (n <= kGemvMaxTokens) return gemv(w, x, x_stride, n, y, y_stride, accumulate, stream);
  return matmul_lt(w, x, x_stride, n, y, y_stride, accumulate, stream);
}

Status Gemm::matmul_lt(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                       int64_t y_stride, bool accumulate, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  const void* a = w.data;
  if (w.fp8) return matmul_fp8(w, x, x_stride, n, y, y_stride, accumulate, stream);
  if (takes_q8(w)) {
    const size_t need = static_cast<size_t>(w.rows * w.cols) * 2;
    if (need > dequant_bytes_) {
      PAGODA_CUDA_TRY(cudaStreamSynchronize(stream));  // queued products may still read it
      cudaFree(dequant_);
      dequant_ = nullptr;
      dequant_bytes_ = 0;
      PAGODA_CUDA_TRY(cudaMalloc(&dequant_, need));
      dequant_bytes_ = need;
    }
    PAGODA_RETURN_IF_ERROR(dequantize_to_f16(w, static_cast<uint16_t*>(dequant_), stream));
    a = dequant_;
  }
  const ActType at = act_type_for(w.type);
  const Key key{static_cast<int>(at), w.rows, n, w.cols, x_stride, y_stride, accumulate};
  PAGODA_ASSIGN_OR_RETURN(Plan * p, plan(key, nullptr));
  return run(p, a, x, accumulate, y, stream);
}

Status Gemm::reserve_fp8(int64_t max_tokens, int64_t max_cols, int64_t max_rows) {
  // Activations for max_tokens (rounded up to 16), then a 16-token output tile for the
  // remainder rows of a padded product, 16-byte aligned (the ledger counts the same bytes).
  const size_t need =
      static_cast<size_t>(fp8_activation_scratch_bytes(max_tokens, max_cols, max_rows));
  const size_t x8 = need - static_cast<size_t>(16 * max_rows) * sizeof(float);
  if (!x_scale_) {
    // The activations' scale, then their max |x| 16 bytes on.
    PAGODA_CUDA_TRY(cudaMalloc(&x_scale_, 32));
    amax_ = reinterpret_cast<uint32_t*>(x_scale_ + 4);
    amax_reset_ = amax_ + 1;
    // 0 from here on between products: each product's quantization sets it back.
    PAGODA_CUDA_TRY(cudaMemset(x_scale_, 0, 32));
  }
  if (need <= x8_bytes_) return Status::ok();
  PAGODA_CUDA_TRY(cudaDeviceSynchronize());  // queued products may still read it
  cudaFree(x8_);
  x8_ = nullptr;
  x8_bytes_ = 0;
  PAGODA_CUDA_TRY(cudaMalloc(&x8_, need));
  x8_bytes_ = need;
  x8_tokens_ = max_tokens;
  x8_cols_ = max_cols;
  x8_rows_ = max_rows;
  x8_tile_ = static_cast<uint8_t*>(x8_) + x8;
  return Status::ok();
}

Status Gemm::run_fp8(const DeviceMatrix& w, const void* x8, int64_t n, float* y, int64_t y_stride,
                     bool accumulate, cudaStream_t stream) {
  const Key key{kFp8Key, w.rows, n, w.cols, w.cols, y_stride, accumulate};
  const Fp8Scales scales{w.fp8_scale_dev, x_scale_};
  PAGODA_ASSIGN_OR_RETURN(Plan * p, plan(key, &scales));
  // The plan is shared by every matrix of this shape: its scales are set per product
  // (cuBLASLt reads the pointers when the product is queued).
  PAGODA_RETURN_IF_ERROR(set_scales(p, scales));
  return run(p, w.data, x8, accumulate, y, stream);
}

// The activations are quantized to E4M3 with one scale for the whole batch (amax / 448,
// taken on the device), then cuBLASLt multiplies in FP8 and applies both scales. Its FP8
// kernels need the weights' sides to be multiples of 16 (the loader quantizes only such
// matrices) and 16-byte aligned scale pointers (it refuses a scale 4 bytes into a buffer);
// where it refuses a token count that is not a multiple of 16 the product is split: the
// multiple-of-16 part straight into y, the last rows padded to 16 through the tile.
Result<uint32_t*> Gemm::fp8_amax_slot() {
  if (!x_scale_) PAGODA_RETURN_IF_ERROR(reserve_fp8(0, 0, 0));
  return amax_;
}

Status Gemm::matmul_fp8_scanned(const DeviceMatrix& w, const void* x, int64_t x_stride, int n,
                                float* y, int64_t y_stride, bool accumulate, cudaStream_t stream) {
  if (!w.fp8 || n <= kGemvMaxTokens)
    return invalid_argument("matmul_fp8_scanned: FP8 weights and more than 8 tokens");
  return matmul_fp8(w, x, x_stride, n, y, y_stride, accumulate, stream, /*scanned=*/true);
}

Status Gemm::matmul_fp8(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                        int64_t y_stride, bool accumulate, cudaStream_t stream, bool scanned) {
  if (n > x8_tokens_ || w.cols > x8_cols_ || w.rows > x8_rows_)
    PAGODA_RETURN_IF_ERROR(reserve_fp8(std::max<int64_t>(n, x8_tokens_), std::max(w.cols, x8_cols_),
                                       std::max(w.rows, x8_rows_)));
  uint8_t* x8 = static_cast<uint8_t*>(x8_);
  const ActType at = act_type_for(w.type);
  // The max starts from 0 (set back by the last quantization); the producer of x may
  // have taken it already (scanned).
  if (!scanned) PAGODA_RETURN_IF_ERROR(fp8_amax(x, at, n, w.cols, x_stride, amax_, stream));
  PAGODA_RETURN_IF_ERROR(
      fp8_quantize(x, at, n, w.cols, x_stride, amax_, x8, x_scale_, stream, amax_reset_));
  const Key whole{kFp8Key, w.rows, n, w.cols, w.cols, y_stride, accumulate};
  const bool split = n % 16 != 0 && (fp8_always_pad_ || fp8_refused_.count(whole) > 0);
  if (!split) {
    const Status s = run_fp8(w, x8, n, y, y_stride, accumulate, stream);
    if (s.is_ok() || n % 16 == 0) return s;
    fp8_refused_.insert(whole);  // no algorithm for this token count: pad from now on
  }
  const int64_t n16 = n / 16 * 16, rest = n - n16;
  if (n16 > 0) PAGODA_RETURN_IF_ERROR(run_fp8(w, x8, n16, y, y_stride, accumulate, stream));
  uint8_t* tail = x8 + static_cast<size_t>(n16 * w.cols);
  PAGODA_CUDA_TRY(cudaMemsetAsync(tail + static_cast<size_t>(rest * w.cols), 0,
                                  static_cast<size_t>((16 - rest) * w.cols), stream));
  float* tile = static_cast<float*>(x8_tile_);
  float* y_tail = y + n16 * y_stride;
  const size_t row_bytes = static_cast<size_t>(w.rows) * sizeof(float);
  if (accumulate)
    PAGODA_CUDA_TRY(cudaMemcpy2DAsync(tile, row_bytes, y_tail, y_stride * sizeof(float), row_bytes,
                                      rest, cudaMemcpyDeviceToDevice, stream));
  PAGODA_RETURN_IF_ERROR(run_fp8(w, tail, 16, tile, w.rows, accumulate, stream));
  PAGODA_CUDA_TRY(cudaMemcpy2DAsync(y_tail, y_stride * sizeof(float), tile, row_bytes, row_bytes,
                                    rest, cudaMemcpyDeviceToDevice, stream));
  return Status::ok();
}

}  // namespace pagoda::cuda
