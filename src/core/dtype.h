// Element and block types. The numeric ids are GGUF's (ggml's) tensor type ids, so a
// type read from a file maps straight onto this enum; blocks are laid out exactly as in
// GGUF so weights are used in place. Ids from kFirstInternalDType up are Pagoda's own
// block types (loaders convert other formats to them); they have no GGUF type number, so
// the GGUF reader and writer refuse them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace pagoda {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kMXFP4 = 39,
  // Internal: bitsandbytes NF4 as IQ4_NL's block (f16 d, 16 bytes of Q4_0-order nibbles)
  // indexing the NF4 code book scaled to int8 (backend/cpu/quant_blocks.h, kNf4Values).
  kNF4 = 1000,
  // Internal: FP8 E4M3 (e4m3fn) weights as a checkpoint stores them, 32 bytes under one
  // f32 scale (backend/cpu/quant_blocks.h BlockFP8): value = d * e4m3(q), exact for FP8
  // checkpoints whose scales cover whole 32-column runs (model/fp8_checkpoint.h).
  kFP8 = 1001,
  // Internal: 4-bit codes with an integer zero point under one f16 scale per 64 or 128
  // columns, as AWQ, GPTQ and compressed-tensors W4A16 checkpoints store them
  // (backend/cpu/quant_blocks.h BlockQ4G): value = d * (q - z), exact for their groups.
  kQ4_G64 = 1002,
  kQ4_G128 = 1003,
};
inline constexpr uint32_t kFirstInternalDType = 1000;
inline constexpr bool is_internal_dtype(DType t) {
  return static_cast<uint32_t>(t) >= kFirstInternalDType;
}

struct DTypeInfo {
  std::string_view name;
  uint32_t block_elems;  // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
};

// nullptr when `id` is not a type Pagoda knows how to size (internal ids included: the
// GGUF reader checks is_internal_dtype itself).
const DTypeInfo* dtype_info(uint32_t id);
// ggml's name of a type id Pagoda does not handle (the grid i-quants IQ2_XXS..IQ1_M,
// ternary and other newer formats), for error messages; nullptr when unknown to both.
const char* unhandled_ggml_type_name(uint32_t id);
inline const DTypeInfo& dtype_info(DType t) {
  return *dtype_info(static_cast<uint32_t>(t));
}
inline std::string_view dtype_name(DType t) {
  return dtype_info(t).name;
}
// Parses "q8_0", "F16", ... (case-insensitive). Returns false when unknown or internal
// (NF4 is only ever made by a loader, never asked for by name).
bool parse_dtype(std::string_view name, DType* out);

// Bytes needed for a row of `n` elements; `n` must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_elems) * i.block_bytes;
}

// ---- scalar conversions (bit-exact, used by reference paths and converters) ----

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float fp16_to_f32(uint16_t h) {
  // Shift the half into a float's layout, then rescale the exponent with one multiply;
  // denormals come out right because the multiply normalises them.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t em = h & 0x7fff;
  if (em >= 0x7c00) return f32_from_bits(sign | 0x7f800000 | (em & 0x3ff) << 13);  // inf/nan
  return f32_from_bits(sign | bits_from_f32(f32_from_bits(em << 13) * 0x1p+112f));
}

inline uint16_t f32_to_fp16(float f) {
  // Round to nearest even, with overflow to inf and gradual underflow.
  const uint32_t x = bits_from_f32(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);   // nan
  if (ax >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (ax < 0x38800000) {  // result is a half denormal (or zero)
    // Adding 0.5 aligns the mantissa so the FPU does the rounding for us.
    const float r = f32_from_bits(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (bits_from_f32(r) - 0x3f000000));
  }
  const uint32_t mant_odd = (ax >> 13) & 1;
  const uint32_t r = ax + 0xc8000fff + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = bits_from_f32(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 64);  // quiet nan
  return static_cast<uint16_t>((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

// x rounded once to BF16 (to nearest, ties to even); for |x| below 2^-126, through f32.
// (An FP8 weight times its f32 scale is exact in a double, so this rounds it once.)
inline uint16_t f64_to_bf16(double x) {
  if (std::isnan(x)) return f32_to_bf16(static_cast<float>(x));
  uint64_t bits;
  std::memcpy(&bits, &x, 8);
  const int exp = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  // Outside bf16's normal range (subnormal results, overflow) f32's own rounding decides.
  if (exp < -126 || exp > 127) return f32_to_bf16(static_cast<float>(x));
  // Keep 7 of the 52 stored mantissa bits, to nearest with ties to even; a carry moves
  // into the exponent as it should. The result has 8 significant bits, which f32 holds.
  const uint64_t r = (bits + ((uint64_t{1} << 44) - 1) + ((bits >> 45) & 1)) >> 45 << 45;
  double d;
  std::memcpy(&d, &r, 8);
  return static_cast<uint16_t>(bits_from_f32(static_cast<float>(d)) >> 16);
}

}  // namespace pagoda
