// TEMPORARY stand-in for the real kernels (branch `kernels`): dequantizes every weight to
// f32 at load. Deleted when the kernels land.
#include <cstring>

#include "backend/cpu/matmul.h"

namespace pagoda::cpu {

struct WeightMatrix::Impl {
  DType type;
  int64_t rows, cols;
  std::vector<float> w;
};

WeightMatrix::WeightMatrix() = default;
WeightMatrix::~WeightMatrix() = default;
WeightMatrix::WeightMatrix(WeightMatrix&&) noexcept = default;
WeightMatrix& WeightMatrix::operator=(WeightMatrix&&) noexcept = default;

bool is_supported_weight_type(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kQ8_0 || t == DType::kQ4_1 ||
         t == DType::kBF16;
}

Status dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  auto h = [](const uint8_t* q) {
    uint16_t v;
    std::memcpy(&v, q, 2);
    return fp16_to_f32(v);
  };
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return Status::ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = h(p + 2 * i);
      return Status::ok();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = bf16_to_f32(v);
      }
      return Status::ok();
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34) {
        const float d = h(p);
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = d * static_cast<int8_t>(p[2 + j]);
      }
      return Status::ok();
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b, p += 20) {
        const float d = h(p), m = h(p + 2);
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = d * (p[4 + j] & 15) + m;
          dst[b * 32 + j + 16] = d * (p[4 + j] >> 4) + m;
        }
      }
      return Status::ok();
    default:
      return unsupported("tmp dequantize");
  }
}

Status quantize_row(DType type, const float* src, void* dst, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return Status::ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v = f32_to_fp16(src[i]);
        std::memcpy(p + 2 * i, &v, 2);
      }
      return Status::ok();
    default:
      return unsupported("tmp quantize");
  }
}

Result<WeightMatrix> WeightMatrix::from_gguf(DType type, const void* data, int64_t rows,
                                             int64_t cols) {
  WeightMatrix m;
  m.impl_ = std::make_unique<Impl>();
  m.impl_->type = type;
  m.impl_->rows = rows;
  m.impl_->cols = cols;
  m.impl_->w.resize(static_cast<size_t>(rows * cols));
  const size_t rb = row_bytes(type, cols);
  for (int64_t r = 0; r < rows; ++r)
    PAGODA_RETURN_IF_ERROR(cpu::dequantize_row(type, static_cast<const uint8_t*>(data) + rb * r,
                                               m.impl_->w.data() + r * cols, cols));
  return m;
}

DType WeightMatrix::type() const {
  return impl_->type;
}
int64_t WeightMatrix::rows() const {
  return impl_->rows;
}
int64_t WeightMatrix::cols() const {
  return impl_->cols;
}
size_t WeightMatrix::bytes() const {
  return row_bytes(impl_->type, impl_->cols) * impl_->rows;
}
void WeightMatrix::dequantize_row(int64_t r, float* dst) const {  // NOLINT
  std::memcpy(dst, impl_->w.data() + r * impl_->cols, impl_->cols * 4);
}

uint8_t* MatmulScratch::get(size_t bytes) {
  if (buf_.size() < bytes) buf_.resize(bytes);
  return buf_.data();
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, MatmulScratch&) {
  const int64_t K = w.cols();
  const float* W = w.impl().w.data();
  pool.parallel_for(w.rows(), 16, [&](int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = r0; r < r1; ++r) {
        float s = 0;
        for (int64_t c = 0; c < K; ++c) s += W[r * K + c] * x[t * x_stride + c];
        y[t * y_stride + r] = s;
      }
  });
}

}  // namespace pagoda::cpu
