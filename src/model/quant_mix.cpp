#include "model/quant_mix.h"

#include <array>
#include <cstdlib>

namespace pagoda {
namespace {

enum class Mix { kQ2_K, kQ3_K_S, kQ3_K_M, kQ3_K_L, kQ4_K_S, kQ4_K_M, kQ5_K_S, kQ5_K_M, kQ6_K };

struct Entry {
  QuantMix mix;
  Mix id;
};

constexpr std::array<Entry, 9> kMixes = {{
    {{"Q2_K", DType::kQ2_K, 10}, Mix::kQ2_K},
    {{"Q3_K_S", DType::kQ3_K, 11}, Mix::kQ3_K_S},
    {{"Q3_K_M", DType::kQ3_K, 12}, Mix::kQ3_K_M},
    {{"Q3_K_L", DType::kQ3_K, 13}, Mix::kQ3_K_L},
    {{"Q4_K_S", DType::kQ4_K, 14}, Mix::kQ4_K_S},
    {{"Q4_K_M", DType::kQ4_K, 15}, Mix::kQ4_K_M},
    {{"Q5_K_S", DType::kQ5_K, 16}, Mix::kQ5_K_S},
    {{"Q5_K_M", DType::kQ5_K, 17}, Mix::kQ5_K_M},
    {{"Q6_K", DType::kQ6_K, 18}, Mix::kQ6_K},
}};

Mix id_of(const QuantMix& mix) {
  for (const Entry& e : kMixes)
    if (e.mix.name == mix.name) return e.id;
  return Mix::kQ6_K;  // unreachable for mixes from find_quant_mix
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// "blk.N." -> N; -1 for other tensors.
int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  return std::atoi(std::string(name.substr(4)).c_str());
}

// The layers that keep more bits in the _M mixes: the first and last eighth, and every
// third one between.
bool more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

}  // namespace

const QuantMix* find_quant_mix(std::string_view name) {
  for (const Entry& e : kMixes)
    if (e.mix.name == name) return &e.mix;
  return nullptr;
}

DType mix_type(const QuantMix& mix, const MixModel& model, std::string_view tensor, int64_t row) {
  const Mix m = id_of(mix);
  const int i = layer_of(tensor), n = model.n_layers;
  const bool output = tensor == "output.weight" || (model.tied && tensor == "token_embd.weight");
  if (output) {
    // The output matrix: Q6_K where its rows are whole 256-blocks, else Q8_0.
    return row % 256 == 0 ? DType::kQ6_K : DType::kQ8_0;
  }
  if (ends_with(tensor, "attn_v.weight")) {
    switch (m) {
      case Mix::kQ2_K:
        return model.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
      case Mix::kQ3_K_M:
        return i < 2 ? DType::kQ5_K : DType::kQ4_K;
      case Mix::kQ3_K_L:
        return DType::kQ5_K;
      case Mix::kQ4_K_M:
      case Mix::kQ5_K_M:
        return more_bits(i, n) ? DType::kQ6_K : mix.base;
      case Mix::kQ4_K_S:
        return i < 4 ? DType::kQ5_K : mix.base;
      default:
        return mix.base;
    }
  }
  if (ends_with(tensor, "ffn_down.weight")) {
    switch (m) {
      case Mix::kQ2_K:
        return DType::kQ3_K;
      case Mix::kQ3_K_M:
        return i < n / 16 ? DType::kQ5_K : DType::kQ4_K;
      case Mix::kQ3_K_L:
        return DType::kQ5_K;
      case Mix::kQ4_K_M:
      case Mix::kQ5_K_M:
        return more_bits(i, n) ? DType::kQ6_K : mix.base;
      case Mix::kQ4_K_S:
        return i < n / 8 ? DType::kQ5_K : mix.base;
      default:
        return mix.base;
    }
  }
  if (ends_with(tensor, "attn_output.weight")) {
    switch (m) {
      case Mix::kQ2_K:
        return DType::kQ3_K;
      case Mix::kQ3_K_M:
        return DType::kQ4_K;
      case Mix::kQ3_K_L:
        return DType::kQ5_K;
      default:
        return mix.base;
    }
  }
  return mix.base;
}

}  // namespace pagoda
