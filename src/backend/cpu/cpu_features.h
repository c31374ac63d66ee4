// What the running CPU supports, read once. Kernels are compiled per ISA in files named
// *_avx2.cpp / *_avx512.cpp (CMake gives those files their -m flags) and each module
// picks its implementation with these at first use; PAGODA_ISA=generic|avx2|avx512
// caps the choice (tests use it to exercise every path on one machine).
#pragma once

#include <string_view>

namespace pagoda::cpu {

enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
};

const CpuFeatures& cpu_features();
// The best ISA level usable here: avx512 needs F/BW/VL/DQ/VNNI/BF16, avx2 needs AVX2/FMA/F16C;
// lowered by set_isa_override() (the CLI's PAGODA_ISA).
Isa best_isa();
// Tests and PAGODA_ISA: force a lower ISA level (never above what the CPU has). Affects only
// modules that pick their implementation after this call, or that consult best_isa()
// on each call.
void set_isa_override(Isa isa);
std::string_view isa_name(Isa isa);

}  // namespace pagoda::cpu
