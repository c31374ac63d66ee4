// Matrix-vector products for a few tokens (decode steps): one warp per weight row, each
// lane reading 8 consecutive columns per step as one wide load, several steps in flight,
// so the weights stream from memory once at close to full bandwidth. cuBLASLt takes
// larger batches (gemm.cpp). FP8 weights (DeviceMatrix::fp8) are widened in registers
// and the sums multiplied by the matrix's scale.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv_fusion.cuh"
#include "backend/cuda/gemv_q8.h"

namespace pagoda::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // one warp each
constexpr int kUnroll = 4;        // column steps in flight per lane (8 measured slower on H200)
int g_split_override = 0;

__device__ __forceinline__ void unpack_h2(uint32_t u, float* f) {
  const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&u));
  f[0] = v.x;
  f[1] = v.y;
}
__device__ __forceinline__ void unpack_b2(uint32_t u, float* f) {
  f[0] = __uint_as_float(u << 16);
  f[1] = __uint_as_float(u & 0xffff0000u);
}

// 8 consecutive weights of row r starting at column c (a multiple of 8), as raw bits
// (loaded first, so all steps' loads are in flight before any arithmetic).
struct Raw8 {
  uint4 a, b;  // b: second half of f32 rows
};

template <DType T, bool F8>
__device__ __forceinline__ Raw8 load_w8(const DeviceMatrix& w, int64_t r, int64_t c) {
  Raw8 v{};
  const int64_t i = r * w.cols + c;
  if constexpr (F8) {
    const uint2 u = load_stream8(static_cast<const uint8_t*>(w.data) + i);
    v.a.x = u.x;
    v.a.y = u.y;
  } else if constexpr (T == DType::kF32) {
    const float* p = static_cast<const float*>(w.data) + i;
    v.a = load_stream16(p);
    v.b = load_stream16(p + 4);
  } else if constexpr (T == DType::kF16 || T == DType::kBF16) {
    v.a = load_stream16(static_cast<const uint16_t*>(w.data) + i);
  }
  return v;
}

template <DType T, bool F8>
__device__ __forceinline__ void decode_w8(const Raw8& v, float* f) {
  if constexpr (F8) {
    __half2 h[4];
    fp8x4_to_half2x2(v.a.x, &h[0], &h[1]);
    fp8x4_to_half2x2(v.a.y, &h[2], &h[3]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 p = __half22float2(h[k]);
      f[2 * k] = p.x;
      f[2 * k + 1] = p.y;
    }
  } else if constexpr (T == DType::kF32) {
    f[0] = __uint_as_float(v.a.x), f[1] = __uint_as_float(v.a.y);
    f[2] = __uint_as_float(v.a.z), f[3] = __uint_as_float(v.a.w);
    f[4] = __uint_as_float(v.b.x), f[5] = __uint_as_float(v.b.y);
    f[6] = __uint_as_float(v.b.z), f[7] = __uint_as_float(v.b.w);
  } else if constexpr (T == DType::kF16) {
    unpack_h2(v.a.x, f), unpack_h2(v.a.y, f + 2), unpack_h2(v.a.z, f + 4), unpack_h2(v.a.w, f + 6);
  } else if constexpr (T == DType::kBF16) {
    unpack_b2(v.a.x, f), unpack_b2(v.a.y, f + 2), unpack_b2(v.a.z, f + 4), unpack_b2(v.a.w, f + 6);
  }
}

// 8 activations of token row x starting at column c.
template <ActType A>
__device__ __forceinline__ void load_x8(const void* x, int64_t i, float* f) {
  if constexpr (A == ActType::kF32) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(x) + i));
    const float4 b = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(x) + i + 4));
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + i));
    if constexpr (A == ActType::kF16) {
      unpack_h2(u.x, f), unpack_h2(u.y, f + 2), unpack_h2(u.z, f + 4), unpack_h2(u.w, f + 6);
    } else {
      unpack_b2(u.x, f), unpack_b2(u.y, f + 2), unpack_b2(u.z, f + 4), unpack_b2(u.w, f + 6);
    }
  }
}

