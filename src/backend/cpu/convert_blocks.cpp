#include "backend/cpu/convert_blocks.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_ref.h"
#include "core/fp8.h"

namespace pagoda::cpu {
namespace {

void q4_0_to_q8_0(const BlockQ4_0* src, BlockQ8_0* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    dst[b].d = src[b].d;
    for (int i = 0; i < 16; ++i) {
      dst[b].qs[i] = static_cast<int8_t>((src[b].qs[i] & 0xF) - 8);
      dst[b].qs[i + 16] = static_cast<int8_t>((src[b].qs[i] >> 4) - 8);
    }
  }
}

// (q - 16) * d with q - 16 in [-16, 15]: a Q8_0 byte with the same d.
void q5_0_to_q8_0(const BlockQ5_0* src, BlockQ8_0* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t qh;
    std::memcpy(&qh, src[b].qh, 4);
    dst[b].d = src[b].d;
    for (int i = 0; i < 16; ++i) {
      const int lo = (src[b].qs[i] & 0xF) | static_cast<int>((qh >> i) & 1) << 4;
      const int hi = (src[b].qs[i] >> 4) | static_cast<int>((qh >> (i + 16)) & 1) << 4;
      dst[b].qs[i] = static_cast<int8_t>(lo - 16);
      dst[b].qs[i + 16] = static_cast<int8_t>(hi - 16);
    }
  }
}

// Q8_1 is Q8_0 plus a sum for Q4_1's offset.
void q8_1_to_q8_0(const BlockQ8_1* src, BlockQ8_0* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    dst[b].d = src[b].d;
    std::memcpy(dst[b].qs, src[b].qs, 32);
  }
}

Status q4_k_to_q4_1(const BlockQ4_K* src, BlockQ4_1* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    // The step and offset as dequantize_q4_k computes them, then rounded once.
    const float d = fp16_to_f32(src[b].d), dmin = fp16_to_f32(src[b].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k4_scale_min(j, src[b].scales, &sc, &m);
      const float step = d * sc, off = dmin * m;
      BlockQ4_1& o = dst[b * 8 + j];
      o.d = f32_to_fp16(step);
      o.m = f32_to_fp16(-off);
      if (!std::isfinite(fp16_to_f32(o.d)) || !std::isfinite(fp16_to_f32(o.m)))
        return invalid_argument("Q4_K block " + std::to_string(b) +
                                " has a step or offset beyond fp16's range");
      // Sub-block j holds its element l in the low (even j) or high (odd j) nibble of
      // qs[32 * (j / 2) + l]; Q4_1 keeps element i < 16 low and i + 16 high in byte i.
      const uint8_t* q = src[b].qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      for (int i = 0; i < 16; ++i)
        o.qs[i] = static_cast<uint8_t>(((q[i] >> shift) & 0xF) | ((q[i + 16] >> shift) & 0xF) << 4);
    }
  }
  return Status::ok();
}

// Q3_K and Q6_K share the 16-element sub-blocks and the element order: Q3_K's value
// d * (s - 32) * q3 with q3 in [-4, 3] is Q6_K's d * scale * (q6 - 32) under the same d,
// scale = s - 32 (an int8) and q6 = q3 + 32 (6 bits): the same product of the same floats.
void q3_k_to_q6_k(const BlockQ3_K* src, BlockQ6_K* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ3_K& in = src[b];
    BlockQ6_K& o = dst[b];
    o.d = in.d;
    for (int j = 0; j < 16; ++j) o.scales[j] = static_cast<int8_t>(q3k_scale(j, in.scales) - 32);
    uint8_t q[kQKK];
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 32; ++l) {
          const int q3 =
              ((in.qs[32 * n + l] >> (2 * k)) & 3) - ((in.hmask[l] >> (4 * n + k)) & 1 ? 0 : 4);
          q[128 * n + 32 * k + l] = static_cast<uint8_t>(q3 + 32);
        }
    pack_q6_k_quants(q, &o);
  }
}

// The 4-bit table types as Q8_0: a table value is an int8 and the block's scale its d.
// Exact for IQ4_NL (the same f16 d) and for MXFP4 while 2^(e - 128) is an f16 (e in
// [104, 143]; below, d rounds to an f16 subnormal or 0: every value there is under
// 12 * 2^-25 in magnitude); IQ4_XS's d * (ls - 32) is rounded to f16 once. False where a
// scale overflows f16.
bool table_block_to_q8_0(const uint8_t* qs, const int8_t* table, float scale, BlockQ8_0* dst) {
  const uint16_t h = f32_to_fp16(scale);
  if (!std::isfinite(fp16_to_f32(h))) return false;
  dst->d = h;
  for (int i = 0; i < 16; ++i) {
    dst->qs[i] = table[qs[i] & 0xF];
    dst->qs[i + 16] = table[qs[i] >> 4];
  }
  return true;
}

