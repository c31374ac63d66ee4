// Re-encoding rows from one GGUF block type to another, for a backend that multiplies
// fewer types than files hold (the CUDA backend takes only the 32-element formats, see
// model/cuda_weight_types.h; the CPU backend lacks kernels for Q8_1 and Q8_K,
// see model/weight_types.h). Exact where the target holds the source's values:
//   Q4_0, Q5_0 -> Q8_0: the same d, q - 8 (q - 16) as a byte; Q8_1 -> Q8_0: its d and bytes.
//   Q3_K -> Q6_K: both have 16-element sub-blocks under one fp16 d; Q3_K's 6-bit scale
//     less 32 is Q6_K's int8 scale and its 3-bit quant plus 32 Q6_K's 6-bit one.
//   IQ4_NL, NF4 -> Q8_0: the same d, the table value as a byte; MXFP4 -> Q8_0 likewise with d =
//     2^(e - 128), exact while that is an f16 (e in [104, 143]; below, values under
//     12 * 2^-25 lose bits to f16 subnormals; above, an error).
//   IQ4_XS -> Q8_0: per 32, d = d * (ls - 32) rounded to f16 (relative error <= 2^-11 on
//     the step; exact when it fits 11 bits), the table value as a byte.
//   Q4_K -> Q4_1: a Q4_K sub-block of 32 is a Q4_1 block with step d * sc and offset
//     -dmin * m; those are rounded to fp16 (relative error <= 2^-11 each), the 4-bit
//     quants are kept.
//   Q4_G64, Q4_G128 (internal) -> Q4_1: each 32-column sub-block with the group's d and
//     m = -d z rounded to f16 (relative error <= 2^-11 on m; exact when d z fits 11 bits).
//   FP8 (internal) -> BF16: each weight the exact product e4m3(q) * d rounded once to bf16
//     (ties to even), what the FP8 checkpoint loaders wrote before the CPU kept FP8.
// Anything else is dequantized to f32 and quantized again with the reference quantizer
// (quantize_row); into Q8_0 that moves each weight by at most half a step (max |w| of its
// 32-element block / 254) plus the fp16 rounding of the step.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

// dst (row_bytes(to, n)) = the n elements of src (type `from`) in type `to`; n must be a
// multiple of both types' block sizes. Errors on types quantize_row / dequantize_row do
// not take and on a Q4_K step or offset beyond fp16's range.
Status convert_row(DType from, const void* src, DType to, void* dst, int64_t n);

// What a loader converted, for its start-up log and describe(): "Q4_K->Q4_1 x 16, Q6_K->
// Q8_0 x 14 (+31.6 MiB, 0.21 s)"; empty when nothing was. Inline: the CUDA plugin uses it.
class ConversionTally {
 public:
  void add(DType from, DType to, size_t bytes_in, size_t bytes_out, double seconds) {
    ++count_[{from, to}];
    growth_ += static_cast<int64_t>(bytes_out) - static_cast<int64_t>(bytes_in);
    seconds_ += seconds;
  }
  std::string describe() const {
    std::string s;
    for (const auto& [k, n] : count_)
      s += (s.empty() ? "" : ", ") + std::string(dtype_name(k.first)) + "->" +
           std::string(dtype_name(k.second)) + " x " + std::to_string(n);
    if (!s.empty())
      s += str_format(" (%+.1f MiB, %.2f s)", static_cast<double>(growth_) / 1048576.0, seconds_);
    return s;
  }

 private:
  std::map<std::pair<DType, DType>, int> count_;
  int64_t growth_ = 0;
  double seconds_ = 0;
};

// A whole matrix (`rows` rows of `cols` elements of `from`, GGUF layout) in type `to`,
// rows converted in parallel on `pool`, and counted in `tally`. Inline: the CUDA plugin
// uses it.
inline Result<std::vector<uint8_t>> convert_matrix(DType from, const uint8_t* src, int64_t rows,
                                                   int64_t cols, DType to, ThreadPool& pool,
                                                   ConversionTally* tally) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t in_row = row_bytes(from, cols), out_row = row_bytes(to, cols);
  std::vector<uint8_t> out(out_row * static_cast<size_t>(rows));
  std::vector<Status> errors(static_cast<size_t>(rows));
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      errors[static_cast<size_t>(r)] =
          convert_row(from, src + static_cast<size_t>(r) * in_row, to,
                      out.data() + static_cast<size_t>(r) * out_row, cols);
  });
  for (const Status& e : errors)
    if (!e) return e;
  tally->add(from, to, in_row * static_cast<size_t>(rows), out.size(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}
}  // namespace pagoda::cpu
