#include "model/kv_storage.h"

#include <algorithm>
#include <cassert>

namespace pagoda {

KvStorage::KvStorage(const ModelConfig& c, int n_blocks, int block_size)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim),
      layer_elems_(static_cast<size_t>(n_blocks) * block_size * c.n_kv_heads * c.head_dim),
      k_(layer_elems_ * c.n_layers),
      v_(layer_elems_ * c.n_layers) {
  assert(block_size % cpu::kKvBlockQuantum == 0);
}

size_t KvStorage::bytes_per_token(const ModelConfig& c) {
  return static_cast<size_t>(c.n_layers) * 2 * c.n_kv_heads * c.head_dim * sizeof(uint16_t);
}

void KvStorage::copy_block(int src, int dst) {
  const size_t block = static_cast<size_t>(block_size_) * n_kv_heads_ * head_dim_;
  const size_t layers = layer_elems_ ? k_.size() / layer_elems_ : 0;
  for (size_t l = 0; l < layers; ++l) {
    const size_t base = l * layer_elems_;
    std::copy_n(k_.begin() + base + src * block, block, k_.begin() + base + dst * block);
    std::copy_n(v_.begin() + base + src * block, block, v_.begin() + base + dst * block);
  }
}

cpu::KvLayer KvStorage::layer(int l) {
  cpu::KvLayer kv;
  kv.k = k_.data() + layer_elems_ * l;
  kv.v = v_.data() + layer_elems_ * l;
  kv.block_size = block_size_;
  kv.n_kv_heads = n_kv_heads_;
  kv.head_dim = head_dim_;
  return kv;
}

}  // namespace pagoda
