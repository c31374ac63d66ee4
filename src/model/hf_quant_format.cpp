#include "model/hf_quant_format.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/awq_gptq.h"
#include "model/bnb_nf4.h"
#include "model/compressed_tensors.h"
#include "model/fp8_checkpoint.h"
#include "model/hf_json.h"

namespace pagoda {

std::pair<std::string, std::string> HfQuantFormat::split(const std::string& name) const {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

Result<std::unique_ptr<HfQuantFormat>> open_hf_quant_format(std::string_view json_text) {
  using nlohmann::json;
  const json j = json::parse(json_text.begin(), json_text.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return corrupt("config.json quantization_config is not an object");
  const json* m = find_key(j, "quant_method");
  const std::string method = m == nullptr     ? "(none)"
                             : m->is_string() ? m->get<std::string>()
                                              : m->dump();
  if (method == "compressed-tensors") return open_compressed_tensors_format(json_text);
  if (method == "bitsandbytes") return open_bnb_nf4_format(json_text);
  if (method == "awq" || method == "gptq") return open_awq_gptq_format(json_text);
  if (method == "fp8") return open_fp8_checkpoint_format(json_text);
  return unsupported(
      "config.json quantization_config quant_method '" + method +
      "' is not supported (Pagoda loads compressed-tensors, awq, gptq, fp8 and bitsandbytes "
      "NF4 checkpoints)");
}

std::string quant_piece_name(const std::string& module, std::string_view param) {
  return "'" + module + "." + std::string(param) + "'";
}

float quant_float_at(const QuantPiece& p, int64_t i) {
  const uint8_t* d = p.data();
  switch (*p.tensor->type) {
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, d + 2 * i, 2);
      return fp16_to_f32(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, d + 2 * i, 2);
      return bf16_to_f32(h);
    }
    default: {
      float f;
      std::memcpy(&f, d + 4 * i, 4);
      return f;
    }
  }
}

int64_t quant_int_at(const QuantPiece& p, int64_t i) {
  const uint8_t* d = p.data();
  if (*p.tensor->type == DType::kI64) {
    int64_t v;
    std::memcpy(&v, d + 8 * i, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, d + 4 * i, 4);
  return v;
}

}  // namespace pagoda
