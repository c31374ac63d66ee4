// The device layout of the K quant types the CUDA kernels multiply in their own bits
// (Q4_K, Q5_K, Q6_K), and the arithmetic on one 32-element block of it. Header-only and
// free of CUDA headers: the kernels (weights.cu, gemv_q8.cu) call these functions on
// the device, the unit tests (tests/ops/cuda_kquant_layout_test.cpp) call the very same
// functions on the host against the CPU backend's dequantization, and the memory ledger
// counts the bytes with kq_device_bytes.
//
// Why a layout of our own rather than the GGUF block: the 8-bit activations of the
// quantized matrix-vector kernel come in blocks of 32 (Q8Act), and there one lane takes
// one 32-element weight block at a time with 16-byte loads. Each 256-element K block is
// split into its eight 32-element sub-blocks, stored as the 32-element types are:
//   quants: 16 bytes a sub-block, byte i holding element i (low nibble) and element
//           i + 16 (high nibble), as Q4_0 / Q4_1;
//   high:   the bits above the nibble, Q5_K one bit an element (4 bytes, bit e for
//           element e), Q6_K two (8 bytes: element e's bits at 2 (e % 16) of word e / 16);
//   scales: one 16-bit word a sub-block: Q4_K / Q5_K the 6-bit scale (low byte) and min
//           (high byte), Q6_K its two 16-element sub-blocks' int8 scales (low, high);
//   supers: two fp16 words a 256-element block: d and dmin (Q6_K: d and 0).
// That is 148 bytes per 256 weights for Q4_K (GGUF: 144), 180 for Q5_K (176) and 212 for
// Q6_K (210): the file's bits, against 160 (Q4_K as Q4_1) and 272 (Q5_K, Q6_K as Q8_0)
// when they were converted at load. Values are exactly the file's: the scales are
// multiplied out in f32 in the same order as the CPU's dequantization.
#pragma once

#include <cstdint>

#include "core/dtype.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define PAGODA_HD __host__ __device__ __forceinline__
#else
#define PAGODA_HD inline
#endif

namespace pagoda::kq {

enum class KType : int { kNone, kQ4K, kQ5K, kQ6K };

// The K type of a DType with this device layout (kNone for every other type).
PAGODA_HD KType ktype_of(DType t) {
  return t == DType::kQ4_K   ? KType::kQ4K
         : t == DType::kQ5_K ? KType::kQ5K
         : t == DType::kQ6_K ? KType::kQ6K
                             : KType::kNone;
}

// High-bit bytes of one 32-element sub-block.
PAGODA_HD int high_bytes(KType t) {
  return t == KType::kQ5K ? 4 : t == KType::kQ6K ? 8 : 0;
}

// Device bytes of `elements` weights (a multiple of 256), the arrays unpadded.
PAGODA_HD int64_t device_bytes(KType t, int64_t elements) {
  const int64_t subs = elements / 32;
  return subs * (16 + high_bytes(t) + 2) + elements / 256 * 4;
}

// fp16 bits as f32, the same value on both sides.
PAGODA_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return pagoda::fp16_to_f32(h);
#endif
}

// a . b over four signed bytes each, plus c (the device's dp4a).
PAGODA_HD int dot4(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int k = 0; k < 4; ++k)
    c += static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * k))) *
         static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * k)));
  return c;
#endif
}

// Four 1-bit values (bits 0..3 of x) as bit 0 of four bytes.
PAGODA_HD uint32_t spread1(uint32_t x) {
  return ((x & 0xFu) * 0x00204081u) & 0x01010101u;
}
// Four 2-bit values (bits 0..7 of x) as bits 0..1 of four bytes.
PAGODA_HD uint32_t spread2(uint32_t x) {
  x &= 0xFFu;
  return (x | x << 6 | x << 12 | x << 18) & 0x03030303u;
}

// One 32-element sub-block as the kernels hold it.
struct Block {
  uint32_t q[4];   // quants: nibbles
  uint32_t hi[2];  // high bits (Q5_K: hi[0]; Q6_K: both)
  float d = 0.0f;  // Q4_K / Q5_K: d * scale; Q6_K: d * scale of elements 0..15
  float m = 0.0f;  // Q4_K / Q5_K: dmin * min; Q6_K: d * scale of elements 16..31
};

