// Scalar reference conversions between f32 rows and GGUF blocks. These define the
// numbers: SIMD activation converters are tested bit for bit against them, and every
// kernel's output against products of their dequantized values.
#include "backend/cpu/quant_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_kquants.h"
#include "core/dtype.h"
#include "core/fp8.h"

namespace pagoda::cpu {
namespace {

// Ties to even, as ggml's nearest_int (and cvtps2dq under the default rounding mode).
inline int nearest_int(float f) {
  return static_cast<int>(std::lrintf(f));
}

inline float h2f(uint16_t h) {
  return fp16_to_f32(h);
}
inline uint16_t f2h(float f) {
  return f32_to_fp16(f);
}

// The first value of largest magnitude, with its sign (0 for an all-zero block): ggml's
// reference quantizers scale by it so that it lands exactly on a quant.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = *mx = x[0];
  for (int j = 1; j < n; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}

// ---- 32-element formats ------------------------------------------------------------

// ggml's reference rule: d = max / -8 with max the signed value of largest magnitude (so
// it lands exactly on q = 0), q = min(15, trunc(x / d + 8.5)).
void quantize_q4_0(const float* x, BlockQ4_0* y) {
  const float max = signed_absmax(x, kQK);
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    y->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// ggml's reference rule: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d +
// 0.5)).
void quantize_q4_1(const float* x, BlockQ4_1* y) {
  float mn, mx;
  min_max(x, kQK, &mn, &mx);
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  y->m = f2h(mn);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>((x[j] - mn) * id + 0.5f));
    const int q1 = std::min(15, static_cast<int>((x[j + 16] - mn) * id + 0.5f));
    y->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Q5_0 and Q5_1 as Q4_0 and Q4_1 with 5 bits (ggml's reference rules): d = max / -16, q =
// min(31, trunc(x / d + 16.5)); d = (max - min) / 31, q = min(31, trunc((x - min) / d +
// 0.5)). Bit 4 of element j goes to bit j of qh.
void put_q5(const int* q, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    h |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh, &h, 4);
}

void quantize_q5_0(const float* x, BlockQ5_0* y) {
  const float max = signed_absmax(x, kQK);
  const float d = max / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  int q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
  put_q5(q, y->qs, y->qh);
}

void quantize_q5_1(const float* x, BlockQ5_1* y) {
  float mn, mx;
  min_max(x, kQK, &mn, &mx);
  const float d = (mx - mn) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  y->m = f2h(mn);
  int q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>((x[j] - mn) * id + 0.5f));
  put_q5(q, y->qs, y->qh);
}

float q8_scale(const float* x, float* id) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  *id = d != 0.0f ? 1.0f / d : 0.0f;
  return d;
}

void dequantize_q4_0(const BlockQ4_0* b, float* y) {
  const float d = h2f(b->d);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b->qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b->qs[j] >> 4) - 8) * d;
  }
}

void dequantize_q4_1(const BlockQ4_1* b, float* y) {
  const float d = h2f(b->d), m = h2f(b->m);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b->qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(b->qs[j] >> 4) * d + m;
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void dequantize_q5_0(const BlockQ5_0* b, float* y) {
  const float d = h2f(b->d);
  const uint32_t qh = load_u32(b->qh);
  for (int j = 0; j < 16; ++j) {
    const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
    y[j] = static_cast<float>(((b->qs[j] & 0xF) | (h0 << 4)) - 16) * d;
    y[j + 16] = static_cast<float>(((b->qs[j] >> 4) | (h1 << 4)) - 16) * d;
  }
}

void dequantize_q5_1(const BlockQ5_1* b, float* y) {
  const float d = h2f(b->d), m = h2f(b->m);
  const uint32_t qh = load_u32(b->qh);
  for (int j = 0; j < 16; ++j) {
    const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
    y[j] = static_cast<float>((b->qs[j] & 0xF) | (h0 << 4)) * d + m;
    y[j + 16] = static_cast<float>((b->qs[j] >> 4) | (h1 << 4)) * d + m;
  }
}

void dequantize_q8_0(const BlockQ8_0* b, float* y) {
  const float d = h2f(b->d);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b->qs[j]) * d;
}

