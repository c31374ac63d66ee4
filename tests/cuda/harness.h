// Helpers of the CUDA tests (GoogleTest, like the CPU tests): the fixture that skips on a
// machine without a GPU, device copies, random data, activation encodings, test weight
// matrices, and the normalised-error check.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/device.h"
#include "core/status.h"

namespace pagoda::cuda::testing {

// Base of every CUDA test: skips when there is no device (CI compiles these tests on
// machines without a GPU), and after the test fails on a CUDA error left behind.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
};
// Whether a device is there (device_count() > 0), asked once.
bool have_device();

// Normalised error: sum((a - ref)^2) / sum(ref^2) <= bound, NaN fails. Passing, it
// prints the measured error and the bound (one line a check, as the logs keep them);
// failing, the message says both.
::testing::AssertionResult nmse_within(const std::string& what, const float* a, const double* ref,
                                       size_t n, double bound);
::testing::AssertionResult nmse_within(const std::string& what, const float* a, const float* ref,
                                       size_t n, double bound);
#define EXPECT_NMSE(what, a, ref, n, bound) \
  EXPECT_TRUE(::pagoda::cuda::testing::nmse_within(what, a, ref, n, bound))
#define EXPECT_OK(expr)                                       \
  do {                                                        \
    ::pagoda::Status s_ = (expr);                             \
    EXPECT_TRUE(s_.is_ok()) << #expr << ": " << s_.message(); \
  } while (0)

std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale = 1.0f);

// Device memory holding a copy of `v`, or poisoned with NaN (fill_nan).
DeviceBuffer to_device(const void* p, size_t bytes);
template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  return to_device(v.data(), v.size() * sizeof(T));
}
DeviceBuffer poisoned(size_t bytes);
template <typename T>
std::vector<T> to_host(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  cudaDeviceSynchronize();
  if (cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
    ADD_FAILURE() << "copy to host";
  return v;
}

// Device activations as the host sees them: f32 values to/from `t` (rounded on the way in).
std::vector<uint8_t> encode_act(const std::vector<float>& v, ActType t);
std::vector<float> decode_act(const std::vector<uint8_t>& raw, ActType t);
// FP8 E4M3 through CUDA's host conversion (cuda_fp8.h: round to nearest even, saturated).
uint8_t to_fp8(float x);
float from_fp8(uint8_t b);
const char* act_name(ActType t);

// A random weight matrix (values of std 1) in GGUF layout and on the device.
struct TestMatrix {
  std::vector<uint8_t> gguf;
  std::vector<float> deq;  // the CPU's dequantization of every row
  DeviceBuffer buf;
  DeviceMatrix m;
};
TestMatrix make_matrix(std::mt19937& rng, DType type, int64_t rows, int64_t cols);

// Median time of `fn` in ms over `reps` runs after two warm-ups.
template <typename F>
double time_ms(int reps, F&& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 2; ++i) fn(i);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    fn(i);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace pagoda::cuda::testing
