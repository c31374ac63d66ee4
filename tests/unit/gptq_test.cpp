// GPTQ (model/gptq.h) on small synthetic layers, each result decoded here from the GPTQ
// format's documented layout (input column i of a qweight word in bits 4*(i%8), output o
// of a qzeros word likewise, stored zero = z - 1, w = scale[g_idx[i]] * (q - z)):
//   - with a diagonal Hessian there is nothing to compensate: GPTQ is round-to-nearest;
//   - with correlated inputs its output error tr(dW H dW^T) is well below round-to-nearest's;
//   - --act-order groups columns by descending diag(H); --sym stores every zero as 7.
// tests/model/test_gptq_quantize.py checks whole models against transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "model/gptq.h"

namespace pagoda {
namespace {

std::vector<float> decode(const GptqTensors& t, int64_t rows, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t qw = static_cast<uint32_t>(t.qweight[static_cast<size_t>((c / 8) * rows + r)]);
      const int q = static_cast<int>((qw >> (4 * (c % 8))) & 15);
      const int64_t g = t.g_idx[static_cast<size_t>(c)];
      const uint32_t qz =
          static_cast<uint32_t>(t.qzeros[static_cast<size_t>(g * (rows / 8) + r / 8)]);
      const int z = static_cast<int>((qz >> (4 * (r % 8))) & 15) + 1;
      const float s = fp16_to_f32(t.scales[static_cast<size_t>(g * rows + r)]);
      w[static_cast<size_t>(r * cols + c)] = s * static_cast<float>(q - z);
    }
  return w;
}

// Plain round-to-nearest with the header's quantizer: per row and group of g columns,
// asymmetric min/max, f16 scale.
std::vector<float> rtn(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t g) {
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += g) {
      const float* x = w.data() + r * cols + c0;
      const int64_t n = std::min(g, cols - c0);
      float lo = 0, hi = 0;
      for (int64_t i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      float s = (hi - lo) / 15;
      int z = static_cast<int>(std::nearbyint(-lo / s));
      if (z < 1) z = 1, s = hi / 14;
      s = fp16_to_f32(f32_to_fp16(s));
      if (z > 1) z = std::clamp(static_cast<int>(std::nearbyint(-lo / s)), 1, 15);
      for (int64_t i = 0; i < n; ++i) {
        const int q = std::clamp(static_cast<int>(std::nearbyint(x[i] / s)) + z, 0, 15);
        out[static_cast<size_t>(r * cols + c0 + i)] = s * static_cast<float>(q - z);
      }
    }
  return out;
}

struct Layer {
  int64_t rows, cols;
  std::vector<float> w, h, x;  // x: [tokens, cols]
  int64_t tokens;
};

// Inputs whose columns share a few common factors (as activations do), so H is far from
// diagonal; weights gaussian.
Layer make_layer(int64_t rows, int64_t cols, int64_t tokens, bool correlated, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Layer l{rows, cols, {}, {}, {}, tokens};
  l.w.resize(static_cast<size_t>(rows * cols));
  for (float& v : l.w) v = nd(rng) * 0.05f;
  const int k = 8;
  std::vector<float> mix(static_cast<size_t>(k * cols));
  for (float& v : mix) v = nd(rng);
  l.x.resize(static_cast<size_t>(tokens * cols));
  for (int64_t t = 0; t < tokens; ++t) {
    float f[k];
    for (float& v : f) v = nd(rng);
    for (int64_t c = 0; c < cols; ++c) {
      float v = nd(rng) * (1.0f + static_cast<float>(c % 7));
      if (correlated)
        for (int j = 0; j < k; ++j) v += 2.0f * f[j] * mix[static_cast<size_t>(j * cols + c)];
      l.x[static_cast<size_t>(t * cols + c)] = v;
    }
  }
  l.h.assign(static_cast<size_t>(cols * cols), 0.0f);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      if (!correlated && i != j) continue;
      double s = 0;
      for (int64_t t = 0; t < tokens; ++t)
        s += static_cast<double>(l.x[static_cast<size_t>(t * cols + i)]) *
             l.x[static_cast<size_t>(t * cols + j)];
      l.h[static_cast<size_t>(i * cols + j)] = static_cast<float>(s);
    }
  return l;
}

// sum over tokens of |(W - Q) x|^2.
double output_error(const Layer& l, const std::vector<float>& q) {
  double e = 0;
  for (int64_t t = 0; t < l.tokens; ++t)
    for (int64_t r = 0; r < l.rows; ++r) {
      double y = 0;
      for (int64_t c = 0; c < l.cols; ++c)
        y += static_cast<double>(l.w[static_cast<size_t>(r * l.cols + c)] -
                                 q[static_cast<size_t>(r * l.cols + c)]) *
             l.x[static_cast<size_t>(t * l.cols + c)];
      e += y * y;
    }
  return e;
}

