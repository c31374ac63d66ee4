// llama.cpp's named quantization mixes (Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K):
// which type each weight matrix of a Llama-family model takes, so that
// `pagoda quantize IN OUT Q4_K_M` writes the file a llama.cpp user expects, tensor for
// tensor (tests/model/test_quant_mix.py compares every tensor's type with llama.cpp's
// own file). The rules are llama.cpp's (its llama-quant.cpp, read for the facts) for
// dense models; its mixture-of-experts, Falcon and 70B special cases are not carried.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace pagoda {

enum class MixId { kQ2_K, kQ3_K_S, kQ3_K_M, kQ3_K_L, kQ4_K_S, kQ4_K_M, kQ5_K_S, kQ5_K_M, kQ6_K };

struct QuantMix {
  MixId id;
  std::string_view name;  // "Q4_K_M"
  DType base;             // the type most matrices take
  int file_type;          // general.file_type (llama.cpp's LLAMA_FTYPE_MOSTLY_*)
};

// nullptr where `name` is not a mix ("Q4_K" alone is a plain type: every matrix in it).
const QuantMix* find_quant_mix(std::string_view name);

struct MixModel {
  int n_layers = 0;   // block_count
  int n_gqa = 1;      // query heads per KV head
  bool tied = false;  // no output.weight: the embedding is the output matrix
};

// The type `mix` gives the weight matrix `tensor` (a GGUF name such as
// "blk.3.attn_v.weight") with rows of `row` elements, before the caller's fallback for
// rows that are not whole blocks of it (as for plain types).
DType mix_type(const QuantMix& mix, const MixModel& model, std::string_view tensor, int64_t row);

}  // namespace pagoda
