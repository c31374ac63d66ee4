// The memory that holds K and V for every layer, as fixed-size blocks shared by all
// sequences. Which blocks a sequence owns is decided above this layer (the block
// manager); the model only reads and writes through block tables.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/attention.h"
#include "core/status.h"
#include "model/model_config.h"

namespace pagoda {

class KvStorage {
 public:
  // q8: the 8-bit pool (cpu::KvLayer; llama.cpp's q8_0 cache), which needs a head size
  // that is a multiple of 32 (supports_q8).
  KvStorage(const ModelConfig& config, int n_blocks, int block_size, bool q8 = false);

  static Status supports_q8(const ModelConfig& config);
  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  bool q8() const { return q8_; }
  // Bytes per token across all layers (K and V, fp16; 8-bit: 34 bytes per 32 values).
  static size_t bytes_per_token(const ModelConfig& config, bool q8 = false);
  size_t bytes() const {
    return (k_.size() + v_.size() + k_scale_.size() + v_scale_.size()) * sizeof(uint16_t) +
           k8_.size() + v8_.size();
  }
  cpu::KvLayer layer(int l);
  // Copies block src's K and V to block dst in every layer (copy-on-write).
  void copy_block(int src, int dst);

 private:
  int n_blocks_;
  int block_size_;
  int n_kv_heads_;
  int head_dim_;
  size_t layer_elems_;
  int n_layers_;
  bool q8_;
  std::vector<uint16_t> k_, v_;              // 16-bit pool
  std::vector<int8_t> k8_, v8_;              // 8-bit pool
  std::vector<uint16_t> k_scale_, v_scale_;  // its scales, layer_elems_ / 32 a layer
};

}  // namespace pagoda
