#include "backend/cuda/gemm.h"

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/gemv_q8.h"

namespace pagoda::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's split-K and stream-K scratch
constexpr int kFp8Key = -1;                    // plan key type of E4M3 x E4M3 products

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
  cublasLtMatmulAlgo_t algo{};
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
  cudaFree(amax_);
}

Result<const Gemm::Plan*> Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  const auto [type_i, m, n, k, ldb, ldc, accumulate] = key;
  const cudaDataType_t t =
      type_i == kFp8Key ? CUDA_R_8F_E4M3 : cuda_type(static_cast<ActType>(type_i));
  auto p = std::make_unique<Plan>();
  // Column-major view: Y^T (m x n) = W (stored k x m, transposed) x X^T (k x n): the
  // "TN" form FP8 products require.
  PAGODA_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  PAGODA_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  PAGODA_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
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
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  PAGODA_RETURN_IF_ERROR(cublas_status(st, "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0)
    return unsupported(str_format("cuBLASLt has no algorithm for a %lld x %lld x %lld product",
                                  static_cast<long long>(m), static_cast<long long>(n),
                                  static_cast<long long>(k)));
  p->algo = result.algo;
  (void)accumulate;  // part of the key only: beta is passed per call
  const Plan* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

Status Gemm::matmul(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                    int64_t y_stride, bool accumulate, cudaStream_t stream) {
  const bool quant = w.type != DType::kF32 && w.type != DType::kF16 && w.type != DType::kBF16;
  if (n <= kGemvMaxTokens && quant) {
    // 8-bit activations, integer dot products (as the CPU backend and llama.cpp).
    // Sized for any row width up to 64K at once, so it is not regrown (and freed under
    // queued kernels) between the products of one step.
    const size_t need =
        std::max(gemv_q8_scratch_bytes(w.cols, n), gemv_q8_scratch_bytes(65536, kGemvMaxTokens));
    if (need > q8_bytes_) {
      PAGODA_CUDA_TRY(cudaStreamSynchronize(stream));
      cudaFree(q8_);
      q8_ = nullptr;
      q8_bytes_ = 0;
      PAGODA_CUDA_TRY(cudaMalloc(&q8_, need));
      q8_bytes_ = need;
    }
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
  const bool quant = w.type != DType::kF32 && w.type != DType::kF16 && w.type != DType::kBF16;
  if (quant) {
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
  PAGODA_ASSIGN_OR_RETURN(const Plan* p, plan(key));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  PAGODA_CUBLAS_TRY(cublasLtMatmul(lt_, p->op, &alpha, a, p->a, x, p->b, &beta, y, p->c, y, p->c,
                                   &p->algo, workspace_, workspace_bytes_, stream));
  return Status::ok();
}

// cuBLASLt's FP8 kernels want every dimension a multiple of 16: the weights' are (the
// loader quantizes only such matrices), the token count is padded with zero rows, whose
// outputs land in scratch and are dropped.
Status Gemm::matmul_fp8(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                        int64_t y_stride, bool accumulate, cudaStream_t stream) {
  const int64_t n_pad = (n + 15) / 16 * 16;
  const bool padded = n_pad != n;
  const size_t x8_need = static_cast<size_t>(n_pad * w.cols);
  const size_t out_need = padded ? static_cast<size_t>(n_pad * w.rows) * sizeof(float) : 0;
  if (x8_need + out_need > x8_bytes_) {
    PAGODA_CUDA_TRY(cudaStreamSynchronize(stream));  // queued products may still read it
    cudaFree(x8_);
    x8_ = nullptr;
    x8_bytes_ = 0;
    PAGODA_CUDA_TRY(cudaMalloc(&x8_, x8_need + out_need));
    x8_bytes_ = x8_need + out_need;
  }
  if (!amax_) {
    PAGODA_CUDA_TRY(cudaMalloc(&amax_, 2 * sizeof(float)));
    x_scale_ = reinterpret_cast<float*>(amax_ + 1);
  }
  uint8_t* x8 = static_cast<uint8_t*>(x8_);
  const ActType at = act_type_for(w.type);
  PAGODA_CUDA_TRY(cudaMemsetAsync(amax_, 0, sizeof(uint32_t), stream));
  PAGODA_RETURN_IF_ERROR(fp8_amax(x, at, n, w.cols, x_stride, amax_, stream));
  PAGODA_RETURN_IF_ERROR(fp8_quantize(x, at, n, w.cols, x_stride, amax_, x8, x_scale_, stream));
  float* out = y;
  int64_t ld_out = y_stride;
  if (padded) {
    PAGODA_CUDA_TRY(cudaMemsetAsync(x8 + static_cast<size_t>(n) * w.cols, 0,
                                    static_cast<size_t>((n_pad - n) * w.cols), stream));
    // Round up so the scratch output starts 16-byte aligned.
    out = reinterpret_cast<float*>(x8 + (x8_need + 15) / 16 * 16);
    ld_out = w.rows;
    if (accumulate)
      PAGODA_CUDA_TRY(cudaMemcpy2DAsync(out, ld_out * sizeof(float), y, y_stride * sizeof(float),
                                        w.rows * sizeof(float), n, cudaMemcpyDeviceToDevice,
                                        stream));
  }
  const Key key{kFp8Key, w.rows, n_pad, w.cols, w.cols, ld_out, accumulate};
  PAGODA_ASSIGN_OR_RETURN(const Plan* p, plan(key));
  // The plan is shared by every matrix of this shape: its scales are set per product.
  const void* a_scale = w.fp8_scale_dev;
  const void* b_scale = x_scale_;
  PAGODA_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                   &a_scale, sizeof(a_scale)));
  PAGODA_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                   &b_scale, sizeof(b_scale)));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  PAGODA_CUBLAS_TRY(cublasLtMatmul(lt_, p->op, &alpha, w.data, p->a, x8_, p->b, &beta, out, p->c,
                                   out, p->c, &p->algo, workspace_, workspace_bytes_, stream));
  if (padded)
    PAGODA_CUDA_TRY(cudaMemcpy2DAsync(y, y_stride * sizeof(float), out, ld_out * sizeof(float),
                                      w.rows * sizeof(float), n, cudaMemcpyDeviceToDevice, stream));
  return Status::ok();
}

}  // namespace pagoda::cuda