Status table_to_q8_0(DType from, const void* src, BlockQ8_0* dst, int64_t n) {
  auto too_large = [&](int64_t block) {
    return invalid_argument(std::string(dtype_name(from)) + " block " + std::to_string(block) +
                            " has a scale beyond Q8_0's fp16 range");
  };
  if (from == DType::kIQ4_NL || from == DType::kNF4) {
    const auto* b = static_cast<const BlockIQ4_NL*>(src);
    const int8_t* table = table4_values(from);
    for (int64_t i = 0; i < n / kQK; ++i)  // an f16 round-trips: the same d
      if (!table_block_to_q8_0(b[i].qs, table, fp16_to_f32(b[i].d), &dst[i])) return too_large(i);
    return Status::ok();
  }
  if (from == DType::kMXFP4) {
    const auto* b = static_cast<const BlockMXFP4*>(src);
    for (int64_t i = 0; i < n / kQK; ++i)
      if (!table_block_to_q8_0(b[i].qs, kMxfp4Values, mxfp4_half_scale(b[i].e), &dst[i]))
        return too_large(i);
    return Status::ok();
  }
  const auto* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < 8; ++j)
      if (!table_block_to_q8_0(b[i].qs + 16 * j, kIq4nlValues,
                               d * static_cast<float>(iq4xs_scale(j, b[i]) - 32), &dst[8 * i + j]))
        return too_large(i);
  }
  return Status::ok();
}

// Each weight the exact product (4 x 24 significant bits fit a double) rounded once:
// the BF16 the FP8 checkpoint loaders wrote before DType::kFP8 existed.
void fp8_to_bf16(const BlockFP8* b, uint16_t* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK; ++j)
      y[i * kQK + j] = f64_to_bf16(static_cast<double>(e4m3_to_f32(b[i].qs[j])) * b[i].d);
}

// Each 32-column sub-block a Q4_1 block: the group's d, m = -d z rounded to f16.
template <int S>
void q4g_to_q4_1(const BlockQ4G<S>* b, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint16_t m = f32_to_fp16(-fp16_to_f32(b[i].d) * static_cast<float>(b[i].z));
    for (int j = 0; j < S; ++j, ++y) {
      y->d = b[i].d;
      y->m = m;
      std::memcpy(y->qs, b[i].qs + 16 * j, 16);
    }
  }
}

}  // namespace

Status convert_row(DType from, const void* src, DType to, void* dst, int64_t n) {
  const DTypeInfo& fi = dtype_info(from);
  const DTypeInfo& ti = dtype_info(to);
  if (n < 0 || n % fi.block_elems != 0 || n % ti.block_elems != 0)
    return invalid_argument("convert_row: " + std::to_string(n) + " elements are not whole " +
                            std::string(fi.name) + " and " + std::string(ti.name) + " blocks");
  if (from == to) {
    std::memcpy(dst, src, row_bytes(from, n));
    return Status::ok();
  }
  if (from == DType::kQ4_0 && to == DType::kQ8_0) {
    q4_0_to_q8_0(static_cast<const BlockQ4_0*>(src), static_cast<BlockQ8_0*>(dst), n / kQK);
    return Status::ok();
  }
  if (from == DType::kQ5_0 && to == DType::kQ8_0) {
    q5_0_to_q8_0(static_cast<const BlockQ5_0*>(src), static_cast<BlockQ8_0*>(dst), n / kQK);
    return Status::ok();
  }
  if (from == DType::kQ8_1 && to == DType::kQ8_0) {
    q8_1_to_q8_0(static_cast<const BlockQ8_1*>(src), static_cast<BlockQ8_0*>(dst), n / kQK);
    return Status::ok();
  }
  if (from == DType::kQ3_K && to == DType::kQ6_K) {
    q3_k_to_q6_k(static_cast<const BlockQ3_K*>(src), static_cast<BlockQ6_K*>(dst), n / kQKK);
    return Status::ok();
  }
  if (is_table4(from) && to == DType::kQ8_0)
    return table_to_q8_0(from, src, static_cast<BlockQ8_0*>(dst), n);
  if (from == DType::kFP8 && to == DType::kBF16) {
    fp8_to_bf16(static_cast<const BlockFP8*>(src), static_cast<uint16_t*>(dst), n / kQK);
    return Status::ok();
  }
  if (from == DType::kQ4_G64 && to == DType::kQ4_1) {
    q4g_to_q4_1(static_cast<const BlockQ4G64*>(src), static_cast<BlockQ4_1*>(dst), n / 64);
    return Status::ok();
  }
  if (from == DType::kQ4_G128 && to == DType::kQ4_1) {
    q4g_to_q4_1(static_cast<const BlockQ4G128*>(src), static_cast<BlockQ4_1*>(dst), n / 128);
    return Status::ok();
  }
  if (from == DType::kQ4_K && to == DType::kQ4_1)
    return q4_k_to_q4_1(static_cast<const BlockQ4_K*>(src), static_cast<BlockQ4_1*>(dst), n / kQKK);
  thread_local std::vector<float> row;  // rows convert in a loop: no allocation per row
  row.resize(static_cast<size_t>(n));
  PAGODA_RETURN_IF_ERROR(dequantize_row(from, src, row.data(), n));
  // A corrupt scale (an fp16 inf or NaN) would reach the quantizer's float-to-int casts.
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(row[static_cast<size_t>(i)]))
      return corrupt("element " + std::to_string(i) + " of a " + std::string(fi.name) +
                     " row is not finite");
  return quantize_row(to, row.data(), dst, n);
}

}  // namespace pagoda::cpu
