// Weight matrices on the device: which GGUF types the CUDA backend takes, their device
// layout (quantized blocks split into aligned quant and scale arrays; the K types as
// kquant_layout.h says), the repacking from GGUF rows, embedding lookups, and
// dequantization to fp16 for the GEMM path.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kquant_layout.h"
#include "backend/cuda/table4.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kQBlock = 32;

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

// GGUF block bytes of the 32-element types.
constexpr int kQ8_0Bytes = 34, kQ4_0Bytes = 18, kQ4_1Bytes = 20;

__global__ void repack_q_kernel(const uint8_t* __restrict__ raw, DType type, int64_t n_blocks,
                                int64_t first_block, uint8_t* __restrict__ qs,
                                uint16_t* __restrict__ d, uint16_t* __restrict__ m) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  const int64_t ob = first_block + b;
  if (type == DType::kQ8_0) {
    const uint8_t* src = raw + b * kQ8_0Bytes;
    d[ob] = static_cast<uint16_t>(src[0] | src[1] << 8);
    for (int i = 0; i < 32; ++i) qs[ob * 32 + i] = src[2 + i];
  } else if (type == DType::kQ4_0 || is_table4(type)) {  // the same 18 bytes
    const uint8_t* src = raw + b * kQ4_0Bytes;
    d[ob] = static_cast<uint16_t>(src[0] | src[1] << 8);
    for (int i = 0; i < 16; ++i) qs[ob * 16 + i] = src[2 + i];
  } else {  // Q4_1
    const uint8_t* src = raw + b * kQ4_1Bytes;
    d[ob] = static_cast<uint16_t>(src[0] | src[1] << 8);
    m[ob] = static_cast<uint16_t>(src[2] | src[3] << 8);
    for (int i = 0; i < 16; ++i) qs[ob * 16 + i] = src[4 + i];
  }
}

// A K-type matrix's arrays as kquant_layout.h names them.
__host__ __device__ __forceinline__ kq::Arrays k_arrays(const DeviceMatrix& m) {
  return {static_cast<uint8_t*>(m.data), m.high, m.scales, m.mins};
}

// One thread per 32-element sub-block of n_subs, from GGUF K blocks at `raw` (the first
// sub-block of a GGUF block first) into sub-blocks first_sub... of the device layout.
__global__ void repack_k_kernel(const uint8_t* __restrict__ raw, kq::KType t, int64_t n_subs,
                                int64_t first_sub, DeviceMatrix m) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s < n_subs) kq::repack_sub(t, raw, s, first_sub, k_arrays(m));
}

// Element e (0..31) of quantized block `b` as f32.
__device__ __forceinline__ float dequant(const DeviceMatrix& w, int64_t b, int e) {
  const kq::KType kt = kq::ktype_of(w.type);
  if (kt != kq::KType::kNone) return kq::element_at(kt, k_arrays(w), b, e);
  const float d = half_bits_to_float(w.scales[b]);
  if (w.type == DType::kQ8_0) return d * static_cast<const int8_t*>(w.data)[b * 32 + e];
  const uint8_t byte = static_cast<const uint8_t*>(w.data)[b * 16 + (e & 15)];
  const int q = e < 16 ? byte & 15 : byte >> 4;
  if (w.type == DType::kQ4_0) return d * static_cast<float>(q - 8);
  if (is_table4(w.type)) return d * static_cast<float>(table4_value(w.type, q));
  return d * static_cast<float>(q) + half_bits_to_float(w.mins[b]);
}

__device__ __forceinline__ float element(const DeviceMatrix& w, int64_t r, int64_t c) {
  const int64_t i = r * w.cols + c;
  switch (w.type) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[i];
    case DType::kF16:
      return __half2float(static_cast<const __half*>(w.data)[i]);
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(w.data)[i]);
    default:
      return dequant(w, i / kQBlock, static_cast<int>(i % kQBlock));
  }
}

__global__ void embed_kernel(DeviceMatrix w, const int32_t* __restrict__ tokens,
                             const int32_t* __restrict__ prev, float* __restrict__ out) {
  const int i = blockIdx.y;
  int64_t r = tokens[i];
  if (r < 0) r = prev[-r - 1];
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < w.cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[static_cast<int64_t>(i) * w.cols + c] = element(w, r, c);
}

__global__ void dequant_f16_kernel(DeviceMatrix w, __half* __restrict__ out) {
  const int64_t n = w.rows * w.cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(dequant(w, i / kQBlock, static_cast<int>(i % kQBlock)));
}

bool is_quant(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1 || is_table4(t) ||
         kq::ktype_of(t) != kq::KType::kNone;
}

}  // namespace

bool is_supported_device_type(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || is_quant(t);
}

