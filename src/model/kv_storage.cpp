#include "model/kv_storage.h"

#include <algorithm>
#include <cassert>

namespace pagoda {

KvStorage::KvStorage(const ModelConfig& c, int n_blocks, int block_size, bool q8)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim),
      layer_elems_(static_cast<size_t>(n_blocks) * block_size * c.n_kv_heads * c.head_dim),
      n_layers_(c.n_layers),
      q8_(q8) {
  assert(block_size % cpu::kKvBlockQuantum == 0);
  assert(!q8 || supports_q8(c));
  const size_t n = layer_elems_ * static_cast<size_t>(c.n_layers);
  if (q8) {
    k8_.resize(n);
    v8_.resize(n);
    k_scale_.resize(n / 32);
    v_scale_.resize(n / 32);
  } else {
    k_.resize(n);
    v_.resize(n);
  }
}

Status KvStorage::supports_q8(const ModelConfig& c) {
  if (c.head_dim % 32 != 0)
    return unsupported(
        str_format("an 8-bit KV cache needs a head size that is a multiple of 32 "
                   "(this model's is %d)",
                   c.head_dim));
  return Status::ok();
}

size_t KvStorage::bytes_per_token(const ModelConfig& c, bool q8) {
  const size_t values = static_cast<size_t>(c.n_layers) * 2 * c.n_kv_heads * c.head_dim;
  return q8 ? values / 32 * 34 : values * sizeof(uint16_t);
}

namespace {
// Copies block src to dst in each of `layers` layers of `layer` elements, `block` a block.
template <typename T>
void copy_blocks(std::vector<T>& a, size_t layers, size_t layer, size_t block, int src, int dst) {
  for (size_t l = 0; l < layers; ++l) {
    const size_t base = l * layer;
    std::copy_n(a.begin() + static_cast<std::ptrdiff_t>(base + src * block), block,
                a.begin() + static_cast<std::ptrdiff_t>(base + dst * block));
  }
}
}  // namespace

void KvStorage::copy_block(int src, int dst) {
  const size_t block = static_cast<size_t>(block_size_) * n_kv_heads_ * head_dim_;
  const size_t layers = static_cast<size_t>(n_layers_);
  if (q8_) {
    copy_blocks(k8_, layers, layer_elems_, block, src, dst);
    copy_blocks(v8_, layers, layer_elems_, block, src, dst);
    copy_blocks(k_scale_, layers, layer_elems_ / 32, block / 32, src, dst);
    copy_blocks(v_scale_, layers, layer_elems_ / 32, block / 32, src, dst);
    return;
  }
  copy_blocks(k_, layers, layer_elems_, block, src, dst);
  copy_blocks(v_, layers, layer_elems_, block, src, dst);
}

cpu::KvLayer KvStorage::layer(int l) {
  cpu::KvLayer kv;
  const size_t at = layer_elems_ * static_cast<size_t>(l);
  if (q8_) {
    kv.k8 = k8_.data() + at;
    kv.v8 = v8_.data() + at;
    kv.k_scale = k_scale_.data() + at / 32;
    kv.v_scale = v_scale_.data() + at / 32;
  } else {
    kv.k = k_.data() + at;
    kv.v = v_.data() + at;
  }
  kv.block_size = block_size_;
  kv.n_kv_heads = n_kv_heads_;
  kv.head_dim = head_dim_;
  return kv;
}

}  // namespace pagoda
