// Quantized block layouts, byte for byte as GGUF stores them (ggml's block_* types), so
// a tensor read from a file can be reinterpreted as an array of these. Halves are raw
// IEEE binary16 bits (see core/dtype.h for conversions).
#pragma once

#include <cstdint>
#include <cstring>

namespace pagoda::cpu {

constexpr int kQK = 32;    // elements per block of the 32-element formats
constexpr int kQKK = 256;  // elements per super-block of the K formats

// value = (q - 8) * d; element j < 16 in the low nibble of qs[j], j >= 16 in the high
// nibble of qs[j - 16].
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
// value = q * d + m; nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
// value = (q - 16) * d; low 4 bits as Q4_0, bit 4 of element j is bit j of qh (LE u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
// value = q * d + m; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// value = q * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
// value = q * d; s = d * sum(q), kept so a dot with Q4_1 can add m * s in one step.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};
// 16 sub-blocks of 16: value = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4).
// Element 128n + 32k + l (l < 32) is bits 2k..2k+1 of qs[32n + l]; sub-block index
// 8n + 2k + l / 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
// 16 sub-blocks of 16: value = d * (s[j] - 32) * (q - (hbit ? 0 : 4)) with 6-bit s[j]
// split as low nibbles in scales[0..7] and 2-bit high parts in scales[8..11]; q is
// laid out as Q2_K, its high bit in hmask[l] bit (4n + k).
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32: value = d * sc[j] * q - dmin * m[j] with 6-bit sc/m packed in
// scales (k4_scale_min). Element 64c + l (l < 32) is the low nibble of qs[32c + l],
// element 64c + 32 + l the high nibble.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// Q4_K plus a fifth bit: element 64c + l has it in qh[l] bit 2c, 64c + 32 + l in bit
// 2c + 1.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// 16 sub-blocks of 16: value = d * scales[j] * (q - 32), q 6 bits. In each 128-element
// half n, element 128n + 32k + l (l < 32) has its low 4 bits in ql[64n + l + 32 (k & 1)]
// (low nibble for k < 2, high for k >= 2) and bits 4..5 in qh[32n + l] bits 2k..2k+1.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// The activation format of the K quants: value = q * d, bsums[j] = sum of q over
// elements 16j..16j+15.
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};

// The 4-bit non-linear types (llama.cpp's ggml-common.h): a nibble indexes a 16-entry
// int8 table. value = d * kIq4nlValues[q]; nibbles in Q4_0's order.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
// 8 sub-blocks of 32: value = d * (ls[j] - 32) * kIq4nlValues[q], ls a 6-bit scale whose
// low 4 bits are nibble j % 2 of scales_l[j / 2] and high 2 bits bits 2j..2j+1 of
// scales_h. Sub-block j's nibbles are qs[16j..16j+15] in Q4_0's order.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
// OCP microscaling FP4: value = 2^(e - 127) * E2M1(q), held as 2^(e - 128) *
// kMxfp4Values[q] (the E2M1 values doubled so they are integers); nibbles as Q4_0.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};

// FP8 E4M3 weights in a checkpoint's own bytes (the internal DType::kFP8): value =
// d * e4m3fn(qs[i]), d the f32 scale of the checkpoint's tile, row or tensor that holds
// the 32 columns. 9 bits a weight.
struct BlockFP8 {
  float d;
  uint8_t qs[32];
};
static_assert(sizeof(BlockFP8) == 36);

// 4-bit codes with an integer zero point, S sub-blocks of 32 under one f16 scale (the
// internal Q4_G64, S = 2, and Q4_G128, S = 4): value = d * (q - z), z in [0, 15]. Sub-block
// j's codes are qs[16j..16j+15] in Q4_0's nibble order. The group of an AWQ or GPTQ
// checkpoint exactly, in 4.5 and 4.25 bits a weight (a g64 and a g128 file hold 4.31 and
// 4.16).
template <int S>
struct BlockQ4G {
  uint16_t d;
  uint8_t z;
  uint8_t pad;
  uint8_t qs[16 * S];
};
using BlockQ4G64 = BlockQ4G<2>;
using BlockQ4G128 = BlockQ4G<4>;
static_assert(sizeof(BlockQ4G64) == 36 && sizeof(BlockQ4G128) == 68);

inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// bitsandbytes' NF4 code book (its quant_map, the quantiles of N(0, 1) scaled to [-1, 1];
// bitsandbytes/functional.py get_4bit_type) and Pagoda's NF4 block: IQ4_NL's layout with
// value = d * kNf4Values[q], kNf4Values[i] = round(127 * kNf4Code[i]) and d = absmax / 127
// rounded to f16. The int8 table lets NF4 run through IQ4_NL's kernels (a vpshufb lookup
// into the Q8_0 integer path). What it costs against bitsandbytes' own dequantization
// (absmax * kNf4Code[q]): the table moves each code by at most 0.466/127 = 0.37% of the
// block's absmax (|127 c - round(127 c)| is largest at -0.1848 -> -23), and d's
// f16 rounding adds 2^-11 relative (more where absmax / 127 is an f16 subnormal, absmax
// below 0.0078). Measured on SmolLM2-135M by tests/model/test_bnb_nf4.py against
// bitsandbytes.functional.dequantize_4bit: max 0.38% and RMS 0.23% of the block's absmax.
inline constexpr float kNf4Code[16] = {-1.0f,
                                       -0.6961928009986877f,
                                       -0.5250730514526367f,
                                       -0.39491748809814453f,
                                       -0.28444138169288635f,
                                       -0.18477343022823334f,
                                       -0.09105003625154495f,
                                       0.0f,
                                       0.07958029955625534f,
                                       0.16093020141124725f,
                                       0.24611230194568634f,
                                       0.33791524171829224f,
                                       0.44070982933044434f,
                                       0.5626170039176941f,
                                       0.7229568362236023f,
                                       1.0f};
inline constexpr int8_t kNf4Values[16] = {-127, -88, -67, -50, -36, -23, -12, 0,
                                          10,   20,  31,  43,  56,  71,  92,  127};
using BlockNF4 = BlockIQ4_NL;

inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as f32 (e = 0 and 1 are f32 denormals), the scale of kMxfp4Values.
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The 6-bit scale of IQ4_XS sub-block j (0..7), before the -32 offset.
inline int iq4xs_scale(int j, const BlockIQ4_XS& b) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Sub-block j (0..7) scale and min of Q4_K/Q5_K: j < 4 keep 6 bits in bytes j and j + 4;
// j >= 4 keep their low 4 bits in byte j + 4 and their top 2 bits in bits 6..7 of bytes
// j - 4 and j.
inline void k4_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Inverse of k4_scale_min for all eight sub-blocks (values < 64).
inline void k4_pack_scale_min(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// Sub-block j (0..15) 6-bit scale of Q3_K, before the -32 offset.
inline int q3k_scale(int j, const uint8_t* s) {
  const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  const int high = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return low | (high << 4);
}

}  // namespace pagoda::cpu
