// The per-ISA kernel table behind matmul(), and the layouts of converted activations.
//
// Activations are converted in token groups of G tokens (G is the kernel's token tile),
// laid out so a kernel reaches token t of the group at a constant offset from one base
// pointer (t * stride), which lets the token loop be fully unrolled with every load a
// broadcast folded into the arithmetic instruction:
//
//   Q8 (for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, MXFP4, NF4, Q4_G64, Q4_G128), nb
//   blocks of 32:
//     qs  [nb][G][32] i8, then d [nb][G] f32 (the f16 scale as f32), then
//     aux [nb][G] 4 bytes: Q4_0 and Q4_G -8*sum(q) as i32, Q8_0 and the table types
//     -128*sum(q) as i32 (these undo the +8 / +128 offsets of the unsigned weights inside
//     the integer dot product; Q4_G's kernels shift it to -sum(q) for their zero points),
//     Q4_1 s = d * sum(q) as f32 (from Q8_1's f16)
//   Q8_K (for Q3_K, Q4_K, Q5_K, Q6_K), ns super-blocks of 256:
//     qs [ns][G][256] i8, d [ns][G] f32, bsum32 [ns][G][8] i16 (sums of q per 32, for
//     the mins of Q4_K/Q5_K), corr16 [ns][G][16] i32 (-32 * sums per 16, for Q6_K's
//     offset; shifted right by 3, Q3_K's -4)
//   F32, F16: [k/16][G][16] f32, column c of token t at ((c/16)*G + t)*16 + c%16 (for F16
//     weights each value rounded to f16 first); chunks of 16 keep one token's columns
//     together, so a one-token product reads one cache line per 16 columns, not per column
//   FP8 (the internal FP8_E4M3): as F32, values unrounded
//   BF16: avx512 the same over column pairs, [k/32][G][16] u32 of two bf16 (vdpbf16ps
//     operands); otherwise as F32 with values rounded to bf16
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/quant_blocks.h"