void dequantize_q8_1(const BlockQ8_1* b, float* y) {
  const float d = h2f(b->d);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b->qs[j]) * d;
}

// ---- K formats ---------------------------------------------------------------------

void dequantize_q2_k(const BlockQ2_K* b, float* y) {
  const float d = h2f(b->d), dmin = h2f(b->dmin);
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t s = b->scales[8 * n + 2 * k + l / 16];
        const int q = (b->qs[32 * n + l] >> (2 * k)) & 3;
        y[128 * n + 32 * k + l] = d * static_cast<float>(s & 0xF) * static_cast<float>(q) -
                                  dmin * static_cast<float>(s >> 4);
      }
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* b, float* y) {
  const float d = h2f(b->d);
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int s = q3k_scale(8 * n + 2 * k + l / 16, b->scales) - 32;
        const int q =
            ((b->qs[32 * n + l] >> (2 * k)) & 3) - ((b->hmask[l] >> (4 * n + k)) & 1 ? 0 : 4);
        y[128 * n + 32 * k + l] = d * static_cast<float>(s) * static_cast<float>(q);
      }
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* b, float* y) {
  const float d = h2f(b->d), dmin = h2f(b->dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, b->scales, &sc, &m);
    const float step = d * sc, off = dmin * m;
    const int shift = 4 * (j & 1);
    for (int l = 0; l < 32; ++l)
      y[32 * j + l] = step * static_cast<float>((b->qs[32 * (j / 2) + l] >> shift) & 0xF) - off;
  }
}

void dequantize_q5_k(const BlockQ5_K* b, float* y) {
  const float d = h2f(b->d), dmin = h2f(b->dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, b->scales, &sc, &m);
    const float step = d * sc, off = dmin * m;
    const int shift = 4 * (j & 1);
    for (int l = 0; l < 32; ++l) {
      const int q = ((b->qs[32 * (j / 2) + l] >> shift) & 0xF) | (((b->qh[l] >> j) & 1) << 4);
      y[32 * j + l] = step * static_cast<float>(q) - off;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* b, float* y) {
  const float d = h2f(b->d);
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = b->ql[64 * n + l + 32 * (k & 1)];
        const int q = ((k < 2 ? lo : lo >> 4) & 0xF) | (((b->qh[32 * n + l] >> (2 * k)) & 3) << 4);
        const int e = 128 * n + 32 * k + l;
        y[e] = d * static_cast<float>(b->scales[e / 16]) * static_cast<float>(q - 32);
      }
    }
  }
}

void dequantize_q8_k(const BlockQ8_K* b, float* y) {
  for (int j = 0; j < kQKK; ++j) y[j] = b->d * static_cast<float>(b->qs[j]);
}

// ---- 4-bit non-linear formats ------------------------------------------------------

// 32 table values from 16 bytes of Q4_0-order nibbles, times the scale.
void dequantize_table32(const uint8_t* qs, const int8_t* table, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(table[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(table[qs[j] >> 4]);
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* b, float* y) {
  dequantize_table32(b->qs, kIq4nlValues, h2f(b->d), y);
}

void dequantize_nf4(const BlockNF4* b, float* y) {
  dequantize_table32(b->qs, kNf4Values, h2f(b->d), y);
}

void dequantize_iq4_xs(const BlockIQ4_XS* b, float* y) {
  const float d = h2f(b->d);
  for (int j = 0; j < 8; ++j)
    dequantize_table32(b->qs + 16 * j, kIq4nlValues,
                       d * static_cast<float>(iq4xs_scale(j, *b) - 32), y + 32 * j);
}

// The plain reference: each weight the f32 product of its e4m3 value and the scale.
void dequantize_fp8(const BlockFP8* b, float* y) {
  for (int i = 0; i < 32; ++i) y[i] = e4m3_to_f32(b->qs[i]) * b->d;
}

template <int S>
void dequantize_q4g(const BlockQ4G<S>* b, float* y) {
  const float d = h2f(b->d);
  for (int j = 0; j < S; ++j)
    for (int l = 0; l < 16; ++l) {
      y[32 * j + l] = d * static_cast<float>((b->qs[16 * j + l] & 0xF) - b->z);
      y[32 * j + l + 16] = d * static_cast<float>((b->qs[16 * j + l] >> 4) - b->z);
    }
}

void dequantize_mxfp4(const BlockMXFP4* b, float* y) {
  dequantize_table32(b->qs, kMxfp4Values, mxfp4_half_scale(b->e), y);
}

template <typename Block, typename F>
void for_blocks(const void* src, int64_t nb, F&& f) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < nb; ++i) f(b + i, i);
}