TEST(Gptq, DiagonalHessianIsRoundToNearest) {
  ThreadPool pool(2);
  const Layer l = make_layer(32, 320, 64, false, 1);
  GptqOptions o;  // group 128: groups of 128, 128 and 64
  auto t = gptq_quantize(l.w, l.rows, l.cols, l.h, o, pool);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(t->n_groups, 3);
  EXPECT_EQ(decode(*t, l.rows, l.cols), rtn(l.w, l.rows, l.cols, 128));
  for (int64_t c = 0; c < l.cols; ++c) EXPECT_EQ(t->g_idx[static_cast<size_t>(c)], c / 128);
}

TEST(Gptq, CompensatesCorrelatedInputs) {
  ThreadPool pool(2);
  const Layer l = make_layer(32, 256, 512, true, 2);
  GptqOptions o;
  const double e_rtn = output_error(l, rtn(l.w, l.rows, l.cols, 128));
  for (bool act_order : {false, true}) {
    o.act_order = act_order;
    auto t = gptq_quantize(l.w, l.rows, l.cols, l.h, o, pool);
    ASSERT_TRUE(t) << t.status().message();
    const double e = output_error(l, decode(*t, l.rows, l.cols));
    // Measured ratios about 0.3 (both orders).
    EXPECT_LT(e, 0.6 * e_rtn) << "act_order " << act_order << ": " << e << " vs " << e_rtn;
  }
}

TEST(Gptq, ActOrderAndSym) {
  ThreadPool pool(2);
  const Layer l = make_layer(16, 256, 128, true, 3);
  GptqOptions o;
  o.act_order = o.sym = true;
  auto t = gptq_quantize(l.w, l.rows, l.cols, l.h, o, pool);
  ASSERT_TRUE(t) << t.status().message();
  std::vector<int64_t> order(static_cast<size_t>(l.cols));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return l.h[static_cast<size_t>(a * l.cols + a)] > l.h[static_cast<size_t>(b * l.cols + b)];
  });
  for (int64_t k = 0; k < l.cols; ++k)
    EXPECT_EQ(t->g_idx[static_cast<size_t>(order[static_cast<size_t>(k)])], k / 128);
  for (int32_t z : t->qzeros) EXPECT_EQ(static_cast<uint32_t>(z), 0x77777777u);
}

// static_groups: g_idx is i / g whatever the order, each group's scale and zero are the
// round-to-nearest ones of the original weights (so a diagonal Hessian still gives plain
// round-to-nearest, in act order too), and with correlated inputs the error feedback still
// wins over round-to-nearest.
TEST(Gptq, StaticGroups) {
  ThreadPool pool(2);
  GptqOptions o;
  o.act_order = o.static_groups = true;
  const Layer d = make_layer(16, 320, 64, false, 6);
  auto t = gptq_quantize(d.w, d.rows, d.cols, d.h, o, pool);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(decode(*t, d.rows, d.cols), rtn(d.w, d.rows, d.cols, 128));
  for (int64_t c = 0; c < d.cols; ++c) EXPECT_EQ(t->g_idx[static_cast<size_t>(c)], c / 128);

  const Layer l = make_layer(32, 256, 512, true, 2);
  auto c = gptq_quantize(l.w, l.rows, l.cols, l.h, o, pool);
  ASSERT_TRUE(c) << c.status().message();
  for (int64_t k = 0; k < l.cols; ++k) EXPECT_EQ(c->g_idx[static_cast<size_t>(k)], k / 128);
  const double e_rtn = output_error(l, rtn(l.w, l.rows, l.cols, 128));
  const double e = output_error(l, decode(*c, l.rows, l.cols));
  EXPECT_LT(e, 0.6 * e_rtn) << e << " vs " << e_rtn;
}

TEST(Gptq, RefusesWhatTheFormatCannotHold) {
  ThreadPool pool(1);
  const Layer l = make_layer(8, 36, 8, false, 4);
  GptqOptions o;
  EXPECT_FALSE(gptq_quantize(l.w, l.rows, l.cols, l.h, o, pool));  // 36 columns: 4.5 words
  o.bits = 3;
  const Layer m = make_layer(8, 32, 8, false, 5);
  EXPECT_FALSE(gptq_quantize(m.w, m.rows, m.cols, m.h, o, pool));
}

}  // namespace
}  // namespace pagoda
