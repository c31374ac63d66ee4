#include <utility>

#include "backend/cpu/matmul.h"
#include "backend/cpu/packed_weights.h"

namespace pagoda::cpu {

bool is_supported_weight_type(DType t) {
  return packed_format(t) != nullptr;
}

WeightMatrix::WeightMatrix() = default;
WeightMatrix::~WeightMatrix() = default;
WeightMatrix::WeightMatrix(WeightMatrix&&) noexcept = default;
WeightMatrix& WeightMatrix::operator=(WeightMatrix&&) noexcept = default;

Result<WeightMatrix> WeightMatrix::from_gguf(DType type, const void* data, int64_t rows,
                                             int64_t cols) {
  WeightMatrix w;
  w.impl_ = std::make_unique<Impl>();
  PAGODA_RETURN_IF_ERROR(pack_weights(type, data, rows, cols, w.impl_.get()));
  return w;
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
  return impl_->bytes;
}
void WeightMatrix::dequantize_row(int64_t r, float* dst) const {
  unpack_row(*impl_, r, dst);
}

}  // namespace pagoda::cpu
