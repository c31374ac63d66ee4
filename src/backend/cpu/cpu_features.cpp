#include "backend/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace pagoda::cpu {
namespace {

// Read from CPUID directly (compilers disagree on which names __builtin_cpu_supports
// knows), and require the OS to save the wide registers (XGETBV).
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6) == 0x6, zmm_state = (xcr0_lo & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17),
             avx512bw = b & (1u << 30), avx512vl = b & (1u << 31), vnni = c & (1u << 11);
  unsigned a1 = 0, b1, c1, d1;
  __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
  const bool bf16 = a1 & (1u << 5);
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && vnni;
  f.avx512_bf16 = f.avx512 && bf16;
#endif
  return f;
}

Isa hardware_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512 && f.avx512_vnni && f.avx512_bf16) return Isa::kAvx512;
  if (f.avx2) return Isa::kAvx2;
  return Isa::kGeneric;
}

std::atomic<int> g_override{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa best_isa() {
  static const Isa hw = hardware_isa();
  int best = static_cast<int>(hw);
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
