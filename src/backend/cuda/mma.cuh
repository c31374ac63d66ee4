// Tensor-core and asynchronous-copy helpers of the attention kernels (inline PTX).
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with f16 operands; g = lane / 4, c = lane % 4):
// A (16x16): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..)
// B (16x8):  b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g)
// C (16x8):  c0,c1 = (g, 2c..2c+1), c2,c3 = (g+8, 2c..2c+1)
#pragma once

#include "backend/cuda/common.cuh"

namespace pagoda::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  // src-size 0 writes zeros: rows outside the context are zero-filled.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}
// Closes the group of copies issued so far; cp_async_wait_all then waits for it too.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of the thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// s[nt] += Q K^T for one warp's 16 query rows (A fragments qf, one per 16 of head_dim)
// and KEYS keys of fp16 K staged in shared memory as rows of `stride` halves: ldmatrix
// x4 loads B fragments for two 8-key column tiles at once.
template <int HD, int KEYS>
__device__ __forceinline__ void qk_tile(float (*s)[4], const uint32_t (*qf)[4], const __half* k_s,
                                        int stride, int lane) {
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
#pragma unroll
    for (int nt = 0; nt < KEYS / 8; nt += 2) {
      const int mi = lane / 8;
      const int key = (nt + (mi >> 1)) * 8 + lane % 8;
      uint32_t bf[4];
      ldmatrix_x4(bf, k_s + key * stride + ks * 16 + (mi & 1) * 8);
      mma16816(s[nt], qf[ks], bf[0], bf[1]);
      mma16816(s[nt + 1], qf[ks], bf[2], bf[3]);
    }
  }
}

// o[dt] += P V for one warp's 16 rows and keys kk*16 .. kk*16+15: P as A fragments (pf)
// and fp16 V staged in shared memory as rows of `stride` halves, read transposed by
// ldmatrix into B fragments for two 8-wide column tiles at once.
template <int HD>
__device__ __forceinline__ void pv_step(float (*o)[4], const uint32_t* pf, const __half* v_s,
                                        int stride, int kk, int lane) {
#pragma unroll
  for (int dt = 0; dt < HD / 8; dt += 2) {
    const int mi = lane / 8;
    const int key = kk * 16 + (mi & 1) * 8 + lane % 8;
    uint32_t vf[4];
    ldmatrix_x4_trans(vf, v_s + key * stride + (dt + (mi >> 1)) * 8);
    mma16816(o[dt], pf, vf[0], vf[1]);
    mma16816(o[dt + 1], pf, vf[2], vf[3]);
  }
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Eight FP8 E4M3 values (8 bytes) widened to eight fp16 (16 bytes), in order.
// Four E4M3 bytes (first in the lowest) as two registers of two fp16 each: operand
// registers of an mma, bytes 0-1 in lo and 2-3 in hi.
__device__ __forceinline__ void fp8x4_to_b16x2(uint32_t w, uint32_t* lo, uint32_t* hi) {
  __half2 a, b;
  fp8x4_to_half2x2(w, &a, &b);
  *lo = *reinterpret_cast<const uint32_t*>(&a);
  *hi = *reinterpret_cast<const uint32_t*>(&b);
}

__device__ __forceinline__ uint4 fp8x8_to_half8(uint2 b) {
  __half2 h[4];
  fp8x4_to_half2x2(b.x, &h[0], &h[1]);
  fp8x4_to_half2x2(b.y, &h[2], &h[3]);
  return *reinterpret_cast<const uint4*>(h);
}

// The two E4M3 bytes in the low half of w as one register of two fp16 (lowest first).
__device__ __forceinline__ uint32_t fp8x2_to_b16x2(uint32_t w) {
  const __half2 h = __half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3));
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace pagoda::cuda
