// The 4-bit table types: IQ4_NL and the NF4 of bitsandbytes folders (Pagoda's NF4 block,
// backend/cpu/quant_blocks.h). Both are Q4_0's block (an fp16 d, 16 bytes of nibbles in
// Q4_0's order) with value = d * table[q], the tables the CPU backend's, so on the device
// they share Q4_0's layout and its 4.5 bits a weight. A table's 16 int8 entries are four
// 32-bit words, and one byte permutation (PRMT) looks up four nibbles at once, which keeps
// the decode kernels' integer dot products (dp4a on the looked-up bytes) as cheap as
// Q4_0's.
#pragma once

#include <cstdint>

#include "backend/cpu/quant_blocks.h"
#include "core/dtype.h"

namespace pagoda::cuda {

__host__ __device__ constexpr bool is_table4(DType t) {
  return t == DType::kIQ4_NL || t == DType::kNF4;
}

// Entries 4i..4i+3 of a table as one little-endian word (host-side constant evaluation:
// the words are constants of Table4Words, which device code may read).
constexpr uint32_t table4_pack(const int8_t* v, int i) {
  return static_cast<uint32_t>(static_cast<uint8_t>(v[4 * i])) |
         static_cast<uint32_t>(static_cast<uint8_t>(v[4 * i + 1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(v[4 * i + 2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(v[4 * i + 3])) << 24;
}

template <DType T>
struct Table4Words {
  static_assert(is_table4(T));
  static constexpr const int8_t* kValues = T == DType::kNF4 ? cpu::kNf4Values : cpu::kIq4nlValues;
  static constexpr uint32_t w0 = table4_pack(kValues, 0), w1 = table4_pack(kValues, 1),
                            w2 = table4_pack(kValues, 2), w3 = table4_pack(kValues, 3);
};

// T's table at the four indices held in the low nibbles of q's bytes (high nibbles 0), as
// four int8 in one word. PRMT picks byte s_k & 7 of the 8 bytes (b:a) for result byte k:
// indices 0-7 from words 0-1, 8-15 from words 2-3, and bit 3 of each index chooses.
template <DType T>
__device__ __forceinline__ int table4_lookup(uint32_t q) {
  using W = Table4Words<T>;
  const uint32_t sel =
      (q & 0x7u) | ((q >> 4) & 0x70u) | ((q >> 8) & 0x700u) | ((q >> 12) & 0x7000u);
  const uint32_t lo = __byte_perm(W::w0, W::w1, sel);
  const uint32_t hi = __byte_perm(W::w2, W::w3, sel);
  const uint32_t high_half = ((q >> 3) & 0x01010101u) * 0xFFu;
  return static_cast<int>((lo & ~high_half) | (hi & high_half));
}

// One entry (q in 0..15) of a table type's table.
__device__ __forceinline__ int table4_value(DType t, int q) {
  const uint32_t x = static_cast<uint32_t>(q);
  const int word =
      t == DType::kNF4 ? table4_lookup<DType::kNF4>(x) : table4_lookup<DType::kIQ4_NL>(x);
  return static_cast<int8_t>(word & 0xFF);
}

}  // namespace pagoda::cuda
