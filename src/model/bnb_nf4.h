// bitsandbytes 4-bit checkpoints (config.json quantization_config with quant_method
// "bitsandbytes", load_in_4bit, bnb_4bit_quant_type "nf4"), as transformers'
// save_pretrained writes a model loaded with BitsAndBytesConfig. Each quantized Linear
// `x` holds:
//
//   x.weight          uint8 [rows * cols / 2, 1]: the row-major weight's 4-bit codes, two
//                     to a byte, element 2i in the high nibble of byte i
//   x.weight.absmax   f32 [rows * cols / blocksize]: each block's largest |w|; or, with
//                     bnb_4bit_use_double_quant, uint8 codes into x.weight.nested_quant_map
//                     (f32 [256]) times x.weight.nested_absmax (f32, one per nested_blocksize
//                     absmax values), plus the quant state's nested_offset
//   x.weight.quant_map f32 [16]: the NF4 code book (checked against bitsandbytes')
//   x.weight.quant_state.bitsandbytes__nf4  uint8: JSON text with shape, dtype, blocksize,
//                     quant_type and the nested_* fields
//
// w = absmax[block] * quant_map[code]. Each layer converts at load to Pagoda's internal
// NF4 block (core/dtype.h; backend/cpu/quant_blocks.h): per 32 weights d = absmax / 127
// as f16 and the codes kept as nibbles into round(127 * quant_map), which the CPU
// multiplies in IQ4_NL's kernels and the CUDA loader turns into Q8_0 exactly. The two
// roundings (table: at most 0.37% of absmax; d: 2^-11 relative) are the whole difference
// from bitsandbytes' dequantize_4bit; 4.5 bits a weight against the file's 4 + 32 /
// blocksize (4.5 at blocksize 64, 4.127 with double quantization).
//
// Refused by name: FP4 (bnb_4bit_quant_type "fp4"), LLM.int8 (load_in_8bit), a
// quant_storage other than uint8, block sizes that are not a multiple of 32, a compute
// dtype other than float32/float16/bfloat16. llm_int8_skip_modules is honoured with
// transformers' matching (a skipped module is read as a 16-bit Linear); a Linear stored
// unquantized (lm_head, which transformers never quantizes) loads as it is.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "model/hf_quant_format.h"

namespace pagoda {

// The format as model/hf_checkpoint.cpp uses it (quant_method "bitsandbytes").
Result<std::unique_ptr<HfQuantFormat>> open_bnb_nf4_format(std::string_view json_text);

// One NF4 row-major weight (rows x cols, cols a multiple of 32) as Pagoda NF4 blocks:
// `packed` two codes a byte (high nibble first), absmax[e / blocksize] per element e.
void bnb_nf4_to_blocks(const uint8_t* packed, const float* absmax, int64_t blocksize, int64_t rows,
                       int64_t cols, uint8_t* out);

}  // namespace pagoda
