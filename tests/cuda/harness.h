// A minimal test runner for the CUDA tests (the GPU machine has no GoogleTest): tests
// register themselves, checks record failures with a message, main() runs them all (or
// those whose name contains argv[1]) and prints one line per check and a summary.
#pragma once

#include <cuda_runtime.h>

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

struct Test {
  const char* name;
  void (*fn)();
};
std::vector<Test>& registry();
struct Registrar {
  Registrar(const char* name, void (*fn)()) { registry().push_back({name, fn}); }
};
#define CUDA_TEST(name)                                                    \
  static void name();                                                      \
  static ::pagoda::cuda::testing::Registrar name##_registrar(#name, name); \
  static void name()

// Records a failed check (the test goes on; main() reports).
void fail(const std::string& what);
// A yes/no check, counted and printed like the others.
void expect(bool ok, const std::string& what);
// Normalised error check: sum((a - ref)^2) / sum(ref^2) <= bound, NaN fails.
void expect_nmse(const std::string& what, const float* a, const double* ref, size_t n,
                 double bound);
void expect_nmse(const std::string& what, const float* a, const float* ref, size_t n, double bound);
#define EXPECT_OK(expr)                                                               \
  do {                                                                                \
    ::pagoda::Status s_ = (expr);                                                     \
    if (!s_) ::pagoda::cuda::testing::fail(std::string(#expr) + ": " + s_.message()); \
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
    fail("copy to host");
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

}  // namespace pagoda::cuda::testing