template <ActType A>
__device__ __forceinline__ float load_x1(const void* x, int64_t i) {
  if constexpr (A == ActType::kF32) return static_cast<const float*>(x)[i];
  if constexpr (A == ActType::kF16) return __half2float(static_cast<const __half*>(x)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
}

template <DType T, bool F8>
__device__ __forceinline__ float load_w1(const DeviceMatrix& w, int64_t r, int64_t c) {
  const int64_t i = r * w.cols + c;
  if constexpr (F8)
    return __half2float(__half(
        __nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(w.data)[i], __NV_E4M3)));
  if constexpr (T == DType::kF32) return static_cast<const float*>(w.data)[i];
  if constexpr (T == DType::kF16) return __half2float(static_cast<const __half*>(w.data)[i]);
  if constexpr (T == DType::kBF16)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(w.data)[i]);
  return 0.0f;
}

// One token's kernels over 1- and 2-byte weights are held to 32 registers, so all 64
// warps a Hopper SM holds fit (16 blocks of 4 warps); with 34-38 registers only 12 blocks
// of 4 did, and matrices of 4,096 rows took 1.3 waves. (F32 weights would spill.) An SM
// of 48 warps (sm_89) takes 12.
constexpr int kNt1BlocksPerSm = kMaxWarpsPerSm / kRowsPerBlock;
template <DType T, bool F8, int NT>
constexpr int min_blocks() {
  return NT == 1 && (F8 || T != DType::kF32) ? kNt1BlocksPerSm : 1;
}

// NT: tokens handled (n <= NT; the rest predicated off). SPLIT: warps sharing a row (each
// takes every SPLIT-th column step; partial sums meet in shared memory), so matrices with
// few rows still put enough warps on every SM. `vec`: rows and x rows are 16-byte aligned
// so the 8-wide path applies; otherwise one element at a time. EPI: what becomes of the
// results (kStore: y; GemvFusion's epilogues: the block's rows meet in shared memory).
template <DType T, bool F8, ActType A, int NT, int SPLIT, GemvFusion::Kind EPI>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp, (min_blocks<T, F8, NT>()))
    gemv_kernel(DeviceMatrix w, const void* __restrict__ x, int64_t x_stride, int n,
                float* __restrict__ y, int64_t y_stride, bool accumulate, bool vec, GemvFusion f) {
  constexpr int RB = kRowsPerBlock / SPLIT;  // rows per block
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int part = warp % SPLIT, wi = warp / SPLIT;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * RB + wi;
  const bool active = r < w.rows;
  __shared__ float red[kRowsPerBlock][NT];
  __shared__ float ys[RB][NT];
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  const int64_t cols = w.cols;
  const int64_t cols8 = vec ? cols / 8 * 8 : 0;
  constexpr int64_t kStep = 8 * kWarp * SPLIT;  // columns between a lane's steps
  int64_t c = 8 * lane + 8 * kWarp * part;
  // The first weights are requested before waiting for the activations (pdl_wait).
  Raw8 raw[kUnroll];
  bool full = active && c + (kUnroll - 1) * kStep < cols8;
  if (full)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = load_w8<T, F8>(w, r, c + u * kStep);
  pdl_wait();
  __shared__ __align__(16) unsigned long long in_slots[kRowsPerBlock][kNormSlots];
  input_scale_fetch(f, in_slots[warp]);
  for (; full;) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wf[8];
      decode_w8<T, F8>(raw[u], wf);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < n) {
          float xf[8];
          load_x8<A>(x, t * x_stride + c + u * kStep, xf);
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[t] = fmaf(wf[k], xf[k], acc[t]);
        }
      }
    }
    c += kUnroll * kStep;
    full = c + (kUnroll - 1) * kStep < cols8;
    if (full)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) raw[u] = load_w8<T, F8>(w, r, c + u * kStep);
  }
  if (active) {
    for (; c < cols8; c += kStep) {
      float wf[8];
      decode_w8<T, F8>(load_w8<T, F8>(w, r, c), wf);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < n) {
          float xf[8];
          load_x8<A>(x, t * x_stride + c, xf);
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[t] = fmaf(wf[k], xf[k], acc[t]);
        }
      }
    }
    for (int64_t cc = cols8 + lane + kWarp * part; cc < cols; cc += kWarp * SPLIT) {
      const float wv = load_w1<T, F8>(w, r, cc);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < n) acc[t] = fmaf(wv, load_x1<A>(x, t * x_stride + cc), acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = warp_sum(acc[t]);
  if constexpr (SPLIT > 1) {
    if (lane == 0)
#pragma unroll
      for (int t = 0; t < NT; ++t) red[warp][t] = acc[t];
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t] = 0.0f;
#pragma unroll
      for (int p = 0; p < SPLIT; ++p) acc[t] += red[wi * SPLIT + p][t];
    }
  }
  if constexpr (F8) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] *= w.fp8_scale;
  }
  if (f.in_ss) {
    const float in_s = input_scale(f, in_slots[warp]);
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] *= in_s;
  }
  finish_rows<EPI, RB, NT>(f, acc, ys, active, part == 0 && lane == 0, wi, n, r, blockIdx.x, w.rows,
                           y, y_stride, accumulate);
}