// Quantizes nb consecutive blocks of `be` floats with one block quantizer.
template <typename Block>
Status quantize_blocks(void (*quantize)(const float*, Block*), const float* src, void* dst,
                       int64_t nb, int be) {
  Block* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < nb; ++i) quantize(src + i * be, y + i);
  return Status::ok();
}

// The same with a block quantizer that takes an importance per element (qw: n values,
// or null).
template <typename Block>
Status quantize_weighted_blocks(void (*quantize)(const float*, Block*, const float*),
                                const float* src, void* dst, int64_t nb, int be, const float* qw) {
  Block* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < nb; ++i) quantize(src + i * be, y + i, qw ? qw + i * be : nullptr);
  return Status::ok();
}

// The type's sizes, once n is checked to be a whole number of its blocks.
Result<const DTypeInfo*> row_type(DType type, int64_t n, const char* what) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(type));
  if (info == nullptr) return unsupported(std::string(what) + ": unknown type");
  if (n < 0 || n % info->block_elems != 0)
    return invalid_argument(str_format("%s: %lld elements is not a multiple of %s's block", what,
                                       static_cast<long long>(n), std::string(info->name).c_str()));
  return info;
}

}  // namespace

void quantize_block_q8_0(const float* x, BlockQ8_0* y) {
  float id;
  const float d = q8_scale(x, &id);
  y->d = f2h(d);
  for (int j = 0; j < kQK; ++j) y->qs[j] = static_cast<int8_t>(std::round(x[j] * id));
}

void quantize_block_q8_1(const float* x, BlockQ8_1* y) {
  float id;
  const float d = q8_scale(x, &id);
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    y->qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    sum += y->qs[j];
  }
  y->d = f2h(d);
  y->s = f2h(static_cast<float>(sum) * d);
}

void quantize_block_q8_act(const float* x, BlockQ8_1* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    y->qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));  // default mode: ties to even
    sum += y->qs[j];
  }
  y->d = f2h(d);
  y->s = f2h(static_cast<float>(sum) * d);
}

void quantize_block_q8_k(const float* x, BlockQ8_K* y) {
  const float max = signed_absmax(x, kQKK);
  if (max == 0.0f) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < kQKK; ++j)
    y->qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += y->qs[16 * j + l];
    y->bsums[j] = static_cast<int16_t>(sum);
  }
  y->d = 1.0f / iscale;
}

Status quantize_row(DType type, const float* src, void* dst, int64_t n) {
  PAGODA_ASSIGN_OR_RETURN(const DTypeInfo* info, row_type(type, n, "quantize_row"));
  const int64_t nb = n / info->block_elems;
  const int be = static_cast<int>(info->block_elems);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return Status::ok();
    case DType::kF16: {
      uint16_t* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(src[i]);
      return Status::ok();
    }
    case DType::kBF16: {
      uint16_t* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(src[i]);
      return Status::ok();
    }
    case DType::kQ4_0:
      return quantize_blocks<BlockQ4_0>(quantize_q4_0, src, dst, nb, be);
    case DType::kQ4_1:
      return quantize_blocks<BlockQ4_1>(quantize_q4_1, src, dst, nb, be);
    case DType::kQ5_0:
      return quantize_blocks<BlockQ5_0>(quantize_q5_0, src, dst, nb, be);
    case DType::kQ5_1:
      return quantize_blocks<BlockQ5_1>(quantize_q5_1, src, dst, nb, be);
    case DType::kQ8_0:
      return quantize_blocks<BlockQ8_0>(quantize_block_q8_0, src, dst, nb, be);
    case DType::kQ8_1:
      return quantize_blocks<BlockQ8_1>(quantize_block_q8_1, src, dst, nb, be);
    case DType::kQ2_K:
      return quantize_weighted_blocks<BlockQ2_K>(quantize_q2_k, src, dst, nb, be, nullptr);
    case DType::kQ3_K:
      return quantize_weighted_blocks<BlockQ3_K>(quantize_q3_k, src, dst, nb, be, nullptr);
    case DType::kQ4_K:
      return quantize_weighted_blocks<BlockQ4_K>(quantize_q4_k, src, dst, nb, be, nullptr);
    case DType::kQ5_K:
      return quantize_weighted_blocks<BlockQ5_K>(quantize_q5_k, src, dst, nb, be, nullptr);
    case DType::kQ6_K:
      return quantize_weighted_blocks<BlockQ6_K>(quantize_q6_k, src, dst, nb, be, nullptr);
    case DType::kQ8_K:
      return quantize_blocks<BlockQ8_K>(quantize_block_q8_k, src, dst, nb, be);
    default:
      return unsupported(
          str_format("quantize_row: no quantizer for %s", std::string(info->name).c_str()));
  }
}

