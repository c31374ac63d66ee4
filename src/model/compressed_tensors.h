// compressed-tensors checkpoints (config.json quantization_config with quant_method
// "compressed-tensors", as llm-compressor writes them): which layers are quantized and
// how, and the conversions that turn their tensors into block types the backends
// multiply. model/hf_checkpoint.cpp finds each quantized layer's tensors and converts one
// when a loader asks for it (so the host holds about one converted tensor at a time).
//
//   int-quantized   int8 `weight`, `weight_scale` per output row, per tensor or per group
//                   of a multiple of 32: Q8_0 with q = the int8 value and d = the scale
//                   rounded to f16 (exact for bf16 scales of normal f16 range; 2^-11
//                   relative at most otherwise). 8.5 bits a weight against the file's 8.
//   pack-quantized  4-bit values, eight to an int32 (element i of a row in bits 4(i%8) of
//                   word i/8, stored as q + 8 for q in [-8, 7]), `weight_scale` per group
//                   of a multiple of 32 or per row, optional `weight_zero_point` (z + 8,
//                   eight output rows to an int32 word): where cols and the group are
//                   multiples of 128 (64), Q4_G128 (Q4_G64): d = s, the stored nibble as
//                   it is and z + 8 (8 without zero points) as the block's zero point,
//                   exact in 4.25 (4.5) bits a weight; otherwise Q4_0 (d = s) without zero
//                   points, Q4_1 (d = s, m = -s (z + 8)) with them.
//   float-quantized FP8 E4M3 `weight`, `weight_scale` per tensor or per row: the internal
//                   FP8 block (the e4m3 bytes and f32 scales as stored, 9 bits a weight on
//                   the CPU; model/fp8_checkpoint.h), where cols and the scale group are
//                   multiples of 32; otherwise BF16, the product fp8 x scale rounded once
//                   (as the package's own decompress in a bf16 model rounds it). e4m3fn NaN
//                   bytes are refused.
//
// Activation schemes are not reproduced: Pagoda quantizes activations its own way for
// each weight type (Q8_0 rows take int8 activations per 32-block, finer than per token;
// BF16 and Q4 rows take f32 activations). Static input scales are read past.
// Everything else (other formats, bit widths, strategies, actorder by group, g_idx,
// KV-cache schemes other than FP8 with a static scale per layer, sparsity and transforms)
// is refused by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/hf_quant_format.h"
#include "model/safetensors.h"

namespace pagoda {

enum class CtFormat { kInt8, kPackedInt4, kFp8 };

struct CtPattern;  // a compiled "re:" pattern (compressed_tensors.cpp)

// A targets or ignore entry: "Linear", an exact module name, or "re:" and a pattern,
// compiled once when the config is parsed.
struct CtTarget {
  std::string text;                     // as the config writes it
  std::shared_ptr<const CtPattern> re;  // for "re:" entries
};

// One config group's weight scheme, as far as Pagoda reads it.
struct CtScheme {
  std::string name;  // its key in config_groups, for messages
  CtFormat format = CtFormat::kInt8;
  std::string strategy;  // "tensor", "channel" or "group"
  int group_size = 0;    // for "group"
  bool symmetric = true;
  std::vector<CtTarget> targets;
};

struct CtConfig {
  std::vector<CtScheme> schemes;
  bool kv_cache_fp8 = false;  // kv_cache_scheme: FP8 with per-layer k_scale / v_scale
  std::vector<CtTarget> ignore;
  // The scheme that quantizes `module` (a checkpoint name such as
  // "model.layers.0.mlp.up_proj"; `linear` says whether it is a Linear), or null when
  // the ignore list or no target holds it; an error when two groups both claim it.
  Result<const CtScheme*> scheme_for(const std::string& module, bool linear) const;
};

// Parses quantization_config (JSON text); unsupported parts refused by name.
Result<CtConfig> parse_compressed_tensors_config(std::string_view json_text);

// The block type a scheme's matrix of `cols` input columns, in groups of `group` columns
// under one scale, is stored as.
DType ct_storage_type(const CtScheme& s, int64_t cols, int64_t group);

// Per-(row, column group) scales as floats: scale(r, c) = s[r * n_groups + c / group].
struct CtScales {
  std::vector<float> s;
  int64_t n_groups = 1;
  int64_t group = 0;  // columns per group
  float at(int64_t r, int64_t c) const { return s[r * n_groups + c / group]; }
};

// A quantized layer's tensors, checked against its scheme.
class CtLayer : public QuantLayer {
 public:
  std::vector<uint8_t> convert() const override;

  const CtScheme* scheme = nullptr;
  QuantPiece weight, scale;  // weight or weight_packed; weight_scale
  std::optional<QuantPiece> zero_point;
};

// Checks the tensors a checkpoint holds for `module` ("weight", "weight_scale", ... to
// their pieces) against `scheme`: dtypes, shapes, a place for every one.
Result<std::unique_ptr<CtLayer>> make_ct_layer(const std::string& module, const CtScheme& scheme,
                                               const std::map<std::string, QuantPiece>& params);

// The format as model/hf_checkpoint.cpp uses it (quant_method "compressed-tensors").
Result<std::unique_ptr<HfQuantFormat>> open_compressed_tensors_format(std::string_view json_text);

// The conversions, row by row into `out` (rows x row_bytes(type, cols)); cols is a
// multiple of 32 and every group a multiple of 32 (checked by the caller).
void ct_int8_to_q8_0(const int8_t* w, int64_t rows, int64_t cols, const CtScales& sc, uint8_t* out);
// Into `type` (Q4_G128, Q4_G64, Q4_0 or Q4_1, as ct_storage_type chose); zero_points: one
// stored nibble (z + 8) per (row, group), or null when symmetric (Q4_0, or z = 8).
void ct_packed_int4_to_q4(DType type, const uint8_t* packed, int64_t rows, int64_t cols,
                          const CtScales& sc, const std::vector<uint8_t>* zero_points,
                          uint8_t* out);
// FP8 rows as BlockFP8 (cols and the scale group multiples of 32): the bytes and scales.
void ct_fp8_e4m3_to_fp8(const uint8_t* w, int64_t rows, int64_t cols, const CtScales& sc,
                        uint8_t* out);
void ct_fp8_e4m3_to_bf16(const uint8_t* w, int64_t rows, int64_t cols, const CtScales& sc,
                         uint8_t* out);

}  // namespace pagoda
