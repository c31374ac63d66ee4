#include "model/quant_mix.h"

#include <array>
#include <cstdlib>

namespace pagoda {
namespace {

constexpr std::array<QuantMix, 9> kMixes = {{
    {MixId::kQ2_K, "Q2_K", DType::kQ2_K, 10},
    {MixId::kQ3_K_S, "Q3_K_S", DType::kQ3_K, 11},
    {MixId::kQ3_K_M, "Q3_K_M", DType::kQ3_K, 12},
    {MixId::kQ3_K_L, "Q3_K_L", DType::kQ3_K, 13},
    {MixId::kQ4_K_S, "Q4_K_S", DType::kQ4_K, 14},
    {MixId::kQ4_K_M, "Q4_K_M", DType::kQ4_K, 15},
    {MixId::kQ5_K_S, "Q5_K_S", DType::kQ5_K, 16},
    {MixId::kQ5_K_M, "Q5_K_M", DType::kQ5_K, 17},
    {MixId::kQ6_K, "Q6_K", DType::kQ6_K, 18},
}};

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
  for (const QuantMix& m : kMixes)
    if (m.name == name) return &m;
  return nullptr;
}

DType mix_type(const QuantMix& mix, const MixModel& model, std::string_view tensor, int64_t row) {
  const MixId m = mix.id;
  const int i = layer_of(tensor), n = model.n_layers;
  if (tensor == "output.weight" || (model.tied && tensor == "token_embd.weight")) {
    // The output matrix: Q6_K where its rows are whole 256-blocks, else Q8_0.
    return row % 256 == 0 ? DType::kQ6_K : DType::kQ8_0;
  }
  const bool attn_v = ends_with(tensor, "attn_v.weight");
  const bool ffn_down = ends_with(tensor, "ffn_down.weight");
  const bool attn_output = ends_with(tensor, "attn_output.weight");
  // Rules attn_v and ffn_down share: Q3_K_L raises both to Q5_K, the _M mixes raise both
  // to Q6_K in the layers that keep more bits.
  if (attn_v || ffn_down) {
    if (m == MixId::kQ3_K_L) return DType::kQ5_K;
    if (m == MixId::kQ4_K_M || m == MixId::kQ5_K_M)
      return more_bits(i, n) ? DType::kQ6_K : mix.base;
  }
  switch (m) {
    case MixId::kQ2_K:
      if (attn_v) return model.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
      if (ffn_down || attn_output) return DType::kQ3_K;
      break;
    case MixId::kQ3_K_M:
      if (attn_v) return i < 2 ? DType::kQ5_K : DType::kQ4_K;
      if (ffn_down) return i < n / 16 ? DType::kQ5_K : DType::kQ4_K;
      if (attn_output) return DType::kQ4_K;
      break;
    case MixId::kQ3_K_L:
      if (attn_output) return DType::kQ5_K;
      break;
    case MixId::kQ4_K_S:
      if (attn_v && i < 4) return DType::kQ5_K;
      if (ffn_down && i < n / 8) return DType::kQ5_K;
      break;
    default:
      break;
  }
  return mix.base;
}

}  // namespace pagoda
