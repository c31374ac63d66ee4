// matmul(): converts the activations once, then splits the product into tiles of row
// groups x token groups handed out to the pool's threads from one atomic counter.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm_kernels.h"

namespace pagoda::cpu {
namespace {

// Below this many activation elements a parallel conversion costs more than it saves.
constexpr int64_t kParallelConvertElems = 16384;

// One-token products are split into about this many tiles per thread: enough that a
// core slowed by a neighbour does not hold the other back, few enough that each tile
// is a long sequential stream for the prefetcher.
constexpr int64_t kTasksPerThread = 4;
// Prefill tiles span about this many tokens, so a tile's weights are reused from L1/L2
// across its token groups.
constexpr int64_t kTileTokens = 64;
constexpr int64_t kTileRowGroups = 4;

struct Job {
  const GemmKernel* kern;
  GemmArgs args;
  uint8_t* act;  // args.act, writable
  const float* x;
  int64_t x_stride;
  int64_t cols;
  int64_t n_groups;
  int64_t rc, tc, n_rt, n_tt;
  std::atomic<int64_t> next{0};

  void convert_all() {
    const int g = kern->token_group;
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_groups) return;
      convert(i, g);
    }
  }
  void convert(int64_t i, int g) {
    const int64_t t0 = i * g;
    kern->convert(x + t0 * x_stride, x_stride,
                  static_cast<int>(std::min<int64_t>(g, args.n_tokens - t0)), cols,
                  act + static_cast<size_t>(i) * args.act_group_bytes);
  }
  void multiply_all() {
    const int64_t n = n_rt * n_tt;
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      const int64_t rt = i / n_tt, tt = i % n_tt;
      const int64_t rg0 = rt * rc, tg0 = tt * tc;
      kern->tile(args, rg0, std::min(rg0 + rc, args.w->row_groups), tg0,
                 std::min(tg0 + tc, n_groups));
    }
  }
};

}  // namespace

const GemmKernel* find_gemm(const GemmEntry* table, size_t n, DType t) {
  for (size_t i = 0; i < n; ++i)
    if (table[i].type == t) return &table[i].kernel;
  return nullptr;
}

const GemmKernel* gemm_kernel_avx512(DType t) {
  if (const GemmKernel* k = gemm_q32_avx512(t)) return k;
  if (const GemmKernel* k = gemm_kquant_avx512(t)) return k;
  return gemm_float_avx512(t);
}

const GemmKernel* gemm_kernel_avx2(DType t) {
  if (const GemmKernel* k = gemm_q32_avx2(t)) return k;
  if (const GemmKernel* k = gemm_kquant_avx2(t)) return k;
  return gemm_float_avx2(t);
}

const GemmKernel* gemm_kernel(DType t, Isa isa) {
  if (isa == Isa::kAvx512)
    if (const GemmKernel* k = gemm_kernel_avx512(t)) return k;
  if (isa != Isa::kGeneric)
    if (const GemmKernel* k = gemm_kernel_avx2(t)) return k;
  return gemm_kernel_generic(t);
}

uint8_t* MatmulScratch::get(size_t bytes) {
  // Only a call needing more than any before it allocates.
  if (buf_.size() < bytes + 64) buf_.resize(bytes + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf_.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, MatmulScratch& scratch) {
  if (n_tokens <= 0) return;
  const WeightMatrix::Impl& wi = w.impl();
  Job job;
  job.kern = gemm_kernel(wi.type, best_isa());
  const int g = job.kern->token_group;
  job.n_groups = (n_tokens + g - 1) / g;
  job.x = x;
  job.x_stride = x_stride;
  job.cols = wi.cols;
  job.args.w = &wi;
  job.args.act_group_bytes = job.kern->act_group_bytes(wi.k);
  job.act = scratch.get(job.args.act_group_bytes * static_cast<size_t>(job.n_groups));
  job.args.act = job.act;
  job.args.n_tokens = n_tokens;
  job.args.y = y;
  job.args.y_stride = y_stride;

  const int threads = pool.size();
  if (threads > 1 && job.n_groups > 1 && n_tokens * wi.cols >= kParallelConvertElems) {
    pool.run([&job](int, int) { job.convert_all(); });
  } else {
    for (int64_t i = 0; i < job.n_groups; ++i) job.convert(i, g);
  }

  const int64_t rg = wi.row_groups;
  if (job.n_groups == 1) {
    job.tc = 1;
    const int64_t tasks = kTasksPerThread * threads;
    job.rc = std::max<int64_t>(1, (rg + tasks - 1) / tasks);
  } else {
    job.tc = std::clamp<int64_t>(kTileTokens / g, 1, job.n_groups);
    job.rc = std::min<int64_t>(kTileRowGroups, rg);
  }
  job.n_rt = (rg + job.rc - 1) / job.rc;
  job.n_tt = (job.n_groups + job.tc - 1) / job.tc;
  job.next.store(0, std::memory_order_relaxed);
  if (threads == 1 || job.n_rt * job.n_tt == 1) {
    job.multiply_all();
  } else {
    pool.run([&job](int, int) { job.multiply_all(); });
  }
}

}  // namespace pagoda::cpu
