#include "backend/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace pagoda::cpu {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

Isa hardware_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512 && f.avx512_vnni && f.avx512_bf16) return Isa::kAvx512;
  if (f.avx2) return Isa::kAvx2;
  return Isa::kGeneric;
}

Isa env_cap() {
  const char* v = std::getenv("PAGODA_ISA");
  if (v == nullptr) return Isa::kAvx512;
  if (std::strcmp(v, "generic") == 0) return Isa::kGeneric;
  if (std::strcmp(v, "avx2") == 0) return Isa::kAvx2;
  return Isa::kAvx512;
}

std::atomic<int> g_override{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa best_isa() {
  static const Isa hw = hardware_isa();
  static const Isa cap = env_cap();
  int best =
      static_cast<int>(hw) < static_cast<int>(cap) ? static_cast<int>(hw) : static_cast<int>(cap);
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0 && o < best) best = o;
  return static_cast<Isa>(best);
}

void set_isa_override(Isa isa) {
  g_override.store(static_cast<int>(isa));
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "generic";
  }
}

}  // namespace pagoda::cpu
