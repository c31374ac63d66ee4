// Bias, RoPE and the KV-cache write of one layer in a single pass over the qkv rows.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv_fusion.cuh"

namespace pagoda::cuda {
namespace {

// Angle of pair i at position pos, computed operation for operation as the CPU does it
// (llama.cpp's order: the frequency by repeated multiplication in float), so rotations
// agree bit for bit far into the context.
__device__ __forceinline__ float rope_angle(const RopeParams& p, int pos, int i) {
  float theta = static_cast<float>(pos);
  for (int k = 0; k < i; ++k) theta = __fmul_rn(theta, p.theta_scale);
  if (p.freq_factors) theta = __fdiv_rn(theta, p.freq_factors[i]);
  return __fmul_rn(theta, p.freq_scale);
}

__global__ void rope_table_kernel(RopeParams p, DeviceBatch b, float2* __restrict__ cs) {
  const int row = blockIdx.x;
  const int pos = b.row_pos[row];
  for (int i = threadIdx.x; i < p.n_pairs; i += blockDim.x) {
    float s, c;
    sincosf(rope_angle(p, pos, i), &s, &c);
    cs[static_cast<int64_t>(row) * p.n_pairs + i] = make_float2(c, s);
  }
}

// Element d of a head after rotation (x is the head's first element).
__device__ __forceinline__ float rotated(const RopeParams& p, const float2* cs, const float* x,
                                         const float* bias, int d) {
  auto val = [&](int e) { return bias ? __fadd_rn(x[e], bias[e]) : x[e]; };
  if (d >= 2 * p.n_pairs) return val(d);
  int i, a, b;
  if (p.neox) {
    i = d % p.n_pairs;
    a = i;
    b = i + p.n_pairs;
  } else {
    i = d / 2;
    a = 2 * i;
    b = a + 1;
  }
  return rope_rotate(cs[i].x, cs[i].y, val(a), val(b), d == a);
}

// grid (rows, ceil(width / blockDim.x)): one element of q, k or v per thread.
__global__ void rope_qkv_kernel(const float* __restrict__ qkv, const float* __restrict__ bias,
                                RopeParams p, const float2* __restrict__ cs, DeviceBatch b,
                                __half* __restrict__ q_out, KvLayerView kv) {
  pdl_trigger();
  pdl_wait();
  const int row = blockIdx.x;
  const int hd = p.head_dim, qd = p.n_heads * hd, kvd = p.n_kv_heads * hd;
  const int width = qd + 2 * kvd;
  const int e = blockIdx.y * blockDim.x + threadIdx.x;
  if (e >= width) return;
  const float* x = qkv + static_cast<int64_t>(row) * width;
  const float2* rcs = cs + static_cast<int64_t>(row) * p.n_pairs;
  const int part = e < qd ? 0 : e < qd + kvd ? 1 : 2;
  const int base = part == 0 ? 0 : part == 1 ? qd : qd + kvd;
  const int h = (e - base) / hd, d = (e - base) % hd;
  const float* head = x + base + h * hd;
  const float* hb = bias ? bias + base + h * hd : nullptr;
  if (part == 0) {
    q_out[static_cast<int64_t>(row) * qd + e] = __float2half_rn(rotated(p, rcs, head, hb, d));
    return;
  }
  const float val = part == 1 ? rotated(p, rcs, head, hb, d)
                    : hb      ? __fadd_rn(head[d], hb[d])
                              : head[d];
  kv_store(kv, b, row, part == 1, h, d, val);
}

}  // namespace

Status rope_tables(const RopeParams& p, const DeviceBatch& b, float* cs, cudaStream_t stream) {
  if (b.n_rows <= 0 || p.n_pairs <= 0) return Status::ok();
  rope_table_kernel<<<b.n_rows, 64, 0, stream>>>(p, b, reinterpret_cast<float2*>(cs));
  return launch_status("rope_tables");
}

Status rope_qkv_store(const float* qkv, const float* bias, const RopeParams& p, const float* cs,
                      const DeviceBatch& b, uint16_t* q_out, const KvLayerView& kv,
                      cudaStream_t stream) {
  if (b.n_rows <= 0) return Status::ok();
  const int width = (p.n_heads + 2 * p.n_kv_heads) * p.head_dim;
  const dim3 grid(static_cast<unsigned>(b.n_rows), blocks_for(width, 256));
  launch_dependent(rope_qkv_kernel, grid, 256, stream, qkv, bias, p,
                   reinterpret_cast<const float2*>(cs), b, reinterpret_cast<__half*>(q_out), kv);
  return launch_status("rope_qkv_store");
}

}  // namespace pagoda::cuda
