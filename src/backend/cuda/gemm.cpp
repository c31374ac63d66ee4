#include "backend/cuda/gemm.h"

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/gemv_q8.h"

namespace pagoda::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's split-K and stream-K scratch

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
}

Result<const Gemm::Plan*> Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  const auto [type_i, m, n, k, ldb, ldc, accumulate] = key;
  const cudaDataType_t t = cuda_type(static_cast<ActType>(type_i));
  auto p = std::make_unique<Plan>();
  // Column-major view: Y^T (m x n) = W (stored k x m, transposed) x X^T (k x n).
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

}  // namespace pagoda::cuda