// Two warps per row while one warp per row would not fill the GPU twice over; for one
// token, while all of the blocks fit on the GPU at once (a partial second wave of
// blocks leaves too few loads in flight).
int split_for(const DeviceMatrix& w, int n) {
  if (g_split_override > 0) return g_split_override;
  if (n == 1) return w.rows * 2 <= int64_t{kRowsPerBlock} * kNt1BlocksPerSm * sm_count() ? 2 : 1;
  return w.rows < 16384 ? 2 : 1;
}

template <DType T, bool F8, ActType A, int NT, GemvFusion::Kind EPI>
void launch_k(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
              int64_t y_stride, bool accumulate, bool vec, const GemvFusion& f,
              cudaStream_t stream) {
  const int split = split_for(w, n);
  const unsigned threads = kRowsPerBlock * kWarp;
  const unsigned grid = blocks_for(w.rows, kRowsPerBlock / split);
  if (split == 1)
    launch_dependent(gemv_kernel<T, F8, A, NT, 1, EPI>, grid, threads, stream, w, x, x_stride, n, y,
                     y_stride, accumulate, vec, f);
  else
    launch_dependent(gemv_kernel<T, F8, A, NT, 2, EPI>, grid, threads, stream, w, x, x_stride, n, y,
                     y_stride, accumulate, vec, f);
}

// f: the epilogue of a one-token product (gemv_fused), or none.
template <DType T, ActType A, bool F8 = false>
Status launch(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
              int64_t y_stride, bool accumulate, bool vec, const GemvFusion& f,
              cudaStream_t stream) {
  if (f.kind == GemvFusion::kRopeKv)
    launch_k<T, F8, A, 1, GemvFusion::kRopeKv>(w, x, x_stride, n, y, y_stride, false, vec, f,
                                               stream);
  else if (n == 1)
    launch_k<T, F8, A, 1, GemvFusion::kStore>(w, x, x_stride, n, y, y_stride, accumulate, vec, f,
                                              stream);
  else if (n <= 4)
    launch_k<T, F8, A, 4, GemvFusion::kStore>(w, x, x_stride, n, y, y_stride, accumulate, vec, f,
                                              stream);
  else
    launch_k<T, F8, A, 8, GemvFusion::kStore>(w, x, x_stride, n, y, y_stride, accumulate, vec, f,
                                              stream);
  return launch_status("gemv");
}