Status quantize_row_weighted(DType type, const float* src, void* dst, int64_t n,
                             const float* importance) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(type));
  if (importance == nullptr || info == nullptr || n < 0 || n % info->block_elems != 0)
    return quantize_row(type, src, dst, n);  // which refuses what it must
  const int64_t nb = n / info->block_elems;
  const int be = static_cast<int>(info->block_elems);
  const float* qw = importance;
  switch (type) {
    case DType::kQ4_0:
      return quantize_weighted_blocks<BlockQ4_0>(quantize_q4_0_weighted, src, dst, nb, be, qw);
    case DType::kQ4_1:
      return quantize_weighted_blocks<BlockQ4_1>(quantize_q4_1_weighted, src, dst, nb, be, qw);
    case DType::kQ5_0:
      return quantize_weighted_blocks<BlockQ5_0>(quantize_q5_0_weighted, src, dst, nb, be, qw);
    case DType::kQ5_1:
      return quantize_weighted_blocks<BlockQ5_1>(quantize_q5_1_weighted, src, dst, nb, be, qw);
    case DType::kQ2_K:
      return quantize_weighted_blocks<BlockQ2_K>(quantize_q2_k, src, dst, nb, be, qw);
    case DType::kQ3_K:
      return quantize_weighted_blocks<BlockQ3_K>(quantize_q3_k, src, dst, nb, be, qw);
    case DType::kQ4_K:
      return quantize_weighted_blocks<BlockQ4_K>(quantize_q4_k, src, dst, nb, be, qw);
    case DType::kQ5_K:
      return quantize_weighted_blocks<BlockQ5_K>(quantize_q5_k, src, dst, nb, be, qw);
    case DType::kQ6_K:
      return quantize_weighted_blocks<BlockQ6_K>(quantize_q6_k, src, dst, nb, be, qw);
    default:
      return quantize_row(type, src, dst, n);  // 8-bit and float types: nothing to weigh
  }
}

