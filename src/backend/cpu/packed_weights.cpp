#include "backend/cpu/packed_weights.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cpu/quant_blocks.h"
#include "core/fp8.h"

namespace pagoda::cpu {
namespace {

constexpr PackedFormat kF32Format{1, 64, 0};
constexpr PackedFormat kF16Format{1, 32, 0};
constexpr PackedFormat kBF16Format{2, 64, 0};
constexpr PackedFormat kQ4_0Format{32, 256, 32};
constexpr PackedFormat kQ4_1Format{32, 256, 64};
constexpr PackedFormat kQ8_0Format{32, 512, 32};
constexpr PackedFormat kQ5_0Format{32, 320, 32};
constexpr PackedFormat kQ5_1Format{32, 320, 64};
constexpr PackedFormat kQ4_KFormat{256, 8 * 256, 320};
constexpr PackedFormat kQ5_KFormat{256, 8 * 320, 320};
constexpr PackedFormat kQ6_KFormat{256, 8 * 384, 320};
constexpr PackedFormat kQ3_KFormat{256, 8 * 192, 320};
constexpr PackedFormat kQ2_KFormat{256, 8 * 128, 320};
constexpr PackedFormat kIQ4_NLFormat{32, 256, 32};
constexpr PackedFormat kTable4F32Format{32, 256, 64};  // IQ4_XS, MXFP4
constexpr PackedFormat kFP8Format{32, 512, 64};
constexpr PackedFormat kQ4G64Format{64, 2 * 256, 64};
constexpr PackedFormat kQ4G128Format{128, 4 * 256, 64};

// Offsets inside a K-quant scale block.
constexpr int kKd = 0, kKdmin = 32, kKsc = 64, kKmin = 192, kQ6sc = 32, kQ2scm = 64;

size_t round_up(size_t n, size_t m) {
  return (n + m - 1) / m * m;
}

template <typename Block>
Block load_block(const void* src, int64_t cols, int64_t r, int64_t b, int block_elems) {
  Block blk;
  const size_t row_bytes = static_cast<size_t>(cols / block_elems) * sizeof(Block);
  std::memcpy(&blk,
              static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * row_bytes +
                  static_cast<size_t>(b) * sizeof(Block),
              sizeof(Block));
  return blk;
}

void put_f16(uint8_t* p, int i, uint16_t v) {
  std::memcpy(p + 2 * i, &v, 2);
}
uint16_t get_f16(const uint8_t* p, int i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return v;
}

// Writes the 32 nibbles q[0..31] of row i in Q4_0 order, word transposed.
void put_nibbles(uint8_t* dst, int i, const uint8_t* q) {
  for (int e = 0; e < 16; ++e)
    dst[64 * (e >> 2) + 4 * i + (e & 3)] =
        static_cast<uint8_t>((q[e] & 0xF) | ((q[e + 16] & 0xF) << 4));
}

// 6-bit quants of one GGUF Q6_K super-block, in element order.
void q6k_values(const BlockQ6_K& b, uint8_t* q) {
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = b.ql[64 * n + l + 32 * (k & 1)];
        q[128 * n + 32 * k + l] = static_cast<uint8_t>(((k < 2 ? lo : lo >> 4) & 0xF) |
                                                       (((b.qh[32 * n + l] >> (2 * k)) & 3) << 4));
      }
}

// Writes the 2-bit values v[0..31] of row i: byte 4i+e of the first 64 bytes holds column
// 4s+e at bits 2s..2s+1 (s < 4), of the next 64 bytes column 16+4s+e.
void put_crumbs(uint8_t* dst, int i, const uint8_t* v) {
  for (int e = 0; e < 4; ++e) {
    uint8_t lo = 0, hi = 0;
    for (int st = 0; st < 4; ++st) {
      lo |= static_cast<uint8_t>((v[4 * st + e] & 3) << (2 * st));
      hi |= static_cast<uint8_t>((v[16 + 4 * st + e] & 3) << (2 * st));
    }
    dst[4 * i + e] = lo;
    dst[64 + 4 * i + e] = hi;
  }
}

// Bit `bit` of the 32 values v of row i: byte 4i+e of dst has bit s = column 4s+e's.
void put_bits(uint8_t* dst, int i, const uint8_t* v, int bit) {
  for (int e = 0; e < 4; ++e) {
    uint8_t b = 0;
    for (int st = 0; st < 8; ++st) b |= static_cast<uint8_t>(((v[4 * st + e] >> bit) & 1) << st);
    dst[4 * i + e] = b;
  }
}

// 3-bit quants of one GGUF Q3_K super-block as q + 4 in [0, 7], in element order.
void q3k_values(const BlockQ3_K& b, uint8_t* q) {
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l)
        q[128 * n + 32 * k + l] = static_cast<uint8_t>(((b.qs[32 * n + l] >> (2 * k)) & 3) |
                                                       (((b.hmask[l] >> (4 * n + k)) & 1) << 2));
}

