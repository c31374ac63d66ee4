#include "model/weight_types.h"

#include <map>

#include "backend/cpu/matmul.h"
#include "model/cuda_weight_types.h"

namespace pagoda {

DType cpu_storage_type(DType t) {
  if (cpu::is_supported_weight_type(t) || !is_block_type(t)) return t;
  return DType::kQ8_0;
}

std::vector<std::optional<DType>> stored_types(
    WeightBackend backend, const std::vector<std::pair<std::string, DType>>& matrices) {
  std::vector<std::optional<DType>> out(matrices.size());
  if (backend == WeightBackend::kCpu) {
    for (size_t i = 0; i < matrices.size(); ++i) {
      const DType t = cpu_storage_type(matrices[i].second);
      if (cpu::is_supported_weight_type(t)) out[i] = t;
    }
    return out;
  }
  std::map<std::string, std::vector<size_t>> stacks;
  for (size_t i = 0; i < matrices.size(); ++i)
    stacks[cuda_stack_name(matrices[i].first)].push_back(i);
  for (const auto& [name, members] : stacks) {
    std::vector<DType> types;
    for (size_t i : members) types.push_back(matrices[i].second);
    const std::optional<DType> t = cuda_stack_type(types);
    if (!t || !cuda_multiplies(*t)) continue;
    for (size_t i : members) out[i] = *t;
  }
  return out;
}

int64_t stored_bytes(WeightBackend backend, DType t, int64_t elements) {
  if (backend == WeightBackend::kCpu && cpu::is_supported_weight_type(t))
    return cpu::packed_weight_bytes(t, elements);
  if (backend == WeightBackend::kCuda) return cuda_weight_bytes(t, elements);
  return static_cast<int64_t>(row_bytes(t, elements));
}

}  // namespace pagoda