namespace pagoda::cpu {

struct GemmArgs {
  const WeightMatrix::Impl* w;
  const uint8_t* act;  // converted activations, token group g at act + g * act_group_bytes
  size_t act_group_bytes;
  int64_t n_tokens;
  float* y;
  int64_t y_stride;
};

struct GemmKernel {
  int token_group;  // G
  size_t (*act_group_bytes)(int64_t k);
  // Converts tokens [0, n) (n <= G) of x, rows x_stride apart with `cols` valid columns,
  // into one group at dst.
  void (*convert)(const float* x, int64_t x_stride, int n, int64_t cols, uint8_t* dst);
  // y for row groups [rg0, rg1) and token groups [tg0, tg1).
  void (*tile)(const GemmArgs& a, int64_t rg0, int64_t rg1, int64_t tg0, int64_t tg1);
};

// nullptr when the ISA level has no kernel of its own for `t` (matmul then uses a lower one).
const GemmKernel* gemm_kernel_generic(DType t);
const GemmKernel* gemm_kernel_avx2(DType t);
const GemmKernel* gemm_kernel_avx512(DType t);
// The same per family of types, one source file each.
const GemmKernel* gemm_q32_avx2(DType t);
const GemmKernel* gemm_kquant_avx2(DType t);
const GemmKernel* gemm_float_avx2(DType t);
const GemmKernel* gemm_q32_avx512(DType t);
const GemmKernel* gemm_kquant_avx512(DType t);
const GemmKernel* gemm_float_avx512(DType t);
// The kernel matmul uses for `t` at ISA level `isa` (falling back to lower levels).
const GemmKernel* gemm_kernel(DType t, Isa isa);

// ---- scalar activation converters (any G; SIMD converters must match them bit for bit) ----

// What the aux word of a Q8 activation block holds.
enum class Q8Aux { kSumTimesMinus8, kSumTimesMinus128, kS };
void convert_q8_scalar(const float* x, int64_t x_stride, int n, int64_t cols, int g, Q8Aux aux,
                       uint8_t* dst);
void convert_q8k_scalar(const float* x, int64_t x_stride, int n, int64_t cols, int g, uint8_t* dst);
// The Q8_K layout's d, bsum32 and corr16 words of block b, token t, from its 16 per-16 sums.
// Out of line (act_convert.cpp) for the reason find_gemm is.
struct Q8KActLayout;
void store_q8k_sums(const int16_t* bsum16, float d, const Q8KActLayout& lay, int64_t b, int t,
                    uint8_t* dst);
enum class FloatRound { kNone, kF16, kBF16 };
// [k][G] f32 layout; k = cols rounded up to even for kBF16 (the pad column is zero).
void convert_f32_scalar(const float* x, int64_t x_stride, int n, int64_t cols, int g, FloatRound r,
                        uint8_t* dst);

// A family's kernels at one ISA level, looked up by weight type (a handful of entries).
struct GemmEntry {
  DType type;
  GemmKernel kernel;
};
// Defined in matmul.cpp, not inline here: an inline copy instantiated in an AVX-512 file
// could be the one the linker keeps for the AVX2 files too (see README.md).
const GemmKernel* find_gemm(const GemmEntry* table, size_t n, DType t);

// The aux word a 32-element block type needs in its Q8 activations.
constexpr Q8Aux q8_aux_of(DType t) {
  // The table types' AVX-512 kernels take their values + 128 as unsigned bytes, as Q8_0's.
  if (t == DType::kQ8_0 || is_table4(t)) return Q8Aux::kSumTimesMinus128;
  if (t == DType::kQ4_1 || t == DType::kQ5_1) return Q8Aux::kS;
  return Q8Aux::kSumTimesMinus8;
}

// ---- activation layout arithmetic (shared by all ISA levels) ----

inline size_t round_up64(size_t n) {
  return (n + 63) / 64 * 64;
}

constexpr int kFloatChunk = 16;
// Bytes of a [k/16][G][16] group of 4-byte elements.
inline size_t chunked_bytes(int64_t k, int g) {
  return static_cast<size_t>((k + kFloatChunk - 1) / kFloatChunk) * g * kFloatChunk * 4;
}
// Element index of column c, token t in that layout.
inline int64_t chunked_index(int64_t c, int t, int g) {
  return (c / kFloatChunk * g + t) * kFloatChunk + c % kFloatChunk;
}

struct Q8ActLayout {
  int64_t nb;
  int g;
  size_t qs(int64_t b, int t) const { return (static_cast<size_t>(b) * g + t) * 32; }
  size_t d(int64_t b, int t) const {
    return static_cast<size_t>(nb) * g * 32 + (static_cast<size_t>(b) * g + t) * 4;
  }
  size_t aux(int64_t b, int t) const {
    return static_cast<size_t>(nb) * g * 36 + (static_cast<size_t>(b) * g + t) * 4;
  }
  size_t bytes() const { return round_up64(static_cast<size_t>(nb) * g * 40); }
};

struct Q8KActLayout {
  int64_t ns;
  int g;
  size_t qs(int64_t b, int t) const { return (static_cast<size_t>(b) * g + t) * 256; }
  size_t d(int64_t b, int t) const {
    return static_cast<size_t>(ns) * g * 256 + (static_cast<size_t>(b) * g + t) * 4;
  }
  size_t bsum32(int64_t b, int t) const {
    return static_cast<size_t>(ns) * g * 260 + (static_cast<size_t>(b) * g + t) * 16;
  }
  size_t corr16(int64_t b, int t) const {
    return static_cast<size_t>(ns) * g * 276 + (static_cast<size_t>(b) * g + t) * 64;
  }
  size_t bytes() const { return round_up64(static_cast<size_t>(ns) * g * 340); }
};

}  // namespace pagoda::cpu