template <typename Block>
void k4_values(const Block& b, const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) q[32 * j + l] = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xF;
}

// The pack_* functions below write row r's block b into slot i of a row group's packed
// block: quants to q, scales to s.

void pack_q4_0(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockQ4_0>(src, cols, r, b, 32);
  for (int e = 0; e < 16; ++e) q[64 * (e >> 2) + 4 * i + (e & 3)] = blk.qs[e];
  put_f16(s, i, blk.d);
}

void pack_q4_1(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockQ4_1>(src, cols, r, b, 32);
  for (int e = 0; e < 16; ++e) q[64 * (e >> 2) + 4 * i + (e & 3)] = blk.qs[e];
  put_f16(s, i, blk.d);
  put_f16(s + 32, i, blk.m);
}

// Q5_0 and Q5_1: the low nibbles as Q4_0's, the fifth bits after them.
void pack_q5(DType type, const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q,
             uint8_t* s) {
  uint16_t d, m = 0;
  const uint8_t *qs, *qh;
  BlockQ5_0 b0;
  BlockQ5_1 b1;
  if (type == DType::kQ5_0) {
    b0 = load_block<BlockQ5_0>(src, cols, r, b, 32);
    d = b0.d, qs = b0.qs, qh = b0.qh;
  } else {
    b1 = load_block<BlockQ5_1>(src, cols, r, b, 32);
    d = b1.d, m = b1.m, qs = b1.qs, qh = b1.qh;
  }
  for (int e = 0; e < 16; ++e) q[64 * (e >> 2) + 4 * i + (e & 3)] = qs[e];
  uint32_t bits;  // bit e is column e's fifth
  std::memcpy(&bits, qh, 4);
  uint8_t v[32];
  for (int e = 0; e < 32; ++e) v[e] = static_cast<uint8_t>((bits >> e) & 1);
  put_bits(q + 256, i, v, 0);
  put_f16(s, i, d);
  if (type == DType::kQ5_1) put_f16(s + 32, i, m);
}

void pack_q8_0(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockQ8_0>(src, cols, r, b, 32);
  for (int e = 0; e < 32; ++e)
    q[64 * (e >> 2) + 4 * i + (e & 3)] = static_cast<uint8_t>(blk.qs[e]) ^ 0x80;
  put_f16(s, i, blk.d);
}

// Q4_K and Q5_K: eight sub-blocks of nibbles (and Q5_K's fifth bits), 6-bit scales and
// mins, and the super-block's d and dmin.
void pack_q45_k(DType type, const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q,
                uint8_t* s) {
  uint8_t v[kQKK];
  uint16_t d, dmin;
  const uint8_t* scales;
  BlockQ4_K b4;
  BlockQ5_K b5;
  if (type == DType::kQ4_K) {
    b4 = load_block<BlockQ4_K>(src, cols, r, b, kQKK);
    k4_values(b4, b4.qs, v);
    d = b4.d, dmin = b4.dmin, scales = b4.scales;
  } else {
    b5 = load_block<BlockQ5_K>(src, cols, r, b, kQKK);
    k4_values(b5, b5.qs, v);
    for (int e = 0; e < kQKK; ++e)
      v[e] |= static_cast<uint8_t>(((b5.qh[e & 31] >> (e / 32)) & 1) << 4);
    d = b5.d, dmin = b5.dmin, scales = b5.scales;
  }
  const int sub_bytes = type == DType::kQ4_K ? 256 : 320;
  for (int j = 0; j < 8; ++j) {
    uint8_t* qj = q + j * sub_bytes;
    put_nibbles(qj, i, v + 32 * j);
    if (type == DType::kQ5_K) put_bits(qj + 256, i, v + 32 * j, 4);
    uint8_t sc, m;
    k4_scale_min(j, scales, &sc, &m);
    s[kKsc + 16 * j + i] = sc;
    s[kKmin + 32 * (j / 2) + 2 * i + (j & 1)] = m;
  }
  put_f16(s + kKd, i, d);
  put_f16(s + kKdmin, i, dmin);
}

