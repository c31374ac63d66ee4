#include <utility>

#include "backend/cpu/matmul.h"
#include "backend/cpu/packed_weights.h"

namespace pagoda::cpu {

bool is_supported_weight_type(DType t) {
  return packed_format(t) != nullptr;
}

int64_t packed_weight_bytes(DType type, int64_t elements) {
  const PackedFormat* f = packed_format(type);
  if (f == nullptr) return 0;
  const int64_t group = static_cast<int64_t>(kRowGroup) * f->block_elems;  // weights
  const int64_t blocks = (elements + group - 1) / group;
  return blocks * (f->quant_bytes + f->scale_bytes);
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
