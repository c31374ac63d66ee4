// Matrix products of weights with activations on the CPU, for every weight type the
// engine loads. Activations arrive as f32 and are converted once per call to the type
// the weight's kernel consumes (as llama.cpp does, so results agree closely):
//   Q4_0, Q8_0 -> Q8_0;  Q4_1 -> Q8_1;  Q3_K, Q4_K, Q5_K, Q6_K -> Q8_K;  F16 -> F16;
//   BF16 -> BF16;  F32 -> F32.
// Kernels work on the quantized blocks directly (integer dot products), are compiled
// per ISA and picked at run time (dispatch.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

// True when `t` can be used as a weight matrix by matmul().
bool is_supported_weight_type(DType t);

// Bytes a WeightMatrix of `type` holds for `elements` weights in rows that are whole 16-row
// groups (what the ledger counts; a matrix's last partial group is padded on top, and
// its allocation rounded to 64 bytes). 0 for an unsupported type.
int64_t packed_weight_bytes(DType type, int64_t elements);

// A weight matrix W[rows][cols] held in ordinary memory in the layout its kernel wants
// (possibly repacked from GGUF's row-major blocks at load).
class WeightMatrix {
 public:
  WeightMatrix();
  ~WeightMatrix();
  WeightMatrix(WeightMatrix&&) noexcept;
  WeightMatrix& operator=(WeightMatrix&&) noexcept;

  // Copies a GGUF tensor: `rows` rows of `cols` elements of `type`, rows contiguous.
  static Result<WeightMatrix> from_gguf(DType type, const void* data, int64_t rows, int64_t cols);

  DType type() const;
  int64_t rows() const;
  int64_t cols() const;
  // Bytes held; also the bytes one full product reads.
  size_t bytes() const;
  // Row r as f32 (embedding lookups with tied embeddings).
  void dequantize_row(int64_t r, float* dst) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Reusable buffers for converted activations; one per thread of control that calls
// matmul (the engine owns one), so steady-state calls never allocate.
class MatmulScratch {
 public:
  uint8_t* get(size_t bytes);

 private:
  std::vector<uint8_t> buf_;
};

// y[t*y_stride + r] = sum_c W[r][c] * x[t*x_stride + c] for t < n_tokens, r < w.rows().
// x has w.cols() valid elements per row. Runs on `pool`.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, MatmulScratch& scratch);

// Scalar reference conversions between f32 rows and any supported block type, in GGUF
// layout (n a multiple of the block size). quantize_row supports F32, F16, BF16, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q6_K, Q8_K; dequantize_row every type from dtype.h that
// is a float or block type.
Status quantize_row(DType type, const float* src, void* dst, int64_t n);
// The same, each element's rounding error weighted by `importance` (n values: the mean
// square of the input each weight multiplies, from an importance matrix; see `pagoda
// imatrix`) for the types whose quantizers search (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K);
// the other types, and a null `importance`, as quantize_row.
Status quantize_row_weighted(DType type, const float* src, void* dst, int64_t n,
                             const float* importance);
Status dequantize_row(DType type, const void* src, float* dst, int64_t n);

}  // namespace pagoda::cpu
