// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers") for one linear layer, and its result packed as the GPTQ
// checkpoint format ("gptq", v1) that transformers, GPTQModel and vLLM read.
//
// The weights are quantized one input column at a time; each column's rounding error,
// divided by the diagonal of the inverse Hessian's Cholesky factor, is spread over the
// columns not yet quantized (lazily: inside a block of 128 columns at once, onto the rest
// when the block is done). H = sum x x^T over calibration inputs, dampened by
// `damp` * mean(diag H); columns that saw no input get weight 0. With act_order the columns
// go in order of descending diag(H) and g_idx maps each column to its group.
//
// Groups are by default formed as the columns are reached, each group's scale and zero
// taken from its weights as GPTQ's error feedback has left them; with act_order the
// groups then hold scattered columns (g_idx a permutation's image), which no block
// layout of contiguous columns can hold without requantizing. static_groups (AutoGPTQ's
// and GPTQModel's option of that name) instead fixes every group's scale and zero up
// front, from the original weights of input columns [k g, (k + 1) g): the columns are
// still quantized in act order with error feedback, but g_idx is plain i / g, so the
// result loads into contiguous 4-bit blocks.
//
// Quantizer per row and group: asymmetric, scale = (max(x, 0) - min(x, 0)) / (2^bits - 1)
// and zero = round(-min / scale); symmetric, scale = 2 max|x| / (2^bits - 1) and zero =
// 2^(bits - 1). q = clamp(round(w / scale) + zero, 0, 2^bits - 1), w' = scale (q - zero).
// The scale is rounded to f16 before use, so the stored scale is the one quantized with.
// The v1 format stores zero - 1, which readers add back with a carry into the next
// nibble when it was -1: an asymmetric group that would get zero 0 (no negative weight)
// is given zero 1 and scale max / (2^bits - 2) instead.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace pagoda {

struct GptqOptions {
  int bits = 4;          // 4 or 8
  int group_size = 128;  // input columns per scale; -1 or >= cols: one group per row
  bool sym = false;
  bool act_order = false;      // desc_act
  bool static_groups = false;  // group parameters from the original weights, g_idx = i / g
  double damp = 0.01;          // percdamp
  int block = 128;             // columns whose error updates are applied together
};

// The GPTQ format's tensors for one layer of `rows` outputs and `cols` inputs.
struct GptqTensors {
  int64_t n_groups = 0;
  std::vector<int32_t>
      qweight;                  // [cols * bits / 32, rows], column i of a word at bit bits*(i%pack)
  std::vector<int32_t> qzeros;  // [n_groups, rows * bits / 32], zero - 1 likewise per output
  std::vector<uint16_t> scales;  // [n_groups, rows] f16
  std::vector<int32_t> g_idx;    // [cols]: the group of each input column
};

// `w` row-major [rows, cols] (an HF weight); `h` row-major [cols, cols] symmetric.
// cols and rows must be multiples of 32 / bits.
Result<GptqTensors> gptq_quantize(const std::vector<float>& w, int64_t rows, int64_t cols,
                                  const std::vector<float>& h, const GptqOptions& o,
                                  ThreadPool& pool);

}  // namespace pagoda
