#include "model/bnb_double_quant.h"

#include <algorithm>
#include <cmath>

namespace pagoda {
namespace {

// The map's 127 entries strictly between 0 and 1: seven decades 10^(d - 6), d = 0..6, each
// holding 2^d values, 10^(d - 6) times the midpoints of 2^d equal steps of [0.1, 1]
// (bitsandbytes computes them in f32; these are its values, checked against its own map
// in tests/model/test_nf4_quantize.py).
constexpr float kPositive[127] = {
    5.50000038e-07f, 3.25000019e-06f, 7.7499999e-06f,  2.12499981e-05f, 4.37499984e-05f,
    6.62500024e-05f, 8.87499991e-05f, 0.000156250011f, 0.000268750038f, 0.000381250022f,
    0.000493750034f, 0.000606250076f, 0.00071875006f,  0.000831249985f, 0.000943750085f,
    0.00128124992f,  0.00184375001f,  0.00240624999f,  0.00296874996f,  0.00353124971f,
    0.00409374991f,  0.00465624966f,  0.00521875033f,  0.00578125007f,  0.00634374982f,
    0.00690625003f,  0.00746874977f,  0.00803124998f,  0.00859375019f,  0.00915624946f,
    0.00971874967f,  0.0114062503f,   0.0142187504f,   0.0170312505f,   0.0198437516f,
    0.0226562507f,   0.0254687499f,   0.028281251f,    0.0310937501f,   0.0339062512f,
    0.0367187522f,   0.0395312496f,   0.0423437469f,   0.0451562516f,   0.047968749f,
    0.05078125f,     0.053593751f,    0.0564062484f,   0.0592187531f,   0.0620312504f,
    0.0648437515f,   0.0676562563f,   0.0704687461f,   0.0732812509f,   0.0760937482f,
    0.078906253f,    0.0817187577f,   0.0845312476f,   0.0873437524f,   0.0901562497f,
    0.0929687545f,   0.0957812592f,   0.0985937491f,   0.107031256f,    0.12109375f,
    0.135156244f,    0.149218753f,    0.163281247f,    0.177343756f,    0.19140625f,
    0.205468744f,    0.219531253f,    0.233593747f,    0.247656241f,    0.26171875f,
    0.275781274f,    0.289843738f,    0.303906262f,    0.317968726f,    0.33203125f,
    0.346093744f,    0.360156238f,    0.374218762f,    0.388281226f,    0.40234375f,
    0.416406244f,    0.430468738f,    0.444531262f,    0.458593726f,    0.47265625f,
    0.486718714f,    0.500781238f,    0.514843702f,    0.528906226f,    0.54296875f,
    0.557031274f,    0.571093798f,    0.585156262f,    0.599218726f,    0.61328125f,
    0.627343774f,    0.641406298f,    0.655468762f,    0.669531226f,    0.68359375f,
    0.697656274f,    0.711718798f,    0.725781262f,    0.739843726f,    0.75390625f,
    0.767968774f,    0.782031238f,    0.796093762f,    0.810156226f,    0.82421875f,
    0.838281274f,    0.852343738f,    0.866406262f,    0.880468726f,    0.89453125f,
    0.908593774f,    0.922656238f,    0.936718762f,    0.950781226f,    0.96484375f,
    0.978906274f,    0.992968738f,
};

std::array<float, 256> make_map() {
  std::array<float, 256> m{};
  for (int i = 0; i < 127; ++i) {
    m[128 + i] = kPositive[i];
    m[126 - i] = -kPositive[i];
  }
  m[127] = 0.0f;
  m[255] = 1.0f;
  return m;
}

// Halfway between neighbouring map entries, in f32 as bitsandbytes takes them.
std::array<float, 255> make_midpoints() {
  const std::array<float, 256>& m = bnb_dynamic_map();
  std::array<float, 255> mid{};
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (m[i] + m[i + 1]);
  return mid;
}

constexpr int kGrid = 65536;  // the points of [-1, 1] a value is rounded onto first

// The map entry for x = value / block max. Every step is an f32 operation rounded on its
// own (this file is built with -ffp-contract=off, so no step fuses into the next).
uint8_t dynamic_code(float x, const std::array<float, 255>& mid) {
  x = std::clamp(x, -1.0f, 1.0f);
  const float scaled = (x + 1.0f) * 0.5f * static_cast<float>(kGrid - 1);
  const int k = static_cast<int>(scaled + 0.5f);  // truncation of a non-negative value
  const float point = -1.0f + (2.0f * static_cast<float>(k)) / static_cast<float>(kGrid - 1);
  // The entry whose upper midpoint is the first one not below the point.
  return static_cast<uint8_t>(std::lower_bound(mid.begin(), mid.end(), point) - mid.begin());
}

}  // namespace

const std::array<float, 256>& bnb_dynamic_map() {
  static const std::array<float, 256> map = make_map();
  return map;
}

BnbNestedAbsmax bnb_double_quantize(const std::vector<float>& absmax, ThreadPool& pool) {
  static const std::array<float, 255> mid = make_midpoints();
  const int64_t n = static_cast<int64_t>(absmax.size());
  BnbNestedAbsmax q;
  // torch's mean: the f32 sum divided by the count in f32. The sum is taken in double,
  // which equals torch's f32 sum to the bit wherever that one is exact.
  double sum = 0;
  for (float a : absmax) sum += a;
  q.offset = n > 0 ? static_cast<float>(sum) / static_cast<float>(n) : 0.0f;
  const int64_t blocks = (n + kBnbNestedBlock - 1) / kBnbNestedBlock;
  q.codes.resize(static_cast<size_t>(n));
  q.absmax.resize(static_cast<size_t>(blocks));
  pool.parallel_for(blocks, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kBnbNestedBlock, i1 = std::min(n, i0 + kBnbNestedBlock);
      float amax = 0;
      for (int64_t i = i0; i < i1; ++i) amax = std::fmax(amax, std::fabs(absmax[i] - q.offset));
      q.absmax[b] = amax;
      // An all-equal block (amax 0) keeps code 0, which reads back as 0 * 0 + offset.
      const float inv = amax > 0 ? 1.0f / amax : 0.0f;
      for (int64_t i = i0; i < i1; ++i)
        q.codes[i] = amax > 0 ? dynamic_code((absmax[i] - q.offset) * inv, mid) : 0;
    }
  });
  return q;
}

}  // namespace pagoda
