// Bytes of the scratch an FP8 weight product needs for its activations, shared by the CUDA
// backend that allocates it (Gemm::reserve_fp8) and the memory ledger that counts it: the
// activations of max_tokens (rounded up to 16) quantized to one byte at the widest input,
// 16-byte aligned, then a 16-token f32 output tile at the widest output (the padded tail
// of a token count cuBLASLt refuses).
#pragma once

#include <cstdint>

namespace pagoda {

inline int64_t fp8_activation_scratch_bytes(int64_t max_tokens, int64_t max_cols,
                                            int64_t max_rows) {
  const int64_t x8 = ((max_tokens + 15) / 16 * 16 * max_cols + 15) / 16 * 16;
  return x8 + 16 * max_rows * 4;
}

}  // namespace pagoda
