// Bias, RoPE and the KV-cache write of one layer in a single pass over the qkv rows.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"

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
  const float c = cs[i].x, s = cs[i].y;
  const float va = val(a), vb = val(b);
  // Explicit roundings: no fused multiply-add, as on the CPU.
  return d == a ? __fsub_rn(__fmul_rn(va, c), __fmul_rn(vb, s))
                : __fadd_rn(__fmul_rn(va, s), __fmul_rn(vb, c));
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
  const int pos = b.row_pos[row];
  const int seq = b.row_seq[row];
  const int32_t block = b.blocks[b.seq_blocks_off[seq] + pos / kv.block_size];
  const size_t off =
      ((static_cast<size_t>(block) * kv.n_kv_heads + h) * kv.block_size + pos % kv.block_size) *
          hd +
      d;
  const float val = part == 1 ? rotated(p, rcs, head, hb, d)
                    : hb      ? __fadd_rn(head[d], hb[d])
                              : head[d];
  void* pool = part == 1 ? kv.k : kv.v;
  if (kv.type == KvType::kF16) {
    static_cast<__half*>(pool)[off] = __float2half_rn(val);
  } else {
    // Divided, not multiplied by a reciprocal, so the byte is the correctly rounded
    // quotient whatever the scale.
    const float scale = part == 1 ? kv.k_scale : kv.v_scale;
    static_cast<__nv_fp8_storage_t*>(pool)[off] =
        __nv_cvt_float_to_fp8(__fdiv_rn(val, scale), __NV_SATFINITE, __NV_E4M3);
  }
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
