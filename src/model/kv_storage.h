// The memory that holds K and V for every layer, as fixed-size blocks shared by all
// sequences. Which blocks a sequence owns is decided above this layer (the block
// manager); the model only reads and writes through block tables.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/attention.h"
#include "model/model_config.h"

namespace pagoda {

class KvStorage {
 public:
  KvStorage(const ModelConfig& config, int n_blocks, int block_size);

  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  // Bytes per token across all layers (K and V, fp16).
  static size_t bytes_per_token(const ModelConfig& config);
  size_t bytes() const { return k_.size() * 2 * sizeof(uint16_t); }
  cpu::KvLayer layer(int l);
  // Copies block src's K and V to block dst in every layer (copy-on-write).
  void copy_block(int src, int dst);

 private:
  int n_blocks_;
  int block_size_;
  int n_kv_heads_;
  int head_dim_;
  size_t layer_elems_;
  std::vector<uint16_t> k_, v_;
};

}  // namespace pagoda
