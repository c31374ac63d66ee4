#include "backend/cuda/device.h"

#include "backend/cuda/check.h"

namespace pagoda::cuda {

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::alloc(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMalloc(&b.p_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Status(StatusCode::kResourceExhausted,
                  str_format("cannot allocate %.1f MiB on the GPU (%.1f MiB free): %s",
                             bytes / 1048576.0, free_b / 1048576.0, cudaGetErrorString(e)));
  }
  b.bytes_ = bytes;
  return b;
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

Status PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return Status::ok();
  if (p_) cudaFreeHost(p_);
  p_ = nullptr;
  bytes_ = 0;
  PAGODA_CUDA_TRY(cudaMallocHost(&p_, bytes));
  bytes_ = bytes;
  return Status::ok();
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

Result<std::unique_ptr<DeviceContext>> DeviceContext::open(int device) {
  const int n = device_count();
  if (n == 0) return unsupported("no CUDA device is available");
  if (device < 0 || device >= n)
    return invalid_argument(str_format("CUDA device %d does not exist (%d found)", device, n));
  std::unique_ptr<DeviceContext> d(new DeviceContext());
  d->index_ = device;
  PAGODA_CUDA_TRY(cudaSetDevice(device));
  PAGODA_CUDA_TRY(cudaGetDeviceProperties(&d->props_, device));
  PAGODA_CUDA_TRY(cudaStreamCreateWithFlags(&d->stream_, cudaStreamNonBlocking));
  PAGODA_ASSIGN_OR_RETURN(d->gemm_, Gemm::create());
  return d;
}

DeviceContext::~DeviceContext() {
  gemm_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

std::string DeviceContext::describe() const {
  return str_format("%s (sm_%d%d, %d SMs, %.1f GiB)", props_.name, props_.major, props_.minor,
                    props_.multiProcessorCount, props_.totalGlobalMem / 1073741824.0);
}

Status DeviceContext::sync() const {
  return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace pagoda::cuda
