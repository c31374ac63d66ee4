// The row-wise ops, embedding lookups and weight products on the GPU against the CPU
// reference functions (backend/cpu) on fresh random inputs, outputs poisoned with NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv_q8.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "harness.h"

namespace pagoda::cuda::testing {
namespace {

class CudaOps : public CudaTest {};

constexpr ActType kActs[] = {ActType::kF32, ActType::kF16, ActType::kBF16};

// Bound on the NMSE of a value rounded to `t` (f16: 2^-11 relative, bf16: 2^-8).
double rounding_bound(ActType t) {
  return t == ActType::kF32 ? 1e-12 : t == ActType::kF16 ? 1e-6 : 3e-5;
}

TEST_F(CudaOps, rms_norm_matches_cpu) {
  std::mt19937 rng(1);
  // 7 rows take 1,024 threads a row and 70 rows 256: dim 5,000 at 70 rows is the path for
  // rows too long to stay in registers.
  for (auto [dim, n] :
       {std::pair{64, 7}, std::pair{100, 7}, std::pair{4096, 7}, std::pair{5000, 70}}) {
    const auto x = random_floats(rng, static_cast<size_t>(n) * dim, 3.0f);
    const auto w = random_floats(rng, static_cast<size_t>(dim));
    const std::vector<int32_t> rows = {6, 0, 3};
    DeviceBuffer dx = to_device(x), dw = to_device(w), drows = to_device(rows);
    for (ActType t : kActs) {
      for (bool gather : {false, true}) {
        const int m = gather ? static_cast<int>(rows.size()) : n;
        DeviceBuffer out = poisoned(static_cast<size_t>(m) * dim * act_bytes(t));
        EXPECT_OK(rms_norm(dx.as<float>(), dim, gather ? drows.as<int32_t>() : nullptr,
                           dw.as<float>(), out.get(), t, m, dim, 1e-5f, nullptr));
        const auto got = decode_act(to_host<uint8_t>(out, out.bytes()), t);
        std::vector<float> ref(static_cast<size_t>(m) * dim);
        for (int i = 0; i < m; ++i) {
          const int r = gather ? rows[static_cast<size_t>(i)] : i;
          cpu::rms_norm(x.data() + static_cast<size_t>(r) * dim, w.data(),
                        ref.data() + static_cast<size_t>(i) * dim, dim, 1e-5f);
        }
        EXPECT_NMSE(str_format("rms_norm dim %d %s%s", dim, act_name(t), gather ? " gathered" : ""),
                    got.data(), ref.data(), ref.size(), rounding_bound(t));
      }
    }
  }
}

// Greedy choice on the GPU against std::max_element (the first maximum): odd and aligned
// vocabularies, a maximum planted twice (the lower index wins) and one in the last place.
TEST_F(CudaOps, argmax_rows_match_first_maximum) {
  std::mt19937 rng(13);
  for (int vocab : {50257, 128256}) {
    const int n = 4;
    auto logits = random_floats(rng, static_cast<size_t>(n) * vocab, 4.0f);
    auto row = [&](int r) { return logits.data() + static_cast<size_t>(r) * vocab; };
    row(1)[vocab / 3] = row(1)[vocab / 2 + 1] = 100.0f;  // a tie
    row(2)[vocab - 1] = 100.0f;
    row(3)[5] = row(3)[6] = 100.0f;  // a tie within one 16-byte piece
    DeviceBuffer dl = to_device(logits), out = poisoned(n * sizeof(int32_t));
    EXPECT_OK(argmax_rows(dl.as<float>(), n, vocab, out.as<int32_t>(), nullptr));
    const auto got = to_host<int32_t>(out, n);
    for (int r = 0; r < n; ++r) {
      const auto want = static_cast<int32_t>(std::max_element(row(r), row(r) + vocab) - row(r));
      if (got[static_cast<size_t>(r)] != want)
        ADD_FAILURE() << str_format("argmax vocab %d row %d: %d, want %d", vocab, r,
                                    got[static_cast<size_t>(r)], want);
    }
    std::printf("  ok   argmax vocab %d: %d rows\n", vocab, n);
  }
}

TEST_F(CudaOps, silu_mul_matches_cpu) {
  std::mt19937 rng(2);
  const int n = 5, ff = 1000;
  const auto gu = random_floats(rng, static_cast<size_t>(n) * 2 * ff, 2.0f);
  DeviceBuffer dgu = to_device(gu);
  for (ActType t : kActs) {
    DeviceBuffer out = poisoned(static_cast<size_t>(n) * ff * act_bytes(t));
    EXPECT_OK(silu_mul(dgu.as<float>(), n, ff, out.get(), t, nullptr));
    const auto got = decode_act(to_host<uint8_t>(out, out.bytes()), t);
    std::vector<float> ref(static_cast<size_t>(n) * ff);
    for (int i = 0; i < n; ++i)
      cpu::silu_mul(gu.data() + static_cast<size_t>(i) * 2 * ff,
                    gu.data() + static_cast<size_t>(i) * 2 * ff + ff,
                    ref.data() + static_cast<size_t>(i) * ff, ff);
    // The CPU's vector exp differs from CUDA's expf in the last bits.
    EXPECT_NMSE(str_format("silu_mul %s", act_name(t)), got.data(), ref.data(), ref.size(),
                std::max(1e-11, rounding_bound(t)));
  }
}

// The 8-bit outputs of rms_norm and silu_mul (decode steps over GGUF block weights)
// against the f16 outputs quantized by the products' own kernel: the same bytes.
std::vector<uint8_t> q8_bytes(const DeviceBuffer& b, int64_t cols, int n) {
  const Q8Act a = q8_act_view(b.get(), cols, n);
  const size_t nb = static_cast<size_t>(cols / 32) * static_cast<size_t>(n);
  const auto all = to_host<uint8_t>(b, b.bytes());
  std::vector<uint8_t> out;
  auto take = [&](const void* p, size_t bytes) {
    const size_t off =
        static_cast<size_t>(static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(b.get()));
    out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(off),
               all.begin() + static_cast<std::ptrdiff_t>(off + bytes));
  };
  take(a.q, static_cast<size_t>(cols) * n);
  take(a.d, nb * 4);
  take(a.s, nb * 4);
  take(a.c, nb * 4);
  return out;
}

TEST_F(CudaOps, q8_outputs_match_separate_quantization) {
  std::mt19937 rng(21);
  for (int n : {1, 5, 70}) {
    const int dim = 4128, ff = 1056;  // not multiples of the norm's 1,024 threads
    const auto x = random_floats(rng, static_cast<size_t>(n) * dim, 3.0f);
    const auto w = random_floats(rng, static_cast<size_t>(dim));
    const auto gu = random_floats(rng, static_cast<size_t>(n) * 2 * ff, 2.0f);
    DeviceBuffer dx = to_device(x), dw = to_device(w), dgu = to_device(gu);
    for (const bool norm : {true, false}) {
      const int cols = norm ? dim : ff;
      const size_t bytes = gemv_q8_scratch_bytes(cols, n);
      DeviceBuffer fused = poisoned(bytes), sep = poisoned(bytes);
      DeviceBuffer f16 = poisoned(static_cast<size_t>(n) * cols * 2);
      const Q8Act a = q8_act_view(fused.get(), cols, n), b = q8_act_view(sep.get(), cols, n);
      if (norm) {
        EXPECT_OK(
            rms_norm_q8(dx.as<float>(), dim, nullptr, dw.as<float>(), a, n, dim, 1e-5f, nullptr));
        EXPECT_OK(rms_norm(dx.as<float>(), dim, nullptr, dw.as<float>(), f16.get(), ActType::kF16,
                           n, dim, 1e-5f, nullptr));
      } else {
        EXPECT_OK(silu_mul_q8(dgu.as<float>(), n, ff, a, nullptr));
        EXPECT_OK(silu_mul(dgu.as<float>(), n, ff, f16.get(), ActType::kF16, nullptr));
      }
      EXPECT_OK(quantize_q8(f16.get(), cols, n, b, nullptr));
      EXPECT_TRUE(q8_bytes(fused, cols, n) == q8_bytes(sep, cols, n))
          << str_format("%s to 8-bit activations, n=%d: the bytes of f16 output + quantize_q8",
                        norm ? "rms_norm" : "silu_mul", n);
    }
  }
  DeviceBuffer tiny = poisoned(gemv_q8_scratch_bytes(64, 1));
  const Q8Act bad = q8_act_view(tiny.get(), 64, 1);
  DeviceBuffer dx = to_device(random_floats(rng, 100)), dw = to_device(random_floats(rng, 100));
  EXPECT_TRUE(
      !rms_norm_q8(dx.as<float>(), 100, nullptr, dw.as<float>(), bad, 1, 100, 1e-5f, nullptr))
      << "rms_norm_q8 refuses a width that is not whole blocks";
}

constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,
                                  DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// The CPU backend's product quantizes the activations as the GPU's does for the
// 32-element types (llama.cpp's Q8_0 rule): the two agree to rounding. For the K types it
// takes llama.cpp's Q8_K (one f32 scale per 256), the GPU Q8Act's fp16 scale per 32:
// both within the 8-bit activations' own error of the exact product.
double cpu_bound(DType t) {
  return dtype_info(t).block_elems > 32 ? 1e-4 : 1e-8;
}

TEST_F(CudaOps, embed_rows_match_cpu_dequantization) {
  std::mt19937 rng(3);
  for (DType type : kWeightTypes) {
    const int64_t rows = 50, cols = 256;
    TestMatrix tm = make_matrix(rng, type, rows, cols);
    const std::vector<int32_t> tokens = {3, 49, 0, 3, 17};
    DeviceBuffer dt = to_device(tokens);
    DeviceBuffer out = poisoned(tokens.size() * cols * 4);
    EXPECT_OK(embed_rows(tm.m, dt.as<int32_t>(), static_cast<int>(tokens.size()), out.as<float>(),
                         nullptr));
    const auto got = to_host<float>(out, tokens.size() * cols);
    std::vector<float> ref;
    for (int32_t t : tokens)
      ref.insert(ref.end(), tm.deq.begin() + t * cols, tm.deq.begin() + (t + 1) * cols);
    EXPECT_NMSE(str_format("embed_rows %s", std::string(dtype_name(type)).c_str()), got.data(),
                ref.data(), ref.size(), 1e-12);
  }
}

// y = W x (+ y0) in double over the dequantized weights and the activations as the GPU
// sees them (rounded to the activation type).
std::vector<double> matmul_ref(const TestMatrix& tm, const std::vector<float>& x, int n,
                               const std::vector<float>* y0) {
  const int64_t rows = tm.m.rows, cols = tm.m.cols;
  std::vector<double> y(static_cast<size_t>(n * rows));
  for (int t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = y0 ? (*y0)[static_cast<size_t>(t * rows + r)] : 0.0;
      for (int64_t c = 0; c < cols; ++c)
        s += static_cast<double>(tm.deq[static_cast<size_t>(r * cols + c)]) *
             x[static_cast<size_t>(t * cols + c)];
      y[static_cast<size_t>(t * rows + r)] = s;
    }
  return y;
}

TEST_F(CudaOps, weight_products_match_reference) {
  std::mt19937 rng(4);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  for (DType type : kWeightTypes) {
    for (int64_t cols : {256, 1024}) {
      if (type == DType::kF32 && cols == 1024) continue;
      const int64_t rows = 300;
      TestMatrix tm = make_matrix(rng, type, rows, cols);
      const ActType at = act_type_for(type);
      for (int n : {1, 3, 8, 17, 64}) {
        for (bool acc : {false, true}) {
          const auto x_raw = encode_act(random_floats(rng, static_cast<size_t>(n * cols)), at);
          const auto x = decode_act(x_raw, at);
          const auto y0 = random_floats(rng, static_cast<size_t>(n * rows));
          DeviceBuffer dx = to_device(x_raw);
          DeviceBuffer dy = acc ? to_device(y0) : poisoned(static_cast<size_t>(n * rows) * 4);
          EXPECT_OK((*gemm)->matmul(tm.m, dx.get(), cols, n, dy.as<float>(), rows, acc, nullptr));
          const auto got = to_host<float>(dy, static_cast<size_t>(n * rows));
          const auto ref = matmul_ref(tm, x, n, acc ? &y0 : nullptr);
          // f32 accumulation over up to 1024 products; cuBLASLt's f32 path may use
          // split-K, the GEMV a different order: both far inside 1e-9. Quantized weights
          // reach cuBLASLt dequantized to fp16 (rounded: ~1e-7).
          const bool quant = type != DType::kF32 && type != DType::kF16 && type != DType::kBF16;
          // Quantized weights with a few tokens: 8-bit activations (~1e-5 from exact),
          // checked tightly against the CPU's product below.
          const double bound = quant ? (n > kGemvMaxTokens ? 1e-6 : 1e-4) : 1e-9;
          EXPECT_NMSE(
              str_format("matmul %s %lldx%lld n=%d%s (%s)", std::string(dtype_name(type)).c_str(),
                         static_cast<long long>(rows), static_cast<long long>(cols), n,
                         acc ? " accumulate" : "", n <= kGemvMaxTokens ? "gemv" : "cublasLt"),
              got.data(), ref.data(), ref.size(), bound);
          if (quant && n <= kGemvMaxTokens) {
            // The CPU backend quantizes activations by the same rule (llama.cpp's).
            std::vector<float> cpu_y(static_cast<size_t>(n * rows));
            if (acc) cpu_y = y0;
            std::vector<float> tmp(static_cast<size_t>(n * rows));
            auto wm = cpu::WeightMatrix::from_gguf(type, tm.gguf.data(), rows, cols);
            if (!wm) FAIL() << wm.status().message();
            ThreadPool pool(2);
            cpu::MatmulScratch scratch;
            cpu::matmul(*wm, x.data(), n, cols, tmp.data(), rows, pool, scratch);
            for (size_t i = 0; i < tmp.size(); ++i) cpu_y[i] = acc ? cpu_y[i] + tmp[i] : tmp[i];
            EXPECT_NMSE(
                str_format("matmul %s %lldx%lld n=%d%s vs CPU matmul",
                           std::string(dtype_name(type)).c_str(), static_cast<long long>(rows),
                           static_cast<long long>(cols), n, acc ? " accumulate" : ""),
                got.data(), cpu_y.data(), cpu_y.size(), cpu_bound(type));
          }
        }
      }
    }
  }
}

// Rows long enough that a lane of the quantized matrix-vector kernel takes more than one
// group of weight blocks, the last one partial, with 4 warps per row (few rows) and 1
// (16,384 rows or more): against the CPU backend's product, which quantizes the
// activations by the same rule.
TEST_F(CudaOps, quantized_gemv_long_rows_match_cpu) {
  std::mt19937 rng(22);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  ThreadPool pool(4);
  const std::pair<int64_t, int64_t> shapes[] = {{64, 18432}, {16392, 5120}};
  for (DType type :
       {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (const auto& [rows, cols] : shapes) {
      TestMatrix tm = make_matrix(rng, type, rows, cols);
      auto wm = cpu::WeightMatrix::from_gguf(type, tm.gguf.data(), rows, cols);
      if (!wm) FAIL() << wm.status().message();
      for (int n : {1, 3}) {
        const auto x_raw =
            encode_act(random_floats(rng, static_cast<size_t>(n * cols)), ActType::kF16);
        const auto x = decode_act(x_raw, ActType::kF16);
        DeviceBuffer dx = to_device(x_raw);
        std::vector<float> ref(static_cast<size_t>(n * rows));
        cpu::MatmulScratch scratch;
        cpu::matmul(*wm, x.data(), n, cols, ref.data(), rows, pool, scratch);
        // Both group sizes: 2 blocks a lane (the default) and 4 (PAGODA_CUDA_Q8_UNROLL=4).
        for (int unroll : {2, 4}) {
          set_gemv_q8_unroll_override(unroll);
          for (int split : {0, 1, 2, 4}) {  // 0: the size heuristic
            set_gemv_q8_split_override(split);
            DeviceBuffer dy = poisoned(static_cast<size_t>(n * rows) * 4);
            EXPECT_OK(
                (*gemm)->matmul(tm.m, dx.get(), cols, n, dy.as<float>(), rows, false, nullptr));
            const auto got = to_host<float>(dy, static_cast<size_t>(n * rows));
            EXPECT_NMSE(
                str_format("gemv %s %lldx%lld n=%d split %d, %d blocks a group vs CPU "
                           "matmul",
                           std::string(dtype_name(type)).c_str(), static_cast<long long>(rows),
                           static_cast<long long>(cols), n, split, unroll),
                got.data(), ref.data(), ref.size(), cpu_bound(type));
          }
        }
        set_gemv_q8_split_override(0);
        set_gemv_q8_unroll_override(0);
      }
    }
  }
}

// FP8 weights (--quantization fp8): the device's per-tensor quantization against CUDA's
// host conversion (same scale, same bytes), then the products: the GEMV over the FP8
// weights and the activations as given; cuBLASLt over FP8 weights and FP8 activations
// with their own per-tensor scale, both against a double reference built from the host's
// bytes, and against the unquantized product (loosely: FP8 rounds each operand by up to
// 1/16).
TEST_F(CudaOps, fp8_weight_products_match_reference) {
  std::mt19937 rng(14);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  for (DType type : {DType::kBF16, DType::kF16, DType::kF32}) {
    // Rows and columns multiples of 16, as the loader quantizes only such matrices;
    // token counts that are not (17) are padded by the product.
    const int64_t rows = 320, cols = type == DType::kF32 ? 256 : 1024;
    TestMatrix tm = make_matrix(rng, type, rows, cols);
    const ActType at = act_type_for(type);
    const size_t n_w = static_cast<size_t>(rows * cols);
    DeviceBuffer q = poisoned(n_w);
    // The scale, then the max |w| 16 bytes on, as the loader keeps them.
    DeviceBuffer meta = to_device(std::vector<uint32_t>(8, 0));
    EXPECT_OK(fp8_amax(tm.m.data, at, rows, cols, cols, meta.as<uint32_t>() + 4, nullptr));
    EXPECT_OK(fp8_quantize(tm.m.data, at, rows, cols, cols, meta.as<uint32_t>() + 4,
                           q.as<uint8_t>(), reinterpret_cast<float*>(meta.as<uint32_t>()),
                           nullptr));
    const auto bytes = to_host<uint8_t>(q, n_w);
    const auto m = to_host<uint32_t>(meta, 1);
    float w_amax = 0;
    for (float v : tm.deq) w_amax = std::max(w_amax, std::fabs(v));
    const float w_scale = w_amax / kFp8Max;
    float got_scale;
    std::memcpy(&got_scale, &m[0], 4);
    const std::string name = std::string(dtype_name(type));
    int differ = 0;
    std::vector<float> wq(n_w);
    for (size_t i = 0; i < n_w; ++i) {
      differ += bytes[i] != to_fp8(tm.deq[i] / w_scale);
      wq[i] = from_fp8(bytes[i]) * w_scale;
    }
    EXPECT_TRUE(got_scale == w_scale) << str_format("fp8 weight scale %s: device %.9g, host %.9g",
                                                    name.c_str(), got_scale, w_scale);
    EXPECT_TRUE(differ == 0) << str_format(
        "fp8 weight bytes %s: %d of %zu differ from cuda_fp8.h's", name.c_str(), differ, n_w);
    DeviceMatrix fm = tm.m;
    fm.data = q.get();
    fm.fp8 = true;
    fm.fp8_scale = w_scale;
    fm.fp8_scale_dev = reinterpret_cast<const float*>(meta.as<uint32_t>());
    // 17, 9 and 33: not multiples of 16, run as given and split with a padded tail.
    for (const auto& [n, pad] : std::vector<std::pair<int, bool>>{{1, false},
                                                                  {3, false},
                                                                  {8, false},
                                                                  {17, false},
                                                                  {17, true},
                                                                  {64, false},
                                                                  {9, false},
                                                                  {9, true},
                                                                  {33, true}}) {
      (*gemm)->set_fp8_always_pad(pad);
      const bool acc = n == 9 || n == 33;  // accumulating into y
      const auto x_raw = encode_act(random_floats(rng, static_cast<size_t>(n * cols)), at);
      const auto x = decode_act(x_raw, at);
      const auto y0 = random_floats(rng, static_cast<size_t>(n * rows));
      DeviceBuffer dx = to_device(x_raw);
      DeviceBuffer dy = acc ? to_device(y0) : poisoned(static_cast<size_t>(n * rows) * 4);
      EXPECT_OK((*gemm)->matmul(fm, dx.get(), cols, n, dy.as<float>(), rows, acc, nullptr));
      const auto got = to_host<float>(dy, static_cast<size_t>(n * rows));
      // Activations as the product sees them: as given (GEMV) or FP8 with their own scale.
      std::vector<float> xq = x;
      if (n > kGemvMaxTokens) {
        float x_amax = 0;
        for (float v : x) x_amax = std::max(x_amax, std::fabs(v));
        const float x_scale = x_amax / kFp8Max;
        for (float& v : xq) v = from_fp8(to_fp8(v / x_scale)) * x_scale;
      }
      std::vector<double> ref(static_cast<size_t>(n * rows)), exact(ref.size());
      for (int t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          const double base = acc ? y0[static_cast<size_t>(t * rows + r)] : 0.0;
          double s = base, e = base;
          for (int64_t c = 0; c < cols; ++c) {
            const size_t wi = static_cast<size_t>(r * cols + c),
                         xi = static_cast<size_t>(t * cols + c);
            s += static_cast<double>(wq[wi]) * xq[xi];
            e += static_cast<double>(tm.deq[wi]) * x[xi];
          }
          ref[static_cast<size_t>(t * rows + r)] = s;
          exact[static_cast<size_t>(t * rows + r)] = e;
        }
      const std::string what =
          str_format("fp8 matmul %s %lldx%lld n=%d (%s)", name.c_str(),
                     static_cast<long long>(rows), static_cast<long long>(cols), n,
                     n <= kGemvMaxTokens ? "gemv"
                     : pad               ? "cublasLt fp8, padded tail"
                                         : "cublasLt fp8");
      // The GEMV accumulates in f32 (4e-15 against the double reference on the H200).
      // FP8 tensor-core products keep fewer bits while they accumulate: 1.4e-8 to 1.8e-8
      // with cuBLASLt's f32 promotion, 4e-8 to 3.3e-7 with fast accumulation (H200).
      const double bound = n <= kGemvMaxTokens ? 1e-8 : (*gemm)->fp8_fast_accum() ? 2e-6 : 1e-7;
      EXPECT_NMSE(what, got.data(), ref.data(), ref.size(), bound);
      EXPECT_NMSE(what + " vs unquantized", got.data(), exact.data(), exact.size(), 5e-3);
      if (n > kGemvMaxTokens && !acc) {
        // The max taken by the activations' producer (here fp8_amax itself): the same
        // product; and every product leaves the max at 0 for the next one.
        auto slot = (*gemm)->fp8_amax_slot();
        if (!slot) FAIL() << slot.status().message();
        uint32_t before = 1;
        cudaMemcpy(&before, *slot, 4, cudaMemcpyDeviceToHost);
        EXPECT_TRUE(before == 0) << what + ": the activation max is 0 after the product";
        EXPECT_OK(fp8_amax(dx.get(), at, n, cols, cols, *slot, nullptr));
        DeviceBuffer dy2 = poisoned(static_cast<size_t>(n * rows) * 4);
        EXPECT_OK((*gemm)->matmul_fp8_scanned(fm, dx.get(), cols, n, dy2.as<float>(), rows, false,
                                              nullptr));
        const auto got2 = to_host<float>(dy2, static_cast<size_t>(n * rows));
        EXPECT_TRUE(std::memcmp(got2.data(), got.data(), got.size() * 4) == 0)
            << what + ": with the max taken beforehand, the same bytes";
      }
    }
  }
}

// rms_norm's max |output| for the FP8 product after it: the max of the values as stored.
TEST_F(CudaOps, rms_norm_takes_the_fp8_activation_max) {
  std::mt19937 rng(23);
  for (int n : {9, 70}) {
    const int dim = 4096;
    const auto x = random_floats(rng, static_cast<size_t>(n) * dim, 3.0f);
    const auto w = random_floats(rng, static_cast<size_t>(dim));
    DeviceBuffer dx = to_device(x), dw = to_device(w);
    for (ActType t : kActs) {
      DeviceBuffer out = poisoned(static_cast<size_t>(n) * dim * act_bytes(t));
      DeviceBuffer amax = to_device(std::vector<uint32_t>(1, 0));
      EXPECT_OK(rms_norm(dx.as<float>(), dim, nullptr, dw.as<float>(), out.get(), t, n, dim, 1e-5f,
                         nullptr, amax.as<uint32_t>()));
      const auto got = decode_act(to_host<uint8_t>(out, out.bytes()), t);
      float want = 0;
      for (float v : got) want = std::max(want, std::fabs(v));
      const uint32_t bits = to_host<uint32_t>(amax, 1)[0];
      float have;
      std::memcpy(&have, &bits, 4);
      EXPECT_TRUE(have == want) << str_format(
          "rms_norm %s n=%d: max |out| %.9g, taken on the way %.9g", act_name(t), n, want, have);
    }
  }
}

TEST_F(CudaOps, weight_product_odd_width_uses_scalar_path) {
  // stories260K-like widths (172 is not a multiple of 8): the unaligned fallback.
  std::mt19937 rng(5);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  for (DType type : {DType::kF32, DType::kF16}) {
    TestMatrix tm = make_matrix(rng, type, 64, 172);
    const ActType at = act_type_for(type);
    const int n = 2;
    const auto x_raw = encode_act(random_floats(rng, static_cast<size_t>(n * 172)), at);
    const auto x = decode_act(x_raw, at);
    DeviceBuffer dx = to_device(x_raw), dy = poisoned(static_cast<size_t>(n * 64) * 4);
    EXPECT_OK((*gemm)->matmul(tm.m, dx.get(), 172, n, dy.as<float>(), 64, false, nullptr));
    const auto got = to_host<float>(dy, static_cast<size_t>(n * 64));
    const auto ref = matmul_ref(tm, x, n, nullptr);
    EXPECT_NMSE(str_format("matmul %s 64x172 n=2", std::string(dtype_name(type)).c_str()),
                got.data(), ref.data(), ref.size(), 1e-9);
  }
}

}  // namespace
}  // namespace pagoda::cuda::testing
