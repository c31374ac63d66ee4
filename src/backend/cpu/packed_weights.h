// The layout WeightMatrix keeps its data in: rows are interleaved in groups of
// kRowGroup = 16 so one 512-bit register holds the same element of 16 rows, and a
// kernel turns each weight load into 16 outputs of one token (no horizontal sums).
//
// The matrix is a sequence of row groups (the last padded with zero rows). A row group
// is [quants of block 0..nb-1][scales of block 0..nb-1], each block covering
// `block_elems` columns of all 16 rows; both parts start 64-byte aligned. Per type
// (i = row within the group, "word transpose" = bytes 4m..4m+3 of row i go to offset
// 64m + 4i, so one 64-byte line holds the same 4 columns of all 16 rows):
//
//   F32   block 1 col:   quants f32[16]
//   F16   block 1 col:   quants f16[16]
//   BF16  block 2 cols:  quants [16][2] bf16 (a lane = the column pair of one row)
//   Q4_0  block 32:      quants 256 B = word transpose of GGUF qs[16] (low nibbles
//                        are columns 4m..4m+3, high nibbles 16+4m..); scales f16 d[16]
//   Q4_1  block 32:      quants as Q4_0; scales f16 d[16], f16 m[16]
//   Q5_0  block 32:      quants 320 B: Q4_0's 256 B of low nibbles, then 64 B whose byte
//                        4i+e has bit s = bit 4 of column 4s+e (as Q5_K); scales as Q4_0
//   Q5_1  block 32:      quants as Q5_0; scales as Q4_1
//   Q8_0  block 32:      quants 512 B = word transpose of (qs ^ 0x80), i.e. q + 128 as
//                        u8, the unsigned operand vpdpbusd wants; scales f16 d[16]
//   Q4_K  block 256:     quants 8 x 256 B, sub-block j in Q4_0 nibble order; scales
//                        320 B: f16 d[16], f16 dmin[16], u8 sc[8][16], u8 m[4][16][2]
//                        (m[p][i] = mins of sub-blocks 2p, 2p+1: one i16 pair per lane
//                        after a zero-extend)
//   Q5_K  block 256:     quants 8 x 320 B: Q4_K's 256 B of low nibbles, then 64 B whose
//                        byte 4i+e has bit s = bit 4 of column 4s+e; scales as Q4_K
//   Q6_K  block 256:     quants 8 x 384 B per 32 columns: 256 B of low nibbles (Q4_0
//                        order), 64 B whose byte 4i+e holds bits 4..5 of column 4s+e at
//                        bits 2s..2s+1 (s < 4), 64 B the same for s = 4..7; scales
//                        320 B: f16 d[16], i8 sc[16][16], 32 B padding
//   Q3_K  block 256:     quants 8 x 192 B per 32 columns, of q + 4 in [0, 7]: 64 B whose
//                        byte 4i+e holds bits 0..1 of column 4s+e at bits 2s..2s+1
//                        (s < 4), 64 B the same for s = 4..7, 64 B whose byte 4i+e has
//                        bit s = bit 2 of column 4s+e; scales as Q6_K (the 6-bit scale
//                        less 32 as i8): 3.6 bits a weight against the file's 3.4
//   Q2_K  block 256:     quants 8 x 128 B per 32 columns: Q3_K's two 64 B lines of 2-bit
//                        values; scales 320 B: f16 d[16], f16 dmin[16], u8 scm[16][16]
//                        (the file's byte: scale in the low nibble, min in the high):
//                        2.6 bits a weight, as in the file
//   IQ4_NL block 32:     quants as Q4_0 (nibbles index kIq4nlValues); scales f16 d[16]
//   NF4    block 32:     as IQ4_NL (nibbles index kNf4Values, bitsandbytes' code book in
//                        int8); scales f16 d[16]: 4.5 bits a weight, as the block
//   IQ4_XS block 32:     quants as Q4_0 per 32-column sub-block (kIq4nlValues); scales
//                        f32 d * (ls - 32) [16], exact (an f16 times a 6-bit integer):
//                        5 bits a weight against the file's 4.25
//   MXFP4  block 32:     quants as Q4_0 (nibbles index kMxfp4Values); scales f32
//                        2^(e - 128) [16], exact for every e: 5 bits a weight against
//                        the file's 4.25
//   Q4_G64, Q4_G128 block 32 S (S = 2, 4 sub-blocks of 32): quants S x 256 B, each as
//                        Q4_0's; scales 64 B: f16 d[16], u8 z[16], 16 B padding (so
//                        every block ends 64-byte aligned, as the ledger counts):
//                        4.5 and 4.25 bits a weight, as the block
//   FP8    block 32:     quants 512 B, byte 16e + i = the e4m3 byte of column e, row i
//                        (a column of the group in 16 bytes); scales f32 d[16] as in
//                        BlockFP8: 9 bits a weight, as the block
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_blocks.h"
#include "core/dtype.h"

