// 16-lane float math with GCC vector extensions, for the kernels that are written once
// and compiled per ISA (attention_impl.h, ops_impl.h). Include it inside the anonymous
// namespace of such a translation unit: everything here is inline and takes the ISA of
// the file that includes it (SSE, AVX2 or AVX-512 code from the same source).
// Needs <cstdint> and <cstring>.

// The vector types are passed between inline functions of one translation unit only, so
// the ABI note GCC gives for 64-byte vectors in the non-AVX-512 builds does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float V16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t V16i __attribute__((vector_size(64), aligned(4)));

inline V16 splat(float x) {
  return V16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}
inline V16 load16(const float* p) {
  return *reinterpret_cast<const V16*>(p);
}
inline void store16(float* p, V16 v) {
  *reinterpret_cast<V16*>(p) = v;
}

// exp on 16 lanes, inputs clamped to [-87, 88]: reduction by ln2 (rounding by the
// 1.5 * 2^23 trick, exact to nearest-even for |t| < 2^22) and a degree-6 polynomial;
// ~1 ulp, like the vectorised exp llama.cpp uses.
inline V16 exp16(V16 x) {
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  const V16 t = x * 1.44269504088896341f;
  const V16 n = (t + 12582912.0f) - 12582912.0f;
  const V16 r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  V16 p = splat(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const V16i bits = (__builtin_convertvector(n, V16i) + 127) << 23;
  V16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
