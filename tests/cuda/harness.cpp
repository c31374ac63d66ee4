#include "harness.h"

#include <cuda_fp8.h>

#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"

namespace pagoda::cuda::testing {
namespace {
int g_failures = 0;
int g_checks = 0;
}  // namespace

std::vector<Test>& registry() {
  static std::vector<Test> tests;
  return tests;
}

void fail(const std::string& what) {
  ++g_failures;
  std::printf("  FAIL %s\n", what.c_str());
}

void expect_nmse(const std::string& what, const float* a, const double* ref, size_t n,
                 double bound) {
  double num = 0, den = 0;
  size_t nan_at = n;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) && nan_at == n) nan_at = i;
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  const double e = den > 0 ? num / den : num;
  ++g_checks;
  if (nan_at < n) {
    fail(str_format("%s: element %zu of %zu is %g (unwritten or overflow)", what.c_str(), nan_at, n,
                    a[nan_at]));
  } else if (!(e <= bound)) {
    fail(str_format("%s: nmse %.3g > bound %.3g", what.c_str(), e, bound));
  } else {
    std::printf("  ok   %-60s nmse %.3g (bound %.0e)\n", what.c_str(), e, bound);
  }
}

void expect_nmse(const std::string& what, const float* a, const float* ref, size_t n,
                 double bound) {
  std::vector<double> r(ref, ref + n);
  expect_nmse(what, a, r.data(), n, bound);
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
    fail("device allocation: " + b.status().message());
    return {};
  }
  if (cudaMemcpy(b->get(), p, bytes, cudaMemcpyHostToDevice) != cudaSuccess) fail("copy to device");
  return std::move(b).value();
}

DeviceBuffer poisoned(size_t bytes) {
  auto b = DeviceBuffer::alloc(bytes);
  if (!b) {
    fail("device allocation: " + b.status().message());
    return {};
  }
  if (!fill_nan(b->get(), bytes, nullptr)) fail("fill_nan");
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

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (ok)
    std::printf("  ok   %s\n", what.c_str());
  else
    fail(what);
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
    if (!cpu::quantize_row(type, v.data(), tm.gguf.data() + rb * r, cols)) fail("quantize_row");
    if (!cpu::dequantize_row(type, tm.gguf.data() + rb * r, tm.deq.data() + r * cols, cols))
      fail("dequantize_row");
  }
  tm.m.type = type;
  tm.m.rows = rows;
  tm.m.cols = cols;
  auto b = DeviceBuffer::alloc(device_matrix_bytes(type, rows, cols));
  if (!b) {
    fail(b.status().message());
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

int main(int argc, char** argv) {
  using namespace pagoda::cuda::testing;
  const int n_dev = pagoda::cuda::device_count();
  if (n_dev == 0) {
    std::printf("no CUDA device: skipping the CUDA tests\n");
    return 0;
  }
  cudaSetDevice(0);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  // argv[1]: comma-separated name fragments; a test runs when its name contains one.
  std::vector<std::string> filters;
  for (std::string f = argc > 1 ? argv[1] : "";;) {
    const size_t comma = f.find(',');
    filters.push_back(f.substr(0, comma));
    if (comma == std::string::npos) break;
    f = f.substr(comma + 1);
  }
  auto selected = [&](const char* name, bool perf) {
    for (const std::string& f : filters)
      if (std::strstr(name, f.c_str()) && (!perf || f.find("perf") != std::string::npos))
        return true;
    return false;
  };
  int run = 0, failed_tests = 0;
  for (const Test& t : registry()) {
    // Timings run only when asked for by name ("perf").
    if (!selected(t.name, std::strncmp(t.name, "perf_", 5) == 0)) continue;
    std::printf("[ %s ]\n", t.name);
    const int before = g_failures;
    t.fn();
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fail(std::string("CUDA error after the test: ") + cudaGetErrorString(e));
    ++run;
    if (g_failures != before) ++failed_tests;
  }
  std::printf("\n%d tests, %d checks, %d failed checks, %d failed tests\n", run, g_checks,
              g_failures, failed_tests);
  return g_failures == 0 ? 0 : 1;
}