ActType act_type_for(DType t) {
  if (t == DType::kF32) return ActType::kF32;
  if (t == DType::kBF16) return ActType::kBF16;
  return ActType::kF16;
}

size_t device_matrix_bytes(DType t, int64_t rows, int64_t cols) {
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  switch (t) {
    case DType::kF32:
      return n * 4;
    case DType::kF16:
    case DType::kBF16:
      return n * 2;
    case DType::kQ8_0:
      return align256(n) + align256(n / kQBlock * 2);
    case DType::kQ4_0:
    case DType::kIQ4_NL:
    case DType::kNF4:
      return align256(n / 2) + align256(n / kQBlock * 2);
    case DType::kQ4_1:
      return align256(n / 2) + 2 * align256(n / kQBlock * 2);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      // quants, high bits, scale words, 256-block words: kq::device_bytes, each aligned
      return align256(n / 2) +
             align256(n / kQBlock * static_cast<size_t>(kq::high_bytes(kq::ktype_of(t)))) +
             align256(n / kQBlock * 2) + align256(n / 256 * 4);
    default:
      return 0;
  }
}

void assign_matrix_storage(DeviceMatrix* m, void* base) {
  m->data = base;
  m->scales = m->mins = nullptr;
  m->high = nullptr;
  if (!is_quant(m->type)) return;
  const size_t n = static_cast<size_t>(m->rows) * static_cast<size_t>(m->cols);
  const size_t qbytes = align256(m->type == DType::kQ8_0 ? n : n / 2);
  uint8_t* p = static_cast<uint8_t*>(base) + qbytes;
  const kq::KType kt = kq::ktype_of(m->type);
  if (kt != kq::KType::kNone) {  // the order device_matrix_bytes counts
    m->high = p;
    p += align256(n / kQBlock * static_cast<size_t>(kq::high_bytes(kt)));
    m->scales = reinterpret_cast<uint16_t*>(p);
    m->mins = reinterpret_cast<uint16_t*>(p + align256(n / kQBlock * 2));
    return;
  }
  m->scales = reinterpret_cast<uint16_t*>(p);
  if (m->type == DType::kQ4_1) m->mins = reinterpret_cast<uint16_t*>(p + align256(n / kQBlock * 2));
}

Status repack_rows(const void* raw, int64_t row0, int64_t n_rows, const DeviceMatrix& m,
                   cudaStream_t stream) {
  if (!is_quant(m.type)) {
    const size_t eb = m.type == DType::kF32 ? 4 : 2;
    const size_t off = static_cast<size_t>(row0) * static_cast<size_t>(m.cols) * eb;
    return cuda_status(cudaMemcpyAsync(static_cast<uint8_t*>(m.data) + off, raw,
                                       static_cast<size_t>(n_rows * m.cols) * eb,
                                       cudaMemcpyDeviceToDevice, stream),
                       "copying weights");
  }
  if (m.cols % kQBlock != 0) return invalid_argument("quantized rows must be whole blocks");
  const kq::KType kt = kq::ktype_of(m.type);
  if (kt != kq::KType::kNone) {
    if (m.cols % 256 != 0) return invalid_argument("K-quant rows must be whole 256-blocks");
    const int64_t n_subs = n_rows * m.cols / kQBlock;
    repack_k_kernel<<<blocks_for(n_subs, 256), 256, 0, stream>>>(
        static_cast<const uint8_t*>(raw), kt, n_subs, row0 * m.cols / kQBlock, m);
    return launch_status("repack_k");
  }
  const int64_t n_blocks = n_rows * m.cols / kQBlock;
  repack_q_kernel<<<blocks_for(n_blocks, 256), 256, 0, stream>>>(
      static_cast<const uint8_t*>(raw), m.type, n_blocks, row0 * m.cols / kQBlock,
      static_cast<uint8_t*>(m.data), m.scales, m.mins);
  return launch_status("repack_q");
}

Status embed_rows(const DeviceMatrix& table, const int32_t* tokens, int n, float* out,
                  cudaStream_t stream, const int32_t* prev) {
  if (n <= 0) return Status::ok();
  const dim3 grid(blocks_for(table.cols, 256), static_cast<unsigned>(n));
  embed_kernel<<<grid, 256, 0, stream>>>(table, tokens, prev, out);
  return launch_status("embed_rows");
}

Status dequantize_to_f16(const DeviceMatrix& w, uint16_t* out, cudaStream_t stream) {
  if (!is_quant(w.type)) return invalid_argument("dequantize_to_f16 takes a quantized matrix");
  dequant_f16_kernel<<<132 * 16, 256, 0, stream>>>(w, reinterpret_cast<__half*>(out));
  return launch_status("dequantize_to_f16");
}

}  // namespace pagoda::cuda
