// bitsandbytes' double quantization of NF4's per-block absmax values (transformers'
// bnb_4bit_use_double_quant; bitsandbytes' quantize_4bit with compress_statistics=True),
// as pagoda quantize writes it. The absmax values of one weight less their mean (the
// offset, f32) go in blocks of 256: each block's largest |value| is kept as an f32
// (nested_absmax) and each value as one byte, an index into bitsandbytes' signed 8-bit
// "dynamic" map (nested_quant_map), so that absmax[i] reads back as
//   map[code[i]] * nested_absmax[i / 256] + offset.
// That is 8 bits per block of 64 weights plus 32 bits per 256 blocks: 4.127 bits a weight
// in all instead of NF4's 4.5.
//
// The byte is chosen as bitsandbytes' CPU quantizer chooses it, so the file's bytes equal
// its own: value / block max (f32) is rounded onto 65536 evenly spaced points of [-1, 1]
// and the point takes the nearest map entry (the lower one on a tie). The rounding onto the
// points moves a value by at most 1/65535 of the block max, far below the map's own steps
// (7 / 1000 of the block max near the top). The offset is torch's mean, the f32 sum over
// the f32 count. Pagoda sums in double (its rounding far below an f32 ulp); torch sums in
// f32 in an order of its own (its vector width may depend on the CPU), exact only while
// every partial sum fits f32's 24 bits, as bf16 weights' absmax values (8 significant
// bits) usually do. Otherwise its mean may end an ulp or two away, and a byte whose value
// sat on a step may go the other way (measured: SmolLM2-135M's f16 weights, 49 of 210
// offsets 1-2 ulp apart and 24 of 1.66M bytes; 100 random f32 576 x 576 matrices, 30
// offsets and 7 of 518400 bytes; random bf16 matrices, none).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace pagoda {

// Absmax values per nested block (bitsandbytes' fixed choice for double quantization).
constexpr int64_t kBnbNestedBlock = 256;

// bitsandbytes' create_dynamic_map(signed=True) in f32: 256 ascending entries, the
// negatives, 0 at index 127, the positives, and 1 at 255.
const std::array<float, 256>& bnb_dynamic_map();

struct BnbNestedAbsmax {
  std::vector<uint8_t> codes;  // one per absmax value
  std::vector<float> absmax;   // one per started block of kBnbNestedBlock codes
  float offset = 0;            // the mean of the absmax values
};

// `absmax` (finite, >= 0) double-quantized.
BnbNestedAbsmax bnb_double_quantize(const std::vector<float>& absmax, ThreadPool& pool);

}  // namespace pagoda
