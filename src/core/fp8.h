// FP8 E4M3 ("e4m3fn": no infinities, one NaN pattern per sign, largest finite 448) on the
// host, for writing checkpoints; the CUDA backend converts on the device with its own
// intrinsics. Rounding is to nearest, ties to even, as PyTorch's float8_e4m3fn cast does;
// magnitudes above 448 saturate to 448 (the caller has scaled them into range).
#pragma once

#include <cmath>
#include <cstdint>

namespace pagoda {

inline constexpr float kE4M3Max = 448.0f;

inline uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fmin(std::fabs(x), kE4M3Max);
  // Below the smallest normal (2^-6) the step is 2^-9: code m is m * 2^-9, and m = 8 is
  // the smallest normal's code, so the rounded count is the code.
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::rint(a * 0x1p9f));
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  e -= 1;             // a = (1 + m/8) * 2^e
  // Scaling by powers of two is exact, so rint sees the true value: ties go to even.
  int m = static_cast<int>(std::rint(std::ldexp(a, -e) * 8.0f)) - 8;
  if (m == 8) {
    m = 0;
    ++e;
  }
  return sign | static_cast<uint8_t>(((e + 7) << 3) | m);
}

inline float e4m3_to_f32(uint8_t b) {
  const int exp = (b >> 3) & 0xF, man = b & 7;
  float v;
  if (exp == 15 && man == 7)
    v = NAN;
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -9);
  else
    v = std::ldexp(1.0f + man / 8.0f, exp - 7);
  return (b & 0x80) ? -v : v;
}

}  // namespace pagoda