namespace pagoda::cpu {

constexpr int kRowGroup = 16;

struct PackedFormat {
  int block_elems;  // columns per block
  int quant_bytes;  // per block of 16 rows
  int scale_bytes;  // per block of 16 rows
};

// nullptr when `t` is not a supported weight type.
const PackedFormat* packed_format(DType t);

struct AlignedFree {
  size_t align = 64;
  void operator()(uint8_t* p) const;
};
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedFree>;
// 64-byte aligned (2 MB pages for 2 MB and up), zero-filled.
AlignedBytes aligned_bytes(size_t n);

struct WeightMatrix::Impl {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t k = 0;           // cols rounded up to a whole block (BF16: even)
  int64_t nb = 0;          // blocks per row
  int64_t row_groups = 0;  // ceil(rows / 16)
  size_t group_bytes = 0;
  size_t scale_offset = 0;  // from the start of a row group
  int quant_bytes = 0;      // per block
  int scale_bytes = 0;      // per block
  size_t bytes = 0;
  AlignedBytes data;

  const uint8_t* quants(int64_t g, int64_t b) const {
    return data.get() + static_cast<size_t>(g) * group_bytes + static_cast<size_t>(b) * quant_bytes;
  }
  const uint8_t* scales(int64_t g, int64_t b) const {
    return data.get() + static_cast<size_t>(g) * group_bytes + scale_offset +
           static_cast<size_t>(b) * scale_bytes;
  }
};

// Repacks a GGUF tensor (rows x cols of `type`, rows contiguous) into `out`.
Status pack_weights(DType type, const void* src, int64_t rows, int64_t cols,
                    WeightMatrix::Impl* out);
// Row r of a packed matrix as f32, bit-identical to dequantize_row on the GGUF row.
void unpack_row(const WeightMatrix::Impl& w, int64_t r, float* dst);

// The types whose nibbles index a 16-entry table (the 4-bit non-linear ones), their table,
// and whether their packed scales are f32 (else f16).
constexpr bool is_table4(DType t) {
  return t == DType::kIQ4_NL || t == DType::kIQ4_XS || t == DType::kMXFP4 || t == DType::kNF4;
}
constexpr const int8_t* table4_values(DType t) {
  return t == DType::kMXFP4 ? kMxfp4Values : t == DType::kNF4 ? kNf4Values : kIq4nlValues;
}
constexpr bool table4_f32_scales(DType t) {
  return t == DType::kIQ4_XS || t == DType::kMXFP4;
}

// The number S of 32-column sub-blocks under one scale of a Q4_G type (quant_blocks.h
// BlockQ4G), 0 for any other type.
constexpr int q4g_sub_blocks(DType t) {
  return t == DType::kQ4_G64 ? 2 : t == DType::kQ4_G128 ? 4 : 0;
}

// Bit of element e (0..31) of row i in a 64-byte bit line (byte 4i + e%4, bit e/4): the
// fifth bit of Q5_0, Q5_1 and Q5_K, the third of Q3_K.
inline int packed_bit(const uint8_t* line, int i, int e) {
  return (line[4 * i + (e & 3)] >> (e >> 2)) & 1;
}

// 2-bit value of element e (0..31) of row i in two 64-byte lines (columns 0..15 in the
// first, 16..31 in the second; byte 4i + e%4, bits 2s..2s+1 for step s): Q2_K's and
// Q3_K's low bits, Q6_K's bits 4..5.
inline int packed_crumb(const uint8_t* lines, int i, int e) {
  const int st = e >> 2;
  return (lines[64 * (st >> 2) + 4 * i + (e & 3)] >> (2 * (st & 3))) & 3;
}
// Element e (0..31) of row i of a 256-byte block of word-transposed Q4_0-order nibbles.
inline int packed_nibble(const uint8_t* q, int i, int e) {
  const uint8_t byte = q[64 * ((e & 15) >> 2) + 4 * i + (e & 3)];
  return e < 16 ? byte & 0xF : byte >> 4;
}
// Byte e (0..4n-1) of row i of word-transposed data.
inline uint8_t packed_byte(const uint8_t* q, int i, int e) {
  return q[64 * (e >> 2) + 4 * i + (e & 3)];
}

}  // namespace pagoda::cpu
