#include "model/cuda/uploader.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/check.h"

namespace pagoda {

WeightUploader::~WeightUploader() {
  for (cudaEvent_t e : done_)
    if (e) cudaEventDestroy(e);
}

Status WeightUploader::init() {
  for (int i = 0; i < 2; ++i) {
    PAGODA_RETURN_IF_ERROR(stage_[i].reserve(kChunk));
    PAGODA_CUDA_TRY(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
    PAGODA_CUDA_TRY(cudaEventRecord(done_[i], stream_));
  }
  return Status::ok();
}

Status WeightUploader::copy(const void* src, void* dst, size_t bytes) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t off = 0; off < bytes; off += kChunk) {
    const size_t n = std::min(kChunk, bytes - off);
    const int slot = next_;
    next_ ^= 1;
    // The slot's previous copy must have left it before it is overwritten.
    PAGODA_CUDA_TRY(cudaEventSynchronize(done_[slot]));
    auto* stage = static_cast<uint8_t*>(stage_[slot].get());
    constexpr int64_t kPiece = 1 << 20;
    pool_.parallel_for(static_cast<int64_t>((n + kPiece - 1) / kPiece), 1,
                       [&](int64_t b, int64_t e) {
                         for (int64_t i = b; i < e; ++i) {
                           const size_t o = static_cast<size_t>(i) * kPiece;
                           std::memcpy(stage + o, s + off + o, std::min<size_t>(kPiece, n - o));
                         }
                       });
    PAGODA_CUDA_TRY(cudaMemcpyAsync(d + off, stage, n, cudaMemcpyHostToDevice, stream_));
    PAGODA_CUDA_TRY(cudaEventRecord(done_[slot], stream_));
  }
  return Status::ok();
}

Status WeightUploader::finish() {
  return cuda::cuda_status(cudaStreamSynchronize(stream_), "uploading weights");
}

}  // namespace pagoda
