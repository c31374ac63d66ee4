// Dispatch of the elementwise ops to the implementation compiled for this CPU.
#include "backend/cpu/ops.h"

#include "backend/cpu/cpu_features.h"

namespace pagoda::cpu {

#define PAGODA_DECLARE_OPS(ns)                                        \
  namespace ns {                                                      \
  void rms_norm(const float*, const float*, float*, int64_t, float);  \
  void rope(float*, int, int, int, const float*, const float*, bool); \
  void silu_mul(const float*, const float*, float*, int64_t);         \
  void add_inplace(float*, const float*, int64_t);                    \
  }
PAGODA_DECLARE_OPS(generic)
PAGODA_DECLARE_OPS(avx2)
PAGODA_DECLARE_OPS(avx512)
#undef PAGODA_DECLARE_OPS

#define PAGODA_DISPATCH(fn, ...)       \
  switch (best_isa()) {                \
    case Isa::kAvx512:                 \
      return avx512::fn(__VA_ARGS__);  \
    case Isa::kAvx2:                   \
      return avx2::fn(__VA_ARGS__);    \
    default:                           \
      return generic::fn(__VA_ARGS__); \
  }

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  PAGODA_DISPATCH(rms_norm, x, w, out, n, eps)
}
void rope(float* x, int n_heads, int head_dim, int n_pairs, const float* cos_t, const float* sin_t,
          bool neox) {
  PAGODA_DISPATCH(rope, x, n_heads, head_dim, n_pairs, cos_t, sin_t, neox)
}
void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  PAGODA_DISPATCH(silu_mul, gate, up, out, n)
}
void add_inplace(float* y, const float* x, int64_t n) {
  PAGODA_DISPATCH(add_inplace, y, x, n)
}

}  // namespace pagoda::cpu
