#include "model/kv_storage.h"

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
