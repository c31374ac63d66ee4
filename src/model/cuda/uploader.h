// Copies weights from the mapped file to the GPU through two pinned staging buffers:
// threads copy one chunk out of the page cache while the previous chunk crosses the bus
// (a plain cudaMemcpy from the map goes one page fault at a time through the driver's
// own small staging buffer).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/device.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace pagoda {

class WeightUploader {
 public:
  WeightUploader(ThreadPool& pool, cudaStream_t stream) : pool_(pool), stream_(stream) {}
  ~WeightUploader();
  Status init();
  // Queues the copy; `src` must stay mapped until finish().
  Status copy(const void* src, void* dst, size_t bytes);
  Status finish();

 private:
  static constexpr size_t kChunk = 64u << 20;
  ThreadPool& pool_;
  cudaStream_t stream_;
  cuda::PinnedBuffer stage_[2];
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int next_ = 0;
};

}  // namespace pagoda
