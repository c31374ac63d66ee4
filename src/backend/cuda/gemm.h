// Weight-times-activation products on the GPU. A few tokens go to the matrix-vector
// kernel (gemv.cu), which streams the weights at close to memory bandwidth; larger
// batches to cuBLASLt with f32 accumulation and an f32 output (the residual stream's
// type; with accumulate the product is added to it in the same pass, beta = 1).
// Quantized weights: a few tokens go to gemv_q8 (8-bit activations, integer dot
// products); larger batches are dequantized to fp16 into scratch for cuBLASLt. FP8
// weights: larger batches quantize their activations to E4M3 with a per-tensor scale
// taken on the device (amax / 448) and multiply in FP8 on the tensor cores (cuBLASLt,
// Hopper and Ada), the two scales applied by cuBLASLt.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "backend/cuda/gemv_q8.h"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

class Gemm {
 public:
  static Result<std::unique_ptr<Gemm>> create();
  ~Gemm();

  // y[t][r] (+)= sum_c W[r][c] x[t][c], t < n; x is in act_type_for(w.type).
  Status matmul(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                int64_t y_stride, bool accumulate, cudaStream_t stream);
  // Whether products of `w` with at most kGemvMaxTokens tokens take 8-bit activations
  // (the GGUF block types): their producers may then write a Q8Act (q8_input) straight.
  static bool takes_q8(const DeviceMatrix& w) { return is_q8_block_type(w.type); }

  // Where the 8-bit activations of n <= kGemvMaxTokens rows of `cols` values go before a
  // matmul_q8 (the scratch the product would quantize into, reserved for any width).
  Result<Q8Act> q8_input(int64_t cols, int n, cudaStream_t stream);
  // y[t][r] (+)= W[r] . x[t] over already quantized activations (takes_q8(w), n <= 8).
  Status matmul_q8(const DeviceMatrix& w, const Q8Act& x, int n, float* y, int64_t y_stride,
                   bool accumulate, cudaStream_t stream);
  // The same, always through cuBLASLt (tests and benchmarks compare the two paths).
  Status matmul_lt(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                   int64_t y_stride, bool accumulate, cudaStream_t stream);
  // Scratch for FP8 products of up to max_tokens tokens over matrices up to max_rows x
  // max_cols. A product larger than what was reserved regrows it after waiting for the
  // device, which would leave captured CUDA graphs pointing at freed memory: models
  // reserve their largest batch before capturing.
  Status reserve_fp8(int64_t max_tokens, int64_t max_cols, int64_t max_rows);
  // FP8 weights, more than kGemvMaxTokens tokens: the device word (fp8_amax's encoding,
  // 0 between products) into which the producer of a product's activations max-reduces
  // them (rms_norm's amax_out) before matmul_fp8_scanned, which then skips that pass.
  Result<uint32_t*> fp8_amax_slot();
  Status matmul_fp8_scanned(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                            int64_t y_stride, bool accumulate, cudaStream_t stream);
  // Tests: split every FP8 product whose token count is not a multiple of 16, as is done
  // where cuBLASLt refuses such a count.
  void set_fp8_always_pad(bool on) { fp8_always_pad_ = on; }
  // Whether FP8 products accumulate in the tensor cores' own precision throughout
  // (cuBLASLt's fast accumulation; PAGODA_FP8_FAST_ACCUM=1), rather than promoting
  // partial sums to f32 along k.
  bool fp8_fast_accum() const { return fp8_fast_accum_; }
  // CudaSwitches::fp8_fast_accum (PAGODA_FP8_FAST_ACCUM); off by default.
  void set_fp8_fast_accum(bool on) { fp8_fast_accum_ = on; }

 private:
  Gemm() = default;
  struct Plan;
  // (type, m, n, k, ldb, ldc, accumulate)
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  // Device pointers to an FP8 product's per-tensor scales: weights (A), activations (B).
  struct Fp8Scales {
    const void* a;
    const void* b;
  };
  // scales: FP8 products only (nullptr otherwise).
  Result<Plan*> plan(const Key& key, const Fp8Scales* scales);
  Status set_scales(Plan* p, const Fp8Scales& scales);
  Status ensure_q8_scratch(int64_t cols, int n, cudaStream_t stream);
  Status run(Plan* p, const void* a, const void* b, bool accumulate, float* y, cudaStream_t stream);
  Status matmul_fp8(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                    int64_t y_stride, bool accumulate, cudaStream_t stream, bool scanned = false);
  Status run_fp8(const DeviceMatrix& w, const void* x8, int64_t n, float* y, int64_t y_stride,
                 bool accumulate, cudaStream_t stream);

  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* dequant_ = nullptr;  // fp16 copy of the quantized matrix being multiplied
  size_t dequant_bytes_ = 0;
  void* q8_ = nullptr;  // 8-bit activations for the quantized matrix-vector kernel
  size_t q8_bytes_ = 0;
  void* x8_ = nullptr;  // E4M3 activations of an FP8 product, then a 16-token output tile
  size_t x8_bytes_ = 0;
  int64_t x8_tokens_ = 0, x8_cols_ = 0, x8_rows_ = 0;  // what x8_ was sized for
  void* x8_tile_ = nullptr;                            // in x8_, after the activations
  bool fp8_always_pad_ = false;
  bool fp8_fast_accum_ = false;
  std::set<Key> fp8_refused_;       // FP8 shapes cuBLASLt has no algorithm for
  float* x_scale_ = nullptr;        // the activations' scale (cuBLASLt wants it 16-byte aligned)
  uint32_t* amax_ = nullptr;        // 16 bytes on: their max |x| as float bits
  uint32_t* amax_reset_ = nullptr;  // after it: quantization blocks done (fp8_quantize)
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace pagoda::cuda
