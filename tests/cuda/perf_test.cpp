// Kernel timings at Llama-3.1-8B shapes (`pagoda_cuda_tests --gtest_filter='PerfCuda.*'`): weight
// products per type as memory bandwidth (one token) and TFLOP/s (prefill batches), and
// attention. Weights are tiled from one random block: the bytes moved are what counts.
#include <algorithm>
#include <cstring>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv_q8.h"
#include "backend/cuda/kernels.h"
#include "harness.h"

namespace pagoda::cuda::testing {
namespace {

// Timings only: not in the default run (--gtest_filter='PerfCuda.*').
class PerfCuda : public CudaTest {};

DeviceBuffer random_device(size_t bytes, std::mt19937& rng) {
  static std::vector<uint8_t> block;
  if (block.empty()) {
    block.resize(64u << 20);
    // Small finite fp16/bf16 values in every 16-bit word (exponent bits kept low), and
    // finite E4M3 in every byte (bit 3 clear: no NaN, 0x7f / 0xff).
    for (size_t i = 0; i < block.size(); i += 2) {
      const uint32_t r = rng();
      block[i] = static_cast<uint8_t>(r & 0xf7);
      block[i + 1] = static_cast<uint8_t>(0x20 | ((r >> 8) & 0x8f));
    }
  }
  auto b = DeviceBuffer::alloc(bytes);
  if (!b) {
    ADD_FAILURE() << b.status().message();
    return {};
  }
  for (size_t off = 0; off < bytes; off += block.size())
    cudaMemcpy(b->as<uint8_t>() + off, block.data(), std::min(block.size(), bytes - off),
               cudaMemcpyHostToDevice);
  return std::move(b).value();
}

struct Shape {
  const char* name;
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {{"qkv", 6144, 4096},
                             {"wo", 4096, 4096},
                             {"gate_up", 28672, 4096},
                             {"down", 4096, 14336},
                             {"output", 128256, 4096}};

TEST_F(PerfCuda, weight_products) {
  std::mt19937 rng(7);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  DeviceBuffer x = random_device(2048 * 14336 * 2, rng), y = random_device(2048 * 128256 * 4, rng);
  for (DType type :
       {DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    for (const Shape& s : kShapes) {
      // Three copies so consecutive runs do not find the matrix in the 60 MB L2.
      const size_t bytes = device_matrix_bytes(type, s.rows, s.cols);
      std::vector<DeviceBuffer> bufs;
      std::vector<DeviceMatrix> ms;
      for (int i = 0; i < 3; ++i) {
        bufs.push_back(random_device(bytes, rng));
        DeviceMatrix m{type, s.rows, s.cols};
        assign_matrix_storage(&m, bufs.back().get());
        ms.push_back(m);
      }
      const bool plain = type == DType::kBF16 || type == DType::kF16;
      for (int split : {0, 1, 2}) {  // 0: the default choice
        if (split > 0 && !plain) continue;
        set_gemv_split_override(split);
        const double t1 = time_ms(30, [&](int i) {
          (void)(*gemm)->matmul(ms[static_cast<size_t>(i % 3)], x.get(), s.cols, 1, y.as<float>(),
                                s.rows, false, nullptr);
        });
        std::printf("  perf gemv %-5s %-8s %6lldx%-6lld n=1%s: %8.1f us %7.0f GB/s\n",
                    std::string(dtype_name(type)).c_str(), s.name, static_cast<long long>(s.rows),
                    static_cast<long long>(s.cols),
                    split == 0   ? ""
                    : split == 1 ? " split1"
                                 : " split2",
                    t1 * 1e3, bytes / t1 / 1e6);
      }
      set_gemv_split_override(0);
      if (Gemm::takes_q8(ms[0])) {
        // The product alone, its activations already quantized (as a norm or SiLU in
        // front of it writes them in a decode step).
        auto xq = (*gemm)->q8_input(s.cols, 1, nullptr);
        if (!xq) FAIL() << xq.status().message();
        (void)quantize_q8(x.get(), s.cols, 1, *xq, nullptr);
        for (int split : {0, 1, 2, 4}) {  // 0: the default choice
          set_gemv_q8_split_override(split);
          const double t1 = time_ms(30, [&](int i) {
            (void)(*gemm)->matmul_q8(ms[static_cast<size_t>(i % 3)], *xq, 1, y.as<float>(), s.rows,
                                     false, nullptr);
          });
          std::printf("  perf gemv %-5s %-8s %6lldx%-6lld n=1 q8 in%s: %8.1f us %7.0f GB/s\n",
                      std::string(dtype_name(type)).c_str(), s.name, static_cast<long long>(s.rows),
                      static_cast<long long>(s.cols),
                      split == 0 ? "" : str_format(" split%d", split).c_str(), t1 * 1e3,
                      bytes / t1 / 1e6);
        }
        set_gemv_q8_split_override(0);
      }
      for (int n : {512, 2048}) {
        if (s.rows > 50000) continue;  // the output product runs for one row in prefill
        const double t = time_ms(10, [&](int i) {
          (void)(*gemm)->matmul(ms[static_cast<size_t>(i % 3)], x.get(), s.cols, n, y.as<float>(),
                                s.rows, false, nullptr);
        });
        std::printf("  perf gemm %-5s %-8s %6lldx%-6lld n=%d: %8.1f us %7.0f TFLOP/s\n",
                    std::string(dtype_name(type)).c_str(), s.name, static_cast<long long>(s.rows),
                    static_cast<long long>(s.cols), n, t * 1e3,
                    2.0 * s.rows * s.cols * n / t / 1e9);
      }
    }
  }
}

// FP8 weights (--quantization fp8) against BF16 at decode-batch and prefill token counts:
// the whole product (activation max, quantization, cuBLASLt E4M3), the activation
// passes alone, and the BF16 output product before and after FP8 products have run on
// the same Gemm (a profile of 128-sequence decode showed it 6x slower in FP8 runs).
TEST_F(PerfCuda, fp8_products) {
  std::mt19937 rng(8);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  DeviceBuffer x = random_device(512 * 14336 * 2, rng), y = random_device(512 * 128256 * 4, rng);
  DeviceBuffer out_w = random_device(device_matrix_bytes(DType::kBF16, 128256, 4096), rng);
  DeviceMatrix out_m{DType::kBF16, 128256, 4096};
  assign_matrix_storage(&out_m, out_w.get());
  auto time_output = [&](const char* when) {
    const double t = time_ms(10, [&](int) {
      (void)(*gemm)->matmul(out_m, x.get(), 4096, 128, y.as<float>(), 128256, false, nullptr);
    });
    std::printf("  perf output BF16 128256x4096 n=128 %s: %8.1f us\n", when, t * 1e3);
  };
  time_output("before FP8 products");
  DeviceBuffer meta = to_device(std::vector<float>(8, 0.01f));
  DeviceBuffer amax = to_device(std::vector<uint32_t>(4, 0));
  DeviceBuffer x8 = random_device(512 * 14336, rng);
  for (const Shape& s : kShapes) {
    if (s.rows > 50000) continue;
    std::vector<DeviceBuffer> bufs;
    std::vector<DeviceMatrix> bf, f8;
    for (int i = 0; i < 3; ++i) {
      bufs.push_back(random_device(device_matrix_bytes(DType::kBF16, s.rows, s.cols), rng));
      DeviceMatrix m{DType::kBF16, s.rows, s.cols};
      assign_matrix_storage(&m, bufs.back().get());
      bf.push_back(m);
      m.fp8 = true;  // the first rows x cols bytes as E4M3 (timing only)
      m.fp8_scale = 0.01f;
      m.fp8_scale_dev = meta.as<float>();
      f8.push_back(m);
    }
    for (int n : {128, 512}) {
      auto run = [&](std::vector<DeviceMatrix>& ms) {
        return time_ms(10, [&](int i) {
          (void)(*gemm)->matmul(ms[static_cast<size_t>(i % 3)], x.get(), s.cols, n, y.as<float>(),
                                s.rows, false, nullptr);
        });
      };
      const double tb = run(bf), tf = run(f8);
      const double ta = time_ms(10, [&](int) {
        (void)fp8_amax(x.get(), ActType::kBF16, n, s.cols, s.cols, amax.as<uint32_t>(), nullptr);
      });
      const double tq = time_ms(10, [&](int) {
        (void)fp8_quantize(x.get(), ActType::kBF16, n, s.cols, s.cols, amax.as<uint32_t>(),
                           x8.as<uint8_t>(), meta.as<float>() + 4, nullptr);
      });
      std::printf(
          "  perf fp8 %-8s %6lldx%-6lld n=%d: bf16 %8.1f us, fp8 %8.1f us (amax %.1f, "
          "quantize %.1f)\n",
          s.name, static_cast<long long>(s.rows), static_cast<long long>(s.cols), n, tb * 1e3,
          tf * 1e3, ta * 1e3, tq * 1e3);
    }
  }
  time_output("after FP8 products");
}

TEST_F(PerfCuda, attention) {
  std::mt19937 rng(8);
  const int n_heads = 32, n_kv = 8, hd = 128, bs = 16;
  for (int ctx : {512, 4096}) {
    const int n_blocks = ctx / bs;
    DeviceBuffer kc = random_device(static_cast<size_t>(n_blocks) * bs * n_kv * hd * 2, rng);
    DeviceBuffer vc = random_device(kc.bytes(), rng);
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    for (int i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 7) % n_blocks;
    KvLayerView kv{kc.as<uint16_t>(), vc.as<uint16_t>(), bs, n_kv, hd};
    // Decode: one row at position ctx - 1.
    {
      std::vector<int32_t> zero = {0}, pos = {ctx - 1}, nq = {1}, p0 = {ctx - 1};
      DeviceBuffer d_seq = to_device(zero), d_pos = to_device(pos), d_qrow = to_device(zero),
                   d_nq = to_device(nq), d_p0 = to_device(p0), d_off = to_device(zero),
                   d_tab = to_device(table), d_rows = to_device(zero);
      DeviceBatch b{1,
                    1,
                    d_seq.as<int32_t>(),
                    d_pos.as<int32_t>(),
                    d_qrow.as<int32_t>(),
                    d_nq.as<int32_t>(),
                    d_p0.as<int32_t>(),
                    d_off.as<int32_t>(),
                    d_tab.as<int32_t>()};
      DeviceBuffer q = random_device(n_heads * hd * 2, rng), out = poisoned(n_heads * hd * 4);
      DeviceBuffer ws = poisoned(attention_workspace_bytes(1, n_heads, hd));
      AttentionPlan plan;
      plan.decode_rows = d_rows.as<int32_t>();
      plan.n_decode_rows = 1;
      plan.workspace = ws.get();
      plan.workspace_bytes = ws.bytes();
      const double t = time_ms(50, [&](int) {
        (void)attention(q.as<uint16_t>(), kv, b, plan, n_heads, 0.088f, out.get(), ActType::kF32,
                        nullptr);
      });
      std::printf("  perf attention decode ctx %d: %.1f us, KV %.0f GB/s\n", ctx, t * 1e3,
                  2.0 * ctx * n_kv * hd * 2 / t / 1e6);
    }
    // Prefill: the whole context as one chunk from position 0.
    {
      std::vector<int32_t> seq(static_cast<size_t>(ctx), 0), pos(static_cast<size_t>(ctx));
      for (int i = 0; i < ctx; ++i) pos[static_cast<size_t>(i)] = i;
      std::vector<int32_t> zero = {0}, nq = {ctx};
      DeviceBuffer d_seq = to_device(seq), d_pos = to_device(pos), d_qrow = to_device(zero),
                   d_nq = to_device(nq), d_p0 = to_device(zero), d_off = to_device(zero),
                   d_tab = to_device(table), d_seqs = to_device(zero);
      DeviceBatch b{ctx,
                    1,
                    d_seq.as<int32_t>(),
                    d_pos.as<int32_t>(),
                    d_qrow.as<int32_t>(),
                    d_nq.as<int32_t>(),
                    d_p0.as<int32_t>(),
                    d_off.as<int32_t>(),
                    d_tab.as<int32_t>()};
      DeviceBuffer q = random_device(static_cast<size_t>(ctx) * n_heads * hd * 2, rng);
      DeviceBuffer out = poisoned(static_cast<size_t>(ctx) * n_heads * hd * 2);
      AttentionPlan plan;
      plan.prefill_seqs = d_seqs.as<int32_t>();
      plan.n_prefill_seqs = 1;
      plan.max_prefill_q = ctx;
      const double t = time_ms(10, [&](int) {
        (void)attention(q.as<uint16_t>(), kv, b, plan, n_heads, 0.088f, out.get(), ActType::kBF16,
                        nullptr);
      });
      const double flops = 4.0 * n_heads * hd * (static_cast<double>(ctx) * ctx / 2);
      std::printf("  perf attention prefill %d (causal): %.1f us, %.0f TFLOP/s\n", ctx, t * 1e3,
                  flops / t / 1e9);
    }
  }
}

// Decode of a batch of long contexts (the offline-throughput step: 256 sequences at
// depth 1,536, each with its own shuffled blocks), the case bound by reading the KV cache.
TEST_F(PerfCuda, attention_batch) {
  std::mt19937 rng(9);
  const int n_heads = 32, n_kv = 8, hd = 128, bs = 16;
  for (int rows : {64, 256}) {
    const int ctx = 1536, per_seq = ctx / bs, n_blocks = rows * per_seq;
    DeviceBuffer kc = random_device(static_cast<size_t>(n_blocks) * bs * n_kv * hd * 2, rng);
    DeviceBuffer vc = random_device(kc.bytes(), rng);
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    for (int i = 0; i < n_blocks; ++i) ids[static_cast<size_t>(i)] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> seq(rows), pos(rows, ctx - 1), nq(rows, 1), off(rows);
    for (int r = 0; r < rows; ++r) {
      seq[static_cast<size_t>(r)] = r;
      off[static_cast<size_t>(r)] = r * per_seq;
    }
    KvLayerView kv{kc.as<uint16_t>(), vc.as<uint16_t>(), bs, n_kv, hd};
    DeviceBuffer d_seq = to_device(seq), d_pos = to_device(pos), d_nq = to_device(nq),
                 d_off = to_device(off), d_tab = to_device(ids);
    DeviceBatch b{rows,
                  rows,
                  d_seq.as<int32_t>(),
                  d_pos.as<int32_t>(),
                  d_seq.as<int32_t>(),
                  d_nq.as<int32_t>(),
                  d_pos.as<int32_t>(),
                  d_off.as<int32_t>(),
                  d_tab.as<int32_t>()};
    DeviceBuffer q = random_device(static_cast<size_t>(rows) * n_heads * hd * 2, rng);
    DeviceBuffer out = poisoned(static_cast<size_t>(rows) * n_heads * hd * 2);
    DeviceBuffer ws = poisoned(attention_workspace_bytes(rows, n_heads, hd));
    AttentionPlan plan;
    plan.decode_rows = d_seq.as<int32_t>();
    plan.n_decode_rows = rows;
    plan.workspace = ws.get();
    plan.workspace_bytes = ws.bytes();
    // fp16, then the same bytes read as an FP8 pool (half of them); the row kernel, then
    // the tensor-core kernel.
    for (int variant = 0; variant < 4; ++variant) {
      kv.type = variant % 2 == 0 ? KvType::kF16 : KvType::kFp8E4M3;
      set_decode_tensor_cores(variant >= 2);
      const double t = time_ms(20, [&](int) {
        (void)attention(q.as<uint16_t>(), kv, b, plan, n_heads, 0.088f, out.get(), ActType::kBF16,
                        nullptr);
      });
      const size_t elem = kv_elem_bytes(kv.type);
      std::printf(
          "  perf attention decode %d rows x ctx %d, %s KV, %s kernel: %.1f us, KV %.0f "
          "GB/s\n",
          rows, ctx, elem == 2 ? "fp16" : "fp8", variant >= 2 ? "mma" : "row", t * 1e3,
          2.0 * rows * ctx * n_kv * hd * elem / t / 1e6);
    }
    set_decode_tensor_cores(true);
    set_decode_fp8_unroll(8);
  }
}

// Sampling on the GPU at a serving batch (256 rows of a 128k vocabulary, top-p and top-k
// on): the cost a sampled decode step adds instead of sending 128 MB of logits to the host.
TEST_F(PerfCuda, sample) {
  std::mt19937 rng(10);
  const int vocab = 128256, rows = 256;
  DeviceBuffer x = random_device(static_cast<size_t>(rows) * vocab * 4, rng);
  for (int mode = 0; mode < 2; ++mode) {
    std::vector<SamplingRow> rs(rows);
    for (int j = 0; j < rows; ++j) {
      rs[j].temperature = 0.8f;
      rs[j].top_p = mode ? 0.95f : 1.0f;
      rs[j].top_k = mode ? 50 : 0;
      rs[j].u = (j + 0.5) / rows;
    }
    DeviceBuffer d_rows = to_device(rs), d_pen = to_device(std::vector<int32_t>{0, 0, 0}),
                 d_out = poisoned(rows * 4);
    const double t = time_ms(10, [&](int) {
      (void)sample_rows(x.as<float>(), rows, vocab, d_rows.as<SamplingRow>(), d_pen.as<int32_t>(),
                        d_out.as<int32_t>(), nullptr);
    });
    std::printf("  perf sample %d rows x %d vocab (%s): %.1f us\n", rows, vocab,
                mode ? "top-k 50, top-p 0.95" : "temperature only", t * 1e3);
  }
}

}  // namespace
}  // namespace pagoda::cuda::testing
