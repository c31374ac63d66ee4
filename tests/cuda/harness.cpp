#include "harness.h"

#include <cuda_fp8.h>

#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"

namespace pagoda::cuda::testing {
void CudaTest::SetUp() {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: the CUDA tests need a GPU";
}

void CudaTest::TearDown() {
  if (!have_device()) return;
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << "CUDA error after the test: " << cudaGetErrorString(e);
}

bool have_device() {
  static const bool yes = device_count() > 0;
  return yes;
}

::testing::AssertionResult nmse_within(const std::string& what, const float* a, const double* ref,
                                       size_t n, double bound) {
  double num = 0, den = 0;
  size_t nan_at = n;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) && nan_at == n) nan_at = i;
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  const double e = den > 0 ? num / den : num;
  if (nan_at < n)
    return ::testing::AssertionFailure() << what << ": element " << nan_at << " of " << n << " is "
                                         << a[nan_at] << " (unwritten or overflow)";
  if (!(e <= bound))
    return ::testing::AssertionFailure()
           << str_format("%s: nmse %.3g > bound %.3g", what.c_str(), e, bound);
  std::printf("  ok   %-60s nmse %.3g (bound %.0e)\n", what.c_str(), e, bound);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult nmse_within(const std::string& what, const float* a, const float* ref,
                                       size_t n, double bound) {
  std::vector<double> r(ref, ref + n);
  return nmse_within(what, a, r.data(), n, bound);
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

DeviceBuffer to_device(const void* p, size_t bytes) {
  auto b = DeviceBuffer::alloc(bytes);
  if (!b) {
    ADD_FAILURE() << "device allocation: " << b.status().message();
    return {};
  }
  if (cudaMemcpy(b->get(), p, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    ADD_FAILURE() << "copy to device";
  return std::move(b).value();
}

DeviceBuffer poisoned(size_t bytes) {
  auto b = DeviceBuffer::alloc(bytes);
  if (!b) {
    ADD_FAILURE() << "device allocation: " << b.status().message();
    return {};
  }
  if (!fill_nan(b->get(), bytes, nullptr)) ADD_FAILURE() << "fill_nan";
  return std::move(b).value();
}

std::vector<uint8_t> encode_act(const std::vector<float>& v, ActType t) {
  std::vector<uint8_t> raw(v.size() * act_bytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == ActType::kF32) {
      std::memcpy(raw.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == ActType::kF16 ? f32_to_fp16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
  }
  return raw;
}

std::vector<float> decode_act(const std::vector<uint8_t>& raw, ActType t) {
  const size_t n = raw.size() / act_bytes(t);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == ActType::kF32) {
      std::memcpy(&v[i], raw.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      v[i] = t == ActType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return v;
}

const char* act_name(ActType t) {
  return t == ActType::kF32 ? "f32" : t == ActType::kF16 ? "f16" : "bf16";
}

uint8_t to_fp8(float x) {
  return __nv_fp8_e4m3(x).__x;
}
float from_fp8(uint8_t b) {
  __nv_fp8_e4m3 f;
  f.__x = b;
  return static_cast<float>(f);
}

TestMatrix make_matrix(std::mt19937& rng, DType type, int64_t rows, int64_t cols) {
  TestMatrix tm;
  const size_t rb = row_bytes(type, cols);
  tm.gguf.resize(rb * static_cast<size_t>(rows));
  tm.deq.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto v = random_floats(rng, static_cast<size_t>(cols));
    if (!cpu::quantize_row(type, v.data(), tm.gguf.data() + rb * r, cols))
      ADD_FAILURE() << "quantize_row";
    if (!cpu::dequantize_row(type, tm.gguf.data() + rb * r, tm.deq.data() + r * cols, cols))
      ADD_FAILURE() << "dequantize_row";
  }
  tm.m.type = type;
  tm.m.rows = rows;
  tm.m.cols = cols;
  auto b = DeviceBuffer::alloc(device_matrix_bytes(type, rows, cols));
  if (!b) {
    ADD_FAILURE() << b.status().message();
    return tm;
  }
  tm.buf = std::move(b).value();
  assign_matrix_storage(&tm.m, tm.buf.get());
  DeviceBuffer raw = to_device(tm.gguf);
  EXPECT_OK(repack_rows(raw.get(), 0, rows, tm.m, nullptr));
  cudaDeviceSynchronize();
  return tm;
}

}  // namespace pagoda::cuda::testing