void pack_q6_k(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockQ6_K>(src, cols, r, b, kQKK);
  uint8_t v[kQKK];
  q6k_values(blk, v);
  for (int j = 0; j < 8; ++j) {
    uint8_t* qj = q + j * 384;
    put_nibbles(qj, i, v + 32 * j);
    uint8_t top[32];  // bits 4..5
    for (int e = 0; e < 32; ++e) top[e] = v[32 * j + e] >> 4;
    put_crumbs(qj + 256, i, top);
  }
  for (int j = 0; j < 16; ++j) s[kQ6sc + 16 * j + i] = static_cast<uint8_t>(blk.scales[j]);
  put_f16(s, i, blk.d);
}

void pack_q3_k(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockQ3_K>(src, cols, r, b, kQKK);
  uint8_t v[kQKK];
  q3k_values(blk, v);
  for (int j = 0; j < 8; ++j) {
    uint8_t* qj = q + j * 192;
    put_crumbs(qj, i, v + 32 * j);
    put_bits(qj + 128, i, v + 32 * j, 2);
  }
  for (int j = 0; j < 16; ++j)
    s[kQ6sc + 16 * j + i] = static_cast<uint8_t>(q3k_scale(j, blk.scales) - 32);
  put_f16(s, i, blk.d);
}

void pack_q2_k(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockQ2_K>(src, cols, r, b, kQKK);
  uint8_t v[kQKK];
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) v[128 * n + 32 * k + l] = (blk.qs[32 * n + l] >> (2 * k)) & 3;
  for (int j = 0; j < 8; ++j) put_crumbs(q + j * 128, i, v + 32 * j);
  for (int j = 0; j < 16; ++j) s[kQ2scm + 16 * j + i] = blk.scales[j];
  put_f16(s + kKd, i, blk.d);
  put_f16(s + kKdmin, i, blk.dmin);
}

// FP8: byte 16e + i is column e of row i (one column of the group per 16 bytes, the
// SIMD kernels' load); the f32 scale as it is.
void pack_fp8(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockFP8>(src, cols, r, b, 32);
  for (int e = 0; e < 32; ++e) q[16 * e + i] = blk.qs[e];
  std::memcpy(s + 4 * i, &blk.d, 4);
}

// Q4_G64/Q4_G128: each 32-column sub-block's nibbles as Q4_0's; the f16 d, then the zero
// point as a byte.
template <int S>
void pack_q4g(const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q, uint8_t* s) {
  const auto blk = load_block<BlockQ4G<S>>(src, cols, r, b, 32 * S);
  for (int j = 0; j < S; ++j)
    for (int e = 0; e < 16; ++e) q[256 * j + 64 * (e >> 2) + 4 * i + (e & 3)] = blk.qs[16 * j + e];
  put_f16(s, i, blk.d);
  s[32 + i] = blk.z;
}

// The table types: 16 bytes of Q4_0-order nibbles as Q4_0's, and the block's scale (f16
// IQ4_NL d; f32 for the IQ4_XS sub-block's d * (ls - 32) and MXFP4's 2^(e - 128)).
void pack_table4(DType type, const void* src, int64_t cols, int64_t r, int64_t b, int i, uint8_t* q,
                 uint8_t* s) {
  const uint8_t* qs;
  float scale = 0.0f;
  BlockIQ4_NL nl;
  BlockIQ4_XS xs;
  BlockMXFP4 mx;
  if (type == DType::kIQ4_NL || type == DType::kNF4) {
    nl = load_block<BlockIQ4_NL>(src, cols, r, b, 32);
    qs = nl.qs;
    put_f16(s, i, nl.d);
  } else if (type == DType::kIQ4_XS) {
    xs = load_block<BlockIQ4_XS>(src, cols, r, b / 8, kQKK);
    const int j = static_cast<int>(b % 8);
    qs = xs.qs + 16 * j;
    scale = fp16_to_f32(xs.d) * static_cast<float>(iq4xs_scale(j, xs) - 32);
  } else {
    mx = load_block<BlockMXFP4>(src, cols, r, b, 32);
    qs = mx.qs;
    scale = mxfp4_half_scale(mx.e);
  }
  for (int e = 0; e < 16; ++e) q[64 * (e >> 2) + 4 * i + (e & 3)] = qs[e];
  if (!table4_f32_scales(type)) return;
  std::memcpy(s + 4 * i, &scale, 4);
}