Status dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  PAGODA_ASSIGN_OR_RETURN(const DTypeInfo* info, row_type(type, n, "dequantize_row"));
  const int64_t nb = n / info->block_elems;
  const int be = static_cast<int>(info->block_elems);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return Status::ok();
    case DType::kF64: {
      const double* x = static_cast<const double*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(x[i]);
      return Status::ok();
    }
    case DType::kF16: {
      const uint16_t* x = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(x[i]);
      return Status::ok();
    }
    case DType::kBF16: {
      const uint16_t* x = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
      return Status::ok();
    }
    case DType::kQ4_0:
      for_blocks<BlockQ4_0>(src, nb, [&](auto* b, int64_t i) { dequantize_q4_0(b, dst + i * be); });
      break;
    case DType::kQ4_1:
      for_blocks<BlockQ4_1>(src, nb, [&](auto* b, int64_t i) { dequantize_q4_1(b, dst + i * be); });
      break;
    case DType::kQ5_0:
      for_blocks<BlockQ5_0>(src, nb, [&](auto* b, int64_t i) { dequantize_q5_0(b, dst + i * be); });
      break;
    case DType::kQ5_1:
      for_blocks<BlockQ5_1>(src, nb, [&](auto* b, int64_t i) { dequantize_q5_1(b, dst + i * be); });
      break;
    case DType::kQ8_0:
      for_blocks<BlockQ8_0>(src, nb, [&](auto* b, int64_t i) { dequantize_q8_0(b, dst + i * be); });
      break;
    case DType::kQ8_1:
      for_blocks<BlockQ8_1>(src, nb, [&](auto* b, int64_t i) { dequantize_q8_1(b, dst + i * be); });
      break;
    case DType::kQ2_K:
      for_blocks<BlockQ2_K>(src, nb, [&](auto* b, int64_t i) { dequantize_q2_k(b, dst + i * be); });
      break;
    case DType::kQ3_K:
      for_blocks<BlockQ3_K>(src, nb, [&](auto* b, int64_t i) { dequantize_q3_k(b, dst + i * be); });
      break;
    case DType::kQ4_K:
      for_blocks<BlockQ4_K>(src, nb, [&](auto* b, int64_t i) { dequantize_q4_k(b, dst + i * be); });
      break;
    case DType::kQ5_K:
      for_blocks<BlockQ5_K>(src, nb, [&](auto* b, int64_t i) { dequantize_q5_k(b, dst + i * be); });
      break;
    case DType::kQ6_K:
      for_blocks<BlockQ6_K>(src, nb, [&](auto* b, int64_t i) { dequantize_q6_k(b, dst + i * be); });
      break;
    case DType::kQ8_K:
      for_blocks<BlockQ8_K>(src, nb, [&](auto* b, int64_t i) { dequantize_q8_k(b, dst + i * be); });
      break;
    case DType::kIQ4_NL:
      for_blocks<BlockIQ4_NL>(src, nb,
                              [&](auto* b, int64_t i) { dequantize_iq4_nl(b, dst + i * be); });
      break;
    case DType::kNF4:
      for_blocks<BlockNF4>(src, nb, [&](auto* b, int64_t i) { dequantize_nf4(b, dst + i * be); });
      break;
    case DType::kIQ4_XS:
      for_blocks<BlockIQ4_XS>(src, nb,
                              [&](auto* b, int64_t i) { dequantize_iq4_xs(b, dst + i * be); });
      break;
    case DType::kMXFP4:
      for_blocks<BlockMXFP4>(src, nb,
                             [&](auto* b, int64_t i) { dequantize_mxfp4(b, dst + i * be); });
      break;
    case DType::kFP8:
      for_blocks<BlockFP8>(src, nb, [&](auto* b, int64_t i) { dequantize_fp8(b, dst + i * be); });
      break;
    case DType::kQ4_G64:
      for_blocks<BlockQ4G64>(src, nb, [&](auto* b, int64_t i) { dequantize_q4g(b, dst + i * be); });
      break;
    case DType::kQ4_G128:
      for_blocks<BlockQ4G128>(src, nb,
                              [&](auto* b, int64_t i) { dequantize_q4g(b, dst + i * be); });
      break;
    default:
      return unsupported(str_format("dequantize_row: %s is not a float or block type",
                                    std::string(info->name).c_str()));
  }
  return Status::ok();
}

void pack_q6_k_quants(const uint8_t* q, BlockQ6_K* y) {
  for (int n = 0; n < 2; ++n) {
    const uint8_t* qn = q + 128 * n;
    for (int l = 0; l < 32; ++l) {
      y->ql[64 * n + l] = static_cast<uint8_t>((qn[l] & 0xF) | ((qn[l + 64] & 0xF) << 4));
      y->ql[64 * n + l + 32] = static_cast<uint8_t>((qn[l + 32] & 0xF) | ((qn[l + 96] & 0xF) << 4));
      y->qh[32 * n + l] = static_cast<uint8_t>((qn[l] >> 4) | ((qn[l + 32] >> 4) << 2) |
                                               ((qn[l + 64] >> 4) << 4) | ((qn[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace pagoda::cpu