// The block's two f32 factors from its scale word and its 256-block's d and dmin.
PAGODA_HD void set_factors(KType t, uint16_t scale, uint16_t d, uint16_t dmin, Block* b) {
  const float fd = half_to_float(d);
  if (t == KType::kQ6K) {
    b->d = fd * static_cast<float>(static_cast<int8_t>(scale & 0xFF));
    b->m = fd * static_cast<float>(static_cast<int8_t>(scale >> 8));
  } else {
    b->d = fd * static_cast<float>(scale & 0xFF);
    b->m = half_to_float(dmin) * static_cast<float>(scale >> 8);
  }
}

// The quant of element e (0..31) of a sub-block before any offset (0..15 for Q4_K, 0..31,
// 0..63) from its quant byte (byte e % 16 of the sub-block's 16) and its high word (Q5_K:
// hi[0]; Q6_K: hi[e / 16]).
PAGODA_HD int quant_of(KType t, uint32_t byte, uint32_t high, int e) {
  const int nib = static_cast<int>(byte >> (e < 16 ? 0 : 4)) & 0xF;
  if (t == KType::kQ5K) return nib | static_cast<int>((high >> e) & 1) << 4;
  if (t == KType::kQ6K) return nib | static_cast<int>((high >> (2 * (e % 16))) & 3) << 4;
  return nib;
}

// Element e's value from its quant and the sub-block's factors, bit for bit the CPU's
// dequantize_row (the same products in the same order).
PAGODA_HD float value_of(KType t, int q, float d, float m, int e) {
  if (t == KType::kQ6K) return (e < 16 ? d : m) * static_cast<float>(q - 32);
  return d * static_cast<float>(q) - m;
}

PAGODA_HD float element(KType t, const Block& b, int e) {
  const uint32_t byte = (b.q[(e & 15) / 4] >> (8 * (e & 3))) & 0xFF;
  return value_of(t, quant_of(t, byte, b.hi[t == KType::kQ6K ? e / 16 : 0], e), b.d, b.m, e);
}

// The block's dot product with 32 8-bit activations (xs: their bytes, four a word, in
// element order; dx their scale; c the sum of the 32 quants): integer sums over each
// half of the nibbles (elements 0..15 and 16..31), the high bits merged into the bytes
// first, then the two factors.
PAGODA_HD float dot(KType t, const Block& b, const int* xs, float dx, int c) {
  int s0 = 0, s1 = 0;
  for (int k = 0; k < 4; ++k) {
    uint32_t w0 = b.q[k] & 0x0F0F0F0Fu, w1 = (b.q[k] >> 4) & 0x0F0F0F0Fu;
    if (t == KType::kQ5K) {
      w0 |= spread1(b.hi[0] >> (4 * k)) << 4;
      w1 |= spread1(b.hi[0] >> (16 + 4 * k)) << 4;
    } else if (t == KType::kQ6K) {
      w0 |= spread2(b.hi[0] >> (8 * k)) << 4;
      w1 |= spread2(b.hi[1] >> (8 * k)) << 4;
    }
    s0 = dot4(static_cast<int>(w0), xs[k], s0);
    s1 = dot4(static_cast<int>(w1), xs[4 + k], s1);
  }
  if (t == KType::kQ6K) {
    // (q - 32) . x: the first half's activation sum from four more dp4a, the second's
    // from the block's.
    int c0 = 0;
    for (int k = 0; k < 4; ++k) c0 = dot4(0x01010101, xs[k], c0);
    return dx *
           (b.d * static_cast<float>(s0 - 32 * c0) + b.m * static_cast<float>(s1 - 32 * (c - c0)));
  }
  return dx * (b.d * static_cast<float>(s0 + s1) - b.m * static_cast<float>(c));
}

