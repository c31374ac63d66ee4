// The types each backend's loader stores a file's weight matrices as, for the loaders,
// the memory ledger (ledger/sources.cpp) and `pagoda quantize IN OUT CPU|CUDA`, so all
// three agree. The CUDA rule lives in model/cuda_weight_types.h (header-only, for the
// plugin); the CPU rule is here.
//
// The CPU kernels (backend/cpu/packed_weights.cpp) take F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 and the internal NF4
// (bitsandbytes folders; model/bnb_nf4.h), FP8 (FP8 checkpoints) and Q4_G64/Q4_G128 (AWQ,
// GPTQ and W4A16 groups; model/awq_gptq.h) (the grid i-quants are refused when the GGUF
// is read). What is left are ggml's activation formats, Q8_1 and Q8_K,
// which no llama.cpp quantization writes but a file may still hold: the loader (model/model.cpp)
// converts them to Q8_0 with cpu::convert_row (Q8_1 exactly, Q8_K requantized) rather than refuse
// the file, and the plan's note states the difference.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace pagoda {

// `t` itself where the CPU kernels take it or it is not a block type (the loader refuses
// plain types it cannot multiply), otherwise the type the loader converts it to.
DType cpu_storage_type(DType t);

enum class WeightBackend { kCpu, kCuda };

// For a file's weight matrices (name, file type), the type `backend` stores each as, in
// the same order: the CPU converts tensor by tensor (and stacks only what ends in one
// type); the CUDA backend stacks q/k/v and gate/up in one type (cuda_stack_type).
// nullopt where that backend's loader refuses the tensor.
std::vector<std::optional<DType>> stored_types(
    WeightBackend backend, const std::vector<std::pair<std::string, DType>>& matrices);

// Bytes `backend` holds for `elements` weights stored as `t`: the CPU's packed layout
// (backend/cpu/packed_weights.h: the K types' scales are repacked, Q3_K 5.5% and Q4_K
// 2.8% above the file), the CUDA layout's (model/cuda_weight_types.h: the K types 1-3%
// above the file, the others the file's bytes).
int64_t stored_bytes(WeightBackend backend, DType t, int64_t elements);

}  // namespace pagoda