// Whether the 8-wide loads apply (16-byte aligned rows of w and x).
bool vec_ok(const DeviceMatrix& w, const void* x, int64_t x_stride) {
  const size_t xb = act_bytes(act_type_for(w.type));
  const size_t wb = w.fp8 ? 1 : w.type == DType::kF32 ? 4 : 2;
  return (static_cast<size_t>(w.cols) * wb) % 16 == 0 &&
         (static_cast<size_t>(x_stride) * xb) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

Status dispatch(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
                int64_t y_stride, bool accumulate, const GemvFusion& f, cudaStream_t stream) {
  const bool vec = vec_ok(w, x, x_stride);
  const ActType at = act_type_for(w.type);
  if (w.fp8) {
    // The activations are in the type the original weights asked for.
    switch (at) {
      case ActType::kF32:
        return launch<DType::kF32, ActType::kF32, true>(w, x, x_stride, n, y, y_stride, accumulate,
                                                        vec, f, stream);
      case ActType::kF16:
        return launch<DType::kF16, ActType::kF16, true>(w, x, x_stride, n, y, y_stride, accumulate,
                                                        vec, f, stream);
      case ActType::kBF16:
        return launch<DType::kBF16, ActType::kBF16, true>(w, x, x_stride, n, y, y_stride,
                                                          accumulate, vec, f, stream);
    }
  }
  switch (w.type) {
    case DType::kF32:
      return launch<DType::kF32, ActType::kF32>(w, x, x_stride, n, y, y_stride, accumulate, vec, f,
                                                stream);
    case DType::kF16:
      return launch<DType::kF16, ActType::kF16>(w, x, x_stride, n, y, y_stride, accumulate, vec, f,
                                                stream);
    case DType::kBF16:
      return launch<DType::kBF16, ActType::kBF16>(w, x, x_stride, n, y, y_stride, accumulate, vec,
                                                  f, stream);
    default:
      return unsupported("gemv takes F32, F16 and BF16 weights (quantized ones: gemv_q8), not " +
                         std::string(dtype_name(w.type)));
  }
}

}  // namespace

void set_gemv_split_override(int split) {
  g_split_override = split == 1 || split == 2 ? split : 0;
}

Status gemv(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
            int64_t y_stride, bool accumulate, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  if (n > kGemvMaxTokens) return invalid_argument("gemv takes at most 8 tokens");
  return dispatch(w, x, x_stride, n, y, y_stride, accumulate, GemvFusion{}, stream);
}

bool gemv_takes(const DeviceMatrix& w, int n, const GemvFusion& f) {
  if (n != 1) return false;
  if (f.norm_ss && (f.kind != GemvFusion::kStore || !f.norm_w || !f.norm_out)) return false;
  if (f.in_ss && (f.in_dim <= 0 || reinterpret_cast<uintptr_t>(f.in_ss) % 8 != 0)) return false;
  if (f.in_norm_w && (!is_q8_block_type(w.type) || f.in_ss || f.in_eps < 0)) return false;
  if (f.kind == GemvFusion::kRopeKv) {
    // Adjacent pairs (GGUF's llama layout) meet in one block; the rows are q, k, v.
    const RopeParams& p = f.rope;
    if (p.neox || p.head_dim % 2 != 0 || p.n_heads <= 0 || p.n_kv_heads <= 0 ||
        w.rows != int64_t{p.n_heads + 2 * p.n_kv_heads} * p.head_dim || !f.cs || !f.q_out ||
        f.kv.head_dim != p.head_dim || f.kv.n_kv_heads != p.n_kv_heads)
      return false;
  }
  if (is_q8_block_type(w.type)) return gemv_q8_takes(w);
  return w.fp8 || w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16;
}

Status gemv_fused(const DeviceMatrix& w, const void* x, float* y, bool accumulate,
                  const GemvFusion& f, cudaStream_t stream) {
  if (!gemv_takes(w, 1, f))
    return invalid_argument("gemv_fused: this product cannot take the fusion");
  if (f.kind != GemvFusion::kStore && accumulate)
    return invalid_argument("gemv_fused: an epilogue replaces the store, it cannot accumulate");
  if (f.norm_ss && !accumulate)
    return invalid_argument(
        "gemv_fused: a norm's output comes from a product adding to the "
        "residual");
  if (is_q8_block_type(w.type)) return gemv_q8_fused(w, x, y, accumulate, f, stream);
  return dispatch(w, x, w.cols, 1, y, w.rows, accumulate, f, stream);
}

}  // namespace pagoda::cuda