// Sub-block j (0..7) of one GGUF block of type t (144, 176 or 210 bytes at `src`) into
// the device layout: its 16 quant bytes, its high bytes (high_bytes(t)) and its scale
// word. The 256-block's d and dmin words are the GGUF block's first two halves (Q4_K,
// Q5_K) or its last (Q6_K): see supers().
PAGODA_HD void repack(KType t, const uint8_t* src, int j, uint8_t* quants, uint8_t* high,
                      uint16_t* scale) {
  if (t == KType::kQ6K) {
    // ql[128] qh[64] scales[16] d: element 128n + 32k + l has its nibble in ql[64n + l +
    // 32 (k & 1)] (low for k < 2) and its top bits in qh[32n + l] at 2k.
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int n = j / 4, k = j % 4;
    uint8_t hb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = ql[64 * n + l + 32 * (k & 1)];
      const int nib = (k < 2 ? lo : lo >> 4) & 0xF;
      const int top = (qh[32 * n + l] >> (2 * k)) & 3;
      if (l < 16)
        quants[l] = static_cast<uint8_t>(nib);
      else
        quants[l - 16] = static_cast<uint8_t>(quants[l - 16] | nib << 4);
      const int bit = 2 * (l % 16);
      hb[4 * (l / 16) + bit / 8] =
          static_cast<uint8_t>(hb[4 * (l / 16) + bit / 8] | top << (bit % 8));
    }
    for (int i = 0; i < 8; ++i) high[i] = hb[i];
    const uint8_t* sc = src + 192;
    *scale = static_cast<uint16_t>(sc[2 * j] | sc[2 * j + 1] << 8);
    return;
  }
  // d dmin scales[12] (qh[32]) qs[128]: element 64c + l (l < 32) is the low nibble of
  // qs[32c + l], 64c + 32 + l the high one; Q5_K's fifth bit of element 32j + l is bit j
  // of qh[l].
  const uint8_t* s = src + 4;
  const uint8_t* qh = src + 16;
  const uint8_t* qs = src + (t == KType::kQ5K ? 48 : 16);
  const int shift = 4 * (j & 1);
  uint32_t hb = 0;
  for (int l = 0; l < 32; ++l) {
    const int nib = (qs[32 * (j / 2) + l] >> shift) & 0xF;
    if (l < 16)
      quants[l] = static_cast<uint8_t>(nib);
    else
      quants[l - 16] = static_cast<uint8_t>(quants[l - 16] | nib << 4);
    if (t == KType::kQ5K) hb |= static_cast<uint32_t>((qh[l] >> j) & 1) << l;
  }
  if (t == KType::kQ5K)
    for (int i = 0; i < 4; ++i) high[i] = static_cast<uint8_t>(hb >> (8 * i));
  // k4_scale_min (backend/cpu/quant_blocks.h): j < 4 keep 6 bits in bytes j and j + 4,
  // j >= 4 their low 4 bits in byte j + 4 and their top 2 in bits 6..7 of j - 4 and j.
  int sc, m;
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
    m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
  *scale = static_cast<uint16_t>(sc | m << 8);
}

// The 256-block's d and dmin words (fp16 bits) of one GGUF block at `src`.
PAGODA_HD void supers(KType t, const uint8_t* src, uint16_t* d, uint16_t* dmin) {
  if (t == KType::kQ6K) {
    *d = static_cast<uint16_t>(src[208] | src[209] << 8);
    *dmin = 0;
  } else {
    *d = static_cast<uint16_t>(src[0] | src[1] << 8);
    *dmin = static_cast<uint16_t>(src[2] | src[3] << 8);
  }
}

// GGUF bytes of one 256-element block.
PAGODA_HD int gguf_block_bytes(KType t) {
  return t == KType::kQ4K ? 144 : t == KType::kQ5K ? 176 : 210;
}

// A matrix's four device arrays (DeviceMatrix's data, high, scales and mins).
struct Arrays {
  uint8_t* quants;
  uint8_t* high;
  uint16_t* scales;
  uint16_t* supers;
};

// Sub-block s (0, 1, ... in order) of GGUF blocks at `raw` into sub-block first_sub + s
// of the arrays: one thread's work in the repack kernel (weights.cu).
PAGODA_HD void repack_sub(KType t, const uint8_t* raw, int64_t s, int64_t first_sub,
                          const Arrays& a) {
  const uint8_t* src = raw + s / 8 * gguf_block_bytes(t);
  const int64_t o = first_sub + s;
  repack(t, src, static_cast<int>(s % 8), a.quants + o * 16, a.high + o * high_bytes(t),
         a.scales + o);
  if (s % 8 == 0) supers(t, src, &a.supers[o / 8 * 2], &a.supers[o / 8 * 2 + 1]);
}

// Element e of sub-block b, read from the arrays (the dequantization for embeddings and
// the fp16 copies the large-batch products multiply).
PAGODA_HD float element_at(KType t, const Arrays& a, int64_t b, int e) {
  const uint32_t byte = a.quants[b * 16 + (e & 15)];
  uint32_t high = 0;
  if (t == KType::kQ5K) high = reinterpret_cast<const uint32_t*>(a.high)[b];
  if (t == KType::kQ6K) high = reinterpret_cast<const uint32_t*>(a.high)[b * 2 + e / 16];
  Block f;
  set_factors(t, a.scales[b], a.supers[b / 8 * 2], a.supers[b / 8 * 2 + 1], &f);
  return value_of(t, quant_of(t, byte, high, e), f.d, f.m, e);
}

}  // namespace pagoda::kq
