// Which GGUF weight types the CUDA backend multiplies, and what its loader stores every
// other type as. The loader (model/cuda/cuda_model.cpp) converts at load with
// cpu::convert_row; the memory ledger (ledger/sources.cpp, restate_for_cuda) and `pagoda
// quantize IN OUT CUDA` count the same types through stored_types (model/weight_types.h),
// so `pagoda plan` and the KV pool's size see the bytes the device holds.
//
// llama.cpp's K-quant mixes (Q4_K_M, the most common download) are Q4_K with Q6_K for
// the LM head and some attn_v / ffn_down, and even its Q4_0 and Q8_0 files keep the LM
// head in Q6_K. Q4_K, Q5_K and Q6_K are multiplied in the file's own bits, in a device
// layout of 32-element sub-blocks (backend/cuda/kquant_layout.h: 4.63, 5.63 and 6.63 bits
// a weight against the file's 4.5, 5.5 and 6.56). The other block types (Q5_0, Q5_1,
// Q2_K, Q3_K, Q8_1, Q8_K, IQ4_NL, IQ4_XS, MXFP4 and the internal NF4 of bitsandbytes
// folders) become Q8_0 (8.5 bits; Q5_0, Q8_1, IQ4_NL, NF4 and MXFP4 exactly, IQ4_XS with its per-32
// step rounded to f16, the rest requantized: backend/cpu/convert_blocks.h) rather than being
// refused. The kernels also take IQ4_NL and NF4 in their own 4.5 bits (Q4_0's layout, a
// table lookup: backend/cuda/table4.cuh), which the CUDA op tests check against the CPU
// reference; the loader keeps converting them to Q8_0 until those tests and a model run
// have passed on a GPU (issue 31 part 4). Header-only: the CUDA plugin and pagoda_lib
// both use it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/kquant_layout.h"
#include "core/dtype.h"

namespace pagoda {

inline bool cuda_multiplies(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 ||
         t == DType::kQ4_0 || t == DType::kQ4_1 || kq::ktype_of(t) != kq::KType::kNone;
}

inline bool is_block_type(DType t) {
  return dtype_info(t).block_elems > 1;
}

// The type one matrix of file type t is stored as on the device: itself where the kernels
// take it, any other block type as Q8_0. Plain types the kernels do not take (F64,
// integers) come back unchanged, for the loader to refuse.
inline DType cuda_storage_type(DType t) {
  // The FP8 of FP8 checkpoints goes to BF16 as the loaders wrote it before the CPU kept
  // FP8 (each weight rounded once: backend/cpu/convert_blocks.h).
  if (t == DType::kFP8) return DType::kBF16;
  // The grouped 4-bit blocks of AWQ/GPTQ/W4A16 checkpoints go to Q4_1 as the loaders wrote
  // them before the CPU kept their groups (m = -d z rounded to f16), until the GPU has a
  // kernel of its own for them (issue 31 part 4).
  if (t == DType::kQ4_G64 || t == DType::kQ4_G128) return DType::kQ4_1;
  if (cuda_multiplies(t) || !is_block_type(t)) return t;
  return DType::kQ8_0;
}

// Device bytes of `elements` weights stored as `t` (the arrays' 256-byte alignment
// aside): the K types' own layout, every other type the file's bytes (the 32-element
// types keep them, split into quant and scale arrays).
inline int64_t cuda_weight_bytes(DType t, int64_t elements) {
  const kq::KType k = kq::ktype_of(t);
  if (k != kq::KType::kNone) return kq::device_bytes(k, elements);
  return static_cast<int64_t>(row_bytes(t, elements));
}

// The type of one device matrix stacked from tensors of these file types (q, k and v; gate
// and up): their common storage type; block types whose storage types differ meet at
// Q8_0 (a Q4_K_M layer's Q4_K q and k beside a Q6_K v: stacks with the kernels' own
// types in one matrix would need a type per row range). nullopt where float types differ
// or floats meet blocks: the loader refuses those.
inline std::optional<DType> cuda_stack_type(const std::vector<DType>& file_types) {
  if (file_types.empty()) return std::nullopt;
  const DType first = cuda_storage_type(file_types[0]);
  bool same = true, blocks = true;
  for (DType t : file_types) {
    same = same && cuda_storage_type(t) == first;
    blocks = blocks && is_block_type(t);
  }
  if (same) return first;
  if (blocks) return DType::kQ8_0;
  return std::nullopt;
}

// The device matrix a GGUF tensor goes into: "blk.N.qkv" for attn_q/k/v, "blk.N.gate_up"
// for ffn_gate/up (the loader stacks those), the tensor's own name otherwise.
inline std::string cuda_stack_name(const std::string& name) {
  const size_t dot = name.find('.', 4);
  if (name.compare(0, 4, "blk.") != 0 || dot == std::string::npos) return name;
  const std::string rest = name.substr(dot + 1);
  if (rest == "attn_q.weight" || rest == "attn_k.weight" || rest == "attn_v.weight")
    return name.substr(0, dot) + ".qkv";
  if (rest == "ffn_gate.weight" || rest == "ffn_up.weight") return name.substr(0, dot) + ".gate_up";
  return name;
}

}  // namespace pagoda
