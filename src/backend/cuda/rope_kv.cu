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

// Element d of a head after rotation (x is the head's first element).
__device__ __forceinline__ float rotated(const RopeParams& p, const float* x, const float* bias,
                                         int d, int pos) {
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
  float s, c;
  sincosf(rope_angle(p, pos, i), &s, &c);
  const float va = val(a), vb = val(b);
  // Explicit roundings: no fused multiply-add, as on the CPU.
  return d == a ? __fsub_rn(__fmul_rn(va, c), __fmul_rn(vb, s))
                : __fadd_rn(__fmul_rn(va, s), __fmul_rn(vb, c));
}

__global__ void rope_qkv_kernel(const float* __restrict__ qkv, const float* __restrict__ bias,
                                RopeParams p, DeviceBatch b, __half* __restrict__ q_out,
                                KvLayerView kv) {
  const int row = blockIdx.x;
  const int hd = p.head_dim, qd = p.n_heads * hd, kvd = p.n_kv_heads * hd;
  const int width = qd + 2 * kvd;
  const float* x = qkv + static_cast<int64_t>(row) * width;
  const int pos = b.row_pos[row];
  const int seq = b.row_seq[row];
  const int32_t block = b.blocks[b.seq_blocks_off[seq] + pos / kv.block_size];
  const int slot = pos % kv.block_size;
  for (int e = threadIdx.x; e < width; e += blockDim.x) {
    const int part = e < qd ? 0 : e < qd + kvd ? 1 : 2;
    const int base = part == 0 ? 0 : part == 1 ? qd : qd + kvd;
    const int h = (e - base) / hd, d = (e - base) % hd;
    const float* head = x + base + h * hd;
    const float* hb = bias ? bias + base + h * hd : nullptr;
    if (part == 0) {
      q_out[static_cast<int64_t>(row) * qd + e] = __float2half_rn(rotated(p, head, hb, d, pos));
      continue;
    }
    const size_t off =
        ((static_cast<size_t>(block) * kv.n_kv_heads + h) * kv.block_size + slot) * hd + d;
    if (part == 1) {
      reinterpret_cast<__half*>(kv.k)[off] = __float2half_rn(rotated(p, head, hb, d, pos));
    } else {
      const float v = hb ? __fadd_rn(head[d], hb[d]) : head[d];
      reinterpret_cast<__half*>(kv.v)[off] = __float2half_rn(v);
    }
  }
}

}  // namespace

Status rope_qkv_store(const float* qkv, const float* bias, const RopeParams& p,
                      const DeviceBatch& b, uint16_t* q_out, const KvLayerView& kv,
                      cudaStream_t stream) {
  if (b.n_rows <= 0) return Status::ok();
  rope_qkv_kernel<<<b.n_rows, 256, 0, stream>>>(qkv, bias, p, b, reinterpret_cast<__half*>(q_out),
                                                kv);
  return launch_status("rope_qkv_store");
}

}  // namespace pagoda::cuda
