// One GPU as the model uses it: the device index (a communicator for several GPUs can
// be added beside it later), a stream all work is queued on, the GEMM engine, and owned
// device memory.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "backend/cuda/gemm.h"
#include "core/status.h"

namespace pagoda::cuda {

// cudaMalloc'd memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr, o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static Result<DeviceBuffer> alloc(size_t bytes);
  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (fast, asynchronous copies), freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status reserve(size_t bytes);
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceContext {
 public:
  // Makes `device` current for this thread and creates the stream and GEMM handles.
  static Result<std::unique_ptr<DeviceContext>> open(int device);
  ~DeviceContext();

  int index() const { return index_; }
  cudaStream_t stream() const { return stream_; }
  Gemm& gemm() { return *gemm_; }
  const cudaDeviceProp& props() const { return props_; }
  // "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"
  std::string describe() const;
  // Waits for the stream.
  Status sync() const;

 private:
  DeviceContext() = default;
  int index_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaDeviceProp props_{};
  std::unique_ptr<Gemm> gemm_;
};

// Number of CUDA devices (0 when there is no driver or GPU).
int device_count();

}  // namespace pagoda::cuda