// Packs block b of the row group starting at row r0; rows past `rows` stay zero.
void pack_block(DType type, const void* src, int64_t rows, int64_t cols, int64_t r0, int64_t b,
                uint8_t* q, uint8_t* s) {
  for (int i = 0; i < kRowGroup && r0 + i < rows; ++i) {
    const int64_t r = r0 + i;
    switch (type) {
      case DType::kF32:
        std::memcpy(q + 4 * i, static_cast<const float*>(src) + r * cols + b, 4);
        break;
      case DType::kF16:
        std::memcpy(q + 2 * i, static_cast<const uint16_t*>(src) + r * cols + b, 2);
        break;
      case DType::kBF16: {
        // An odd last column pairs with a zero.
        const uint16_t* row = static_cast<const uint16_t*>(src) + r * cols;
        const int64_t c = 2 * b;
        std::memcpy(q + 4 * i, row + c, 2);
        if (c + 1 < cols) std::memcpy(q + 4 * i + 2, row + c + 1, 2);
        break;
      }
      case DType::kQ4_0:
        pack_q4_0(src, cols, r, b, i, q, s);
        break;
      case DType::kQ4_1:
        pack_q4_1(src, cols, r, b, i, q, s);
        break;
      case DType::kQ5_0:
      case DType::kQ5_1:
        pack_q5(type, src, cols, r, b, i, q, s);
        break;
      case DType::kQ8_0:
        pack_q8_0(src, cols, r, b, i, q, s);
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        pack_q45_k(type, src, cols, r, b, i, q, s);
        break;
      case DType::kQ6_K:
        pack_q6_k(src, cols, r, b, i, q, s);
        break;
      case DType::kQ3_K:
        pack_q3_k(src, cols, r, b, i, q, s);
        break;
      case DType::kQ2_K:
        pack_q2_k(src, cols, r, b, i, q, s);
        break;
      case DType::kIQ4_NL:
      case DType::kNF4:
      case DType::kIQ4_XS:
      case DType::kMXFP4:
        pack_table4(type, src, cols, r, b, i, q, s);
        break;
      case DType::kFP8:
        pack_fp8(src, cols, r, b, i, q, s);
        break;
      case DType::kQ4_G64:
        pack_q4g<2>(src, cols, r, b, i, q, s);
        break;
      case DType::kQ4_G128:
        pack_q4g<4>(src, cols, r, b, i, q, s);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void AlignedFree::operator()(uint8_t* p) const {
  ::operator delete[](p, std::align_val_t{align});
}

AlignedBytes aligned_bytes(size_t n) {
  // Large buffers (weights) are streamed end to end by one-token products: on 2 MB pages
  // that costs a TLB miss per 2 MB instead of per 4 KB.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = n >= kHuge ? kHuge : 64;
  const size_t alloc = n >= kHuge ? round_up(n, kHuge) : (n > 0 ? n : 1);
  uint8_t* p = static_cast<uint8_t*>(::operator new[](alloc, std::align_val_t{align}));
#if defined(MADV_HUGEPAGE)
  if (align == kHuge) madvise(p, alloc, MADV_HUGEPAGE);  // advice only: failure is fine
#endif
  std::memset(p, 0, n);
  return AlignedBytes(p, AlignedFree{align});
}

const PackedFormat* packed_format(DType t) {
  switch (t) {
    case DType::kF32:
      return &kF32Format;
    case DType::kF16:
      return &kF16Format;
    case DType::kBF16:
      return &kBF16Format;
    case DType::kQ4_0:
      return &kQ4_0Format;
    case DType::kQ4_1:
      return &kQ4_1Format;
    case DType::kQ8_0:
      return &kQ8_0Format;
    case DType::kQ5_0:
      return &kQ5_0Format;
    case DType::kQ5_1:
      return &kQ5_1Format;
    case DType::kQ4_K:
      return &kQ4_KFormat;
    case DType::kQ5_K:
      return &kQ5_KFormat;
    case DType::kQ6_K:
      return &kQ6_KFormat;
    case DType::kQ3_K:
      return &kQ3_KFormat;
    case DType::kQ2_K:
      return &kQ2_KFormat;
    case DType::kIQ4_NL:
    case DType::kNF4:
      return &kIQ4_NLFormat;
    case DType::kIQ4_XS:
    case DType::kMXFP4:
      return &kTable4F32Format;
    case DType::kFP8:
      return &kFP8Format;
    case DType::kQ4_G64:
      return &kQ4G64Format;
    case DType::kQ4_G128:
      return &kQ4G128Format;
    default:
      return nullptr;
  }
}

Status pack_weights(DType type, const void* src, int64_t rows, int64_t cols,
                    WeightMatrix::Impl* out) {
  const PackedFormat* f = packed_format(type);
  if (f == nullptr)
    return unsupported(str_format("matmul: weight type %s is not supported",
                                  std::string(dtype_name(type)).c_str()));
  if (rows <= 0 || cols <= 0) return invalid_argument("matmul: weight matrix has no elements");
  const int64_t gguf_block = dtype_info(type).block_elems;
  if (cols % gguf_block != 0)
    return invalid_argument(
        str_format("matmul: %lld columns is not a multiple of %s's block of %lld",
                   static_cast<long long>(cols), std::string(dtype_name(type)).c_str(),
                   static_cast<long long>(gguf_block)));
  out->type = type;
  out->rows = rows;
  out->cols = cols;
  out->nb = (cols + f->block_elems - 1) / f->block_elems;
  out->k = out->nb * f->block_elems;
  out->row_groups = (rows + kRowGroup - 1) / kRowGroup;
  out->quant_bytes = f->quant_bytes;
  out->scale_bytes = f->scale_bytes;
  out->scale_offset = static_cast<size_t>(out->nb) * f->quant_bytes;
  out->group_bytes =
      round_up(out->scale_offset + static_cast<size_t>(out->nb) * f->scale_bytes, 64);
  out->bytes = out->group_bytes * static_cast<size_t>(out->row_groups);
  out->data = aligned_bytes(out->bytes);
  for (int64_t g = 0; g < out->row_groups; ++g) {
    for (int64_t b = 0; b < out->nb; ++b) {
      uint8_t* base = out->data.get() + static_cast<size_t>(g) * out->group_bytes;
      pack_block(type, src, rows, cols, g * kRowGroup, b,
                 base + static_cast<size_t>(b) * f->quant_bytes,
                 base + out->scale_offset + static_cast<size_t>(b) * f->scale_bytes);
    }
  }
  return Status::ok();
}

void unpack_row(const WeightMatrix::Impl& w, int64_t r, float* dst) {
  const int64_t g = r / kRowGroup;
  const int i = static_cast<int>(r % kRowGroup);
  for (int64_t b = 0; b < w.nb; ++b) {
    const uint8_t* q = w.quants(g, b);
    const uint8_t* s = w.scales(g, b);
    switch (w.type) {
      case DType::kF32:
        std::memcpy(dst + b, q + 4 * i, 4);
        break;
      case DType::kF16:
        dst[b] = fp16_to_f32(get_f16(q, i));
        break;
      case DType::kBF16:
        dst[2 * b] = bf16_to_f32(get_f16(q, 2 * i));
        if (2 * b + 1 < w.cols) dst[2 * b + 1] = bf16_to_f32(get_f16(q, 2 * i + 1));
        break;
      case DType::kQ4_0: {
        const float d = fp16_to_f32(get_f16(s, i));
        for (int e = 0; e < 32; ++e)
          dst[32 * b + e] = static_cast<float>(packed_nibble(q, i, e) - 8) * d;
        break;
      }
      case DType::kQ4_1: {
        const float d = fp16_to_f32(get_f16(s, i)), m = fp16_to_f32(get_f16(s + 32, i));
        for (int e = 0; e < 32; ++e)
          dst[32 * b + e] = static_cast<float>(packed_nibble(q, i, e)) * d + m;
        break;
      }
      case DType::kQ5_0:
      case DType::kQ5_1: {
        const float d = fp16_to_f32(get_f16(s, i));
        for (int e = 0; e < 32; ++e) {
          const int v = packed_nibble(q, i, e) | packed_bit(q + 256, i, e) << 4;
          dst[32 * b + e] = w.type == DType::kQ5_0
                                ? static_cast<float>(v - 16) * d
                                : static_cast<float>(v) * d + fp16_to_f32(get_f16(s + 32, i));
        }
        break;
      }
      case DType::kQ8_0: {
        const float d = fp16_to_f32(get_f16(s, i));
        for (int e = 0; e < 32; ++e)
          dst[32 * b + e] =
              static_cast<float>(static_cast<int8_t>(packed_byte(q, i, e) ^ 0x80)) * d;
        break;
      }
      case DType::kQ4_K:
      case DType::kQ5_K: {
        const float d = fp16_to_f32(get_f16(s + kKd, i)),
                    dmin = fp16_to_f32(get_f16(s + kKdmin, i));
        const int sub_bytes = w.type == DType::kQ4_K ? 256 : 320;
        for (int j = 0; j < 8; ++j) {
          const uint8_t* qj = q + j * sub_bytes;
          const float step = d * s[kKsc + 16 * j + i];
          const float off = dmin * s[kKmin + 32 * (j / 2) + 2 * i + (j & 1)];
          for (int e = 0; e < 32; ++e) {
            int v = packed_nibble(qj, i, e);
            if (w.type == DType::kQ5_K) v |= packed_bit(qj + 256, i, e) << 4;
            dst[256 * b + 32 * j + e] = step * static_cast<float>(v) - off;
          }
        }
        break;
      }
      case DType::kQ6_K: {
        const float d = fp16_to_f32(get_f16(s, i));
        for (int j = 0; j < 8; ++j) {
          const uint8_t* qj = q + j * 384;
          for (int e = 0; e < 32; ++e) {
            const int v = packed_nibble(qj, i, e) | packed_crumb(qj + 256, i, e) << 4;
            const float sc =
                static_cast<float>(static_cast<int8_t>(s[kQ6sc + 16 * (2 * j + e / 16) + i]));
            dst[256 * b + 32 * j + e] = d * sc * static_cast<float>(v - 32);
          }
        }
        break;
      }
      case DType::kQ3_K: {
        const float d = fp16_to_f32(get_f16(s, i));
        for (int j = 0; j < 8; ++j) {
          const uint8_t* qj = q + j * 192;
          for (int e = 0; e < 32; ++e) {
            const int lo = packed_crumb(qj, i, e);
            const int top = packed_bit(qj + 128, i, e);
            const float sc =
                static_cast<float>(static_cast<int8_t>(s[kQ6sc + 16 * (2 * j + e / 16) + i]));
            dst[256 * b + 32 * j + e] = d * sc * static_cast<float>((lo | top << 2) - 4);
          }
        }
        break;
      }
      case DType::kQ2_K: {
        const float d = fp16_to_f32(get_f16(s + kKd, i)),
                    dmin = fp16_to_f32(get_f16(s + kKdmin, i));
        for (int e = 0; e < kQKK; ++e) {
          const uint8_t scm = s[kQ2scm + 16 * (e / 16) + i];
          dst[256 * b + e] = d * static_cast<float>(scm & 0xF) *
                                 static_cast<float>(packed_crumb(q + 128 * (e / 32), i, e % 32)) -
                             dmin * static_cast<float>(scm >> 4);
        }
        break;
      }
      case DType::kIQ4_NL:
      case DType::kNF4:
      case DType::kIQ4_XS:
      case DType::kMXFP4: {
        float d;
        if (!table4_f32_scales(w.type))
          d = fp16_to_f32(get_f16(s, i));
        else
          std::memcpy(&d, s + 4 * i, 4);
        const int8_t* table = table4_values(w.type);
        for (int e = 0; e < 32; ++e)
          dst[32 * b + e] = d * static_cast<float>(table[packed_nibble(q, i, e)]);
        break;
      }
      case DType::kFP8: {
        float d;
        std::memcpy(&d, s + 4 * i, 4);
        for (int e = 0; e < 32; ++e) dst[32 * b + e] = e4m3_to_f32(q[16 * e + i]) * d;
        break;
      }
      case DType::kQ4_G64:
      case DType::kQ4_G128: {
        const int n = q4g_sub_blocks(w.type);
        const float d = fp16_to_f32(get_f16(s, i));
        for (int e = 0; e < 32 * n; ++e)
          dst[32 * n * b + e] =
              d * static_cast<float>(packed_nibble(q + 256 * (e / 32), i, e % 32) - s[32 + i]);
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace pagoda::cpu
