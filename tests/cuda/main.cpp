// main() of pagoda_cuda_tests (GoogleTest): names the device, or says that every test
// will skip for want of one; the timing suites (PerfCuda, PerfOps) run only when the
// filter names them (--gtest_filter='Perf*').
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "../op_table/test_main.h"
#include "backend/cuda/device.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  pagoda::optest::exclude_perf_unless_named();
  if (pagoda::cuda::device_count() == 0) {
    std::printf("no CUDA device: every CUDA test skips\n");
  } else {
    cudaSetDevice(0);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount);
  }
  return RUN_ALL_TESTS();
}
