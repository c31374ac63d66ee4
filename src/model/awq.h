// AWQ (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization for LLM Compression and
// Acceleration") for linear layers: the quantizer, the two searches, and the AWQ GEMM
// packing that AutoAWQ, transformers and vLLM read. model/hf_awq.h applies it to a decoder
// layer (which products share a scale, where it is folded).
//
// Quantizer, per row and group of `group` input columns: asymmetric min/max, scale =
// (max - min) / 15 (at least 1e-5 / 15), rounded to f16 before use so that the stored
// scale is the one quantized with; zero = clamp(round(-min / scale), 0, 15); q =
// clamp(round(w / scale) + zero, 0, 15), w' = scale (q - zero). Unlike GPTQ's, the range
// need not hold 0 (as AutoAWQ's pseudo_quantize_tensor).
//
// Scale search. Products that read one input x share per-column factors s: each weight
// W becomes W diag(s) and the input x / s (the division folded into whatever makes x),
// so the 16-bit function is unchanged while the quantizer sees columns that matter
// more at a larger size. s_j = mean|x_j|^alpha, at least 1e-4, divided by sqrt(max s *
// min s) (AutoAWQ's normalisation, without its duo_scaling weight term); alpha on the grid
// 0, 1/20, ..., 19/20 (alpha 0 is round-to-nearest), keeping the one of least output error.
// The error of W against Wq = Q(W diag(s)) diag(s)^-1 over the calibration tokens is
// sum_t |(W - Wq) x_t|^2 = sum over rows e of e^T H e with H = sum_t x_t x_t^T, the
// calibration Hessian (model/hessian.h), computed as a GEMM E H: no activations kept.
// This measures each product's own output, summed over the group's products; AutoAWQ
// measures the whole attention or MLP block's output instead (softmax and SiLU included).
//
// Clip search (AutoAWQ's auto_clip): per row and group, the weights are clamped to
// [-c, c] before quantizing, c = max|w| (1 - i / 20) for i = 0..9 (1.0 down to 0.55),
// keeping the c of least output error e^T H_gg e, e the group's error against the
// unclamped weights and H_gg the group's diagonal block of H: this ignores the coupling
// between groups of one row (their errors' cross terms), where AutoAWQ, which also
// measures one group at a time, does the same.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace pagoda {

inline constexpr int kAwqScaleGrid = 20;  // alpha = i / 20, i < 20
inline constexpr int kAwqClipGrid = 20;   // c = max|w| (1 - i / 20) ...
inline constexpr int kAwqClipSteps = 10;  // ... for i < 10 (AutoAWQ's max_shrink 0.5)

// Round half to even, as std::nearbyint in the default rounding mode, in a form the
// compiler vectorizes (nearbyint is a library call on baseline x86-64): exact for |v| <
// 2^22; beyond, the result keeps its sign and size, which the codes' clamp to 0..15 makes
// equal.
inline float awq_round(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it leaves no fraction bits
  return (v + kMagic) - kMagic;
}

// One group's quantization parameters. `clip` (>= 0) clamps the weights to [-clip, clip]
// first; pass infinity for none.
struct AwqGroup {
  uint16_t scale_f16 = 0;
  float scale = 0;
  int zero = 0;
};
AwqGroup awq_group_params(const float* w, int64_t n, float clip);
// The code of w in group `g` (w clamped as the group's parameters were found).
inline int awq_code(float w, float clip, const AwqGroup& g) {
  const float q = awq_round(std::clamp(w, -clip, clip) / g.scale) + static_cast<float>(g.zero);
  return static_cast<int>(std::clamp(q, 0.0f, 15.0f));
}

// The quantizer's output for a row-major [rows, cols] matrix; `clip` is null (none) or
// [rows * cols / group] per row and group. cols must be a multiple of group.
void awq_fake_quantize(const float* w, int64_t rows, int64_t cols, int64_t group, const float* clip,
                       float* out, ThreadPool& pool);

// sum over rows of e^T H e (and each row's term) for matrices E [rows, cols] against one
// symmetric H [cols, cols], by the CPU backend's f32 GEMM.
class HessianError {
 public:
  static Result<HessianError> make(const float* h, int64_t cols);
  // Sum of the rows' terms; `per_row` (may be null) gets each.
  double operator()(const float* e, int64_t rows, ThreadPool& pool,
                    std::vector<double>* per_row = nullptr);

 private:
  cpu::WeightMatrix h_;
  cpu::MatmulScratch scratch_;
  std::vector<float> y_;
  int64_t cols_ = 0;
};

// The factors for one alpha (the header's formula).
std::vector<float> awq_scales(const std::vector<float>& mean_abs, double alpha);

struct AwqProduct {
  const float* w;  // row-major [rows, cols], cols = the shared input's size
  int64_t rows;
};

struct AwqScaleSearch {
  std::vector<float> scales;  // the best alpha's factors
  double alpha = 0;
  double error = 0;      // the group's output error at that alpha
  double error_rtn = 0;  // at alpha 0: round-to-nearest
};

// The scale search over `products` sharing an input of mean_abs.size() columns with
// Hessian `h` (row-major [cols, cols]).
Result<AwqScaleSearch> awq_search_scales(const std::vector<AwqProduct>& products,
                                         const std::vector<float>& h,
                                         const std::vector<float>& mean_abs, int64_t group,
                                         ThreadPool& pool);

// H of the input x / s: H_ab / (s_a s_b).
std::vector<float> awq_scale_hessian(const std::vector<float>& h, const std::vector<float>& s);

// The clip search for w [rows, cols] (already scaled) against its input's Hessian `h`
// [cols, cols] (of the scaled input): c per row and group, [rows * cols / group].
Result<std::vector<float>> awq_search_clip(const float* w, int64_t rows, int64_t cols,
                                           const std::vector<float>& h, int64_t group,
                                           ThreadPool& pool);

// AWQ GEMM tensors of one nn.Linear of `cols` inputs and `rows` outputs:
//   qweight int32 [cols, rows / 8]: word (i, j) holds input i's codes of output columns
//     8j .. 8j+7, output 8j + k in nibble {0, 4, 1, 5, 2, 6, 3, 7}[k] (AutoAWQ's interleave);
//   qzeros int32 [cols / group, rows / 8], the zero points in the same order;
//   scales f16 [cols / group, rows].
struct AwqTensors {
  std::vector<int32_t> qweight, qzeros;
  std::vector<uint16_t> scales;
};

// w [rows, cols] quantized (clip as awq_fake_quantize's) and packed; rows a multiple of 8.
AwqTensors awq_pack(const float* w, int64_t rows, int64_t cols, int64_t group, const float* clip,
                    ThreadPool& pool);

}  // namespace pagoda
