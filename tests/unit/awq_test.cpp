// AWQ's pieces (model/awq.h, model/hf_awq.h) on small synthetic layers:
//   - the Hessian-weighted error equals ||X W^T - X Wq^T||^2 computed from the inputs;
//   - the AWQ GEMM packing decodes (by the layout documented in awq.h, with AutoAWQ's
//     nibble interleave) to the quantizer's own output; every group holds at most 16 values;
//   - the scale search beats round-to-nearest where a few input columns are large, and the
//     clip search never raises a group's output error;
//   - folding the scales (norms, v_proj rows, up_proj rows) leaves a layer's 16-bit
//     function unchanged;
//   - a group size that does not divide a layer is refused by name, with one that does.
// tests/model/test_awq_quantize.py checks whole folders against AutoAWQ and transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "model/awq.h"
#include "model/hf_awq.h"

namespace pagoda {
namespace {

using In = ActivationObserver::Input;

std::vector<float> gaussian(int64_t n, float sd, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// Inputs [tokens, cols] whose first few columns are 20x larger (activation outliers).
std::vector<float> inputs(int64_t tokens, int64_t cols, std::mt19937& rng) {
  std::vector<float> x = gaussian(tokens * cols, 1.0f, rng);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < 4; ++c) x[static_cast<size_t>(t * cols + c * 7)] *= 20.0f;
  return x;
}

std::vector<float> xtx(const std::vector<float>& x, int64_t tokens, int64_t cols) {
  std::vector<float> h(static_cast<size_t>(cols * cols));
  for (int64_t a = 0; a < cols; ++a)
    for (int64_t b = 0; b < cols; ++b) {
      double s = 0;
      for (int64_t t = 0; t < tokens; ++t)
        s += static_cast<double>(x[static_cast<size_t>(t * cols + a)]) *
             x[static_cast<size_t>(t * cols + b)];
      h[static_cast<size_t>(a * cols + b)] = static_cast<float>(s);
    }
  return h;
}

std::vector<float> mean_abs(const std::vector<float>& x, int64_t tokens, int64_t cols) {
  std::vector<float> m(static_cast<size_t>(cols), 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < cols; ++c)
      m[static_cast<size_t>(c)] += std::fabs(x[static_cast<size_t>(t * cols + c)]) / tokens;
  return m;
}

// sum over tokens and rows of (x_t . (a_r - b_r))^2, from the inputs themselves.
double direct_error(const std::vector<float>& x, int64_t tokens, const std::vector<float>& a,
                    const std::vector<float>& b, int64_t rows, int64_t cols) {
  double s = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double d = 0;
      for (int64_t c = 0; c < cols; ++c)
        d += static_cast<double>(x[static_cast<size_t>(t * cols + c)]) *
             (a[static_cast<size_t>(r * cols + c)] - b[static_cast<size_t>(r * cols + c)]);
      s += d * d;
    }
  return s;
}

// y [tokens, rows] = x W^T.
std::vector<double> apply(const std::vector<float>& w, int64_t rows, int64_t cols,
                          const std::vector<double>& x, int64_t tokens) {
  std::vector<double> y(static_cast<size_t>(tokens * rows));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c)
        s += w[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(t * cols + c)];
      y[static_cast<size_t>(t * rows + r)] = s;
    }
  return y;
}

// The weights [rows, cols] that AWQ GEMM tensors stand for, decoded by the documented
// layout: output 8j + k of input i in nibble kNibble[k] of qweight word (i, j).
std::vector<float> decode(const AwqTensors& t, int64_t rows, int64_t cols, int64_t group) {
  constexpr int kNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  const int64_t words = rows / 8;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = i / group, j = r / 8, k = r % 8;
      const uint32_t qw = static_cast<uint32_t>(t.qweight[static_cast<size_t>(i * words + j)]);
      const uint32_t qz = static_cast<uint32_t>(t.qzeros[static_cast<size_t>(g * words + j)]);
      const int q = static_cast<int>((qw >> (4 * kNibble[k])) & 15);
      const int z = static_cast<int>((qz >> (4 * kNibble[k])) & 15);
      const float s = fp16_to_f32(t.scales[static_cast<size_t>(g * rows + r)]);
      w[static_cast<size_t>(r * cols + i)] = s * static_cast<float>(q - z);
    }
  return w;
}

TEST(Awq, HessianErrorEqualsTheOutputErrorOfTheInputs) {
  std::mt19937 rng(1);
  ThreadPool pool(2);
  const int64_t rows = 24, cols = 64, tokens = 200;
  const std::vector<float> x = inputs(tokens, cols, rng), w = gaussian(rows * cols, 0.05f, rng);
  std::vector<float> wq(w.size());
  awq_fake_quantize(w.data(), rows, cols, 32, nullptr, wq.data(), pool);
  std::vector<float> e(w.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = wq[i] - w[i];
  const std::vector<float> h = xtx(x, tokens, cols);
  auto he = HessianError::make(h.data(), cols);
  ASSERT_TRUE(he.is_ok());
  std::vector<double> per_row;
  const double got = (*he)(e.data(), rows, pool, &per_row);
  const double want = direct_error(x, tokens, wq, w, rows, cols);
  EXPECT_GT(want, 0);
  EXPECT_NEAR(got, want, 1e-4 * want);
  double sum = 0;
  for (double v : per_row) sum += v;
  EXPECT_NEAR(sum, got, 1e-9 * got);
}

TEST(Awq, PackingDecodesToTheQuantizersOutput) {
  std::mt19937 rng(2);
  ThreadPool pool(2);
  const int64_t rows = 40, cols = 96, group = 32;
  std::vector<float> w = gaussian(rows * cols, 0.05f, rng);
  w[5] = 0.9f;  // an outlier widens its group's range
  std::vector<float> want(w.size());
  awq_fake_quantize(w.data(), rows, cols, group, nullptr, want.data(), pool);
  const AwqTensors t = awq_pack(w.data(), rows, cols, group, nullptr, pool);
  ASSERT_EQ(t.qweight.size(), static_cast<size_t>(cols * rows / 8));
  ASSERT_EQ(t.qzeros.size(), static_cast<size_t>(cols / group * rows / 8));
  ASSERT_EQ(t.scales.size(), static_cast<size_t>(cols / group * rows));
  const std::vector<float> got = decode(t, rows, cols, group);
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += group) {
      const float* g = got.data() + r * cols + c0;
      const float* o = w.data() + r * cols + c0;
      const float s = fp16_to_f32(t.scales[static_cast<size_t>(c0 / group * rows + r)]);
      EXPECT_LE(std::set<float>(g, g + group).size(), 16u);
      // Min/max over the group: every weight within half a step (f16 scale: 0.1% more).
      for (int64_t i = 0; i < group; ++i) EXPECT_LE(std::fabs(g[i] - o[i]), 0.51f * s + 1e-7f);
    }
}

TEST(Awq, ScalesNormaliseAndStartAtRoundToNearest) {
  const std::vector<float> m = {0.5f, 2.0f, 8.0f, 0.0f};
  for (float v : awq_scales(m, 0.0)) EXPECT_EQ(v, 1.0f);
  const std::vector<float> s = awq_scales(m, 0.5);
  // sqrt(m)^ clamped at 1e-4 for the dead column, then over sqrt(max * min).
  const double norm = std::sqrt(std::sqrt(8.0) * 1e-4);
  EXPECT_NEAR(s[1], std::sqrt(2.0) / norm, 1e-3 * s[1]);
  EXPECT_NEAR(s[3], 1e-4 / norm, 1e-3 * s[3]);
  EXPECT_NEAR(*std::max_element(s.begin(), s.end()) * *std::min_element(s.begin(), s.end()), 1.0,
              1e-5);
}

TEST(Awq, ScaleSearchBeatsRoundToNearestOnOutliers) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  const int64_t cols = 128, tokens = 512;
  const std::vector<float> x = inputs(tokens, cols, rng);
  const std::vector<float> w1 = gaussian(64 * cols, 0.05f, rng),
                           w2 = gaussian(32 * cols, 0.05f, rng);
  const std::vector<float> h = xtx(x, tokens, cols);
  auto r =
      awq_search_scales({{w1.data(), 64}, {w2.data(), 32}}, h, mean_abs(x, tokens, cols), 64, pool);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r->alpha, 0.0);
  // The search's own measure equals the inputs' output error of the chosen scales.
  double direct = 0;
  for (const auto& [w, rows] : {std::pair{&w1, int64_t{64}}, std::pair{&w2, int64_t{32}}}) {
    std::vector<float> ws(w->size()), q(w->size());
    for (int64_t i = 0; i < rows * cols; ++i) ws[i] = (*w)[i] * r->scales[i % cols];
    awq_fake_quantize(ws.data(), rows, cols, 64, nullptr, q.data(), pool);
    for (int64_t i = 0; i < rows * cols; ++i) q[i] /= r->scales[i % cols];
    direct += direct_error(x, tokens, q, *w, rows, cols);
  }
  EXPECT_NEAR(r->error, direct, 1e-3 * direct);
  printf("scale search: alpha %.2f, output error %.4g vs round-to-nearest %.4g\n", r->alpha,
         r->error, r->error_rtn);
  EXPECT_LT(r->error, 0.8 * r->error_rtn);
}

TEST(Awq, ClipSearchNeverRaisesAGroupsError) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  const int64_t rows = 16, cols = 64, group = 32, tokens = 300;
  const std::vector<float> x = inputs(tokens, cols, rng);
  std::vector<float> w = gaussian(rows * cols, 0.05f, rng);
  std::student_t_distribution<float> heavy(2.0f);  // long tails: clipping pays
  for (float& v : w) v = 0.02f * heavy(rng);
  auto c = awq_search_clip(w.data(), rows, cols, xtx(x, tokens, cols), group, pool);
  ASSERT_TRUE(c.is_ok());
  std::vector<float> clipped(w.size()), plain(w.size());
  awq_fake_quantize(w.data(), rows, cols, group, c->data(), clipped.data(), pool);
  awq_fake_quantize(w.data(), rows, cols, group, nullptr, plain.data(), pool);
  int shrunk = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / group; ++g) {
      float amax = 0;
      for (int64_t i = 0; i < group; ++i)
        amax = std::max(amax, std::fabs(w[r * cols + g * group + i]));
      const float cg = (*c)[static_cast<size_t>(r * (cols / group) + g)];
      EXPECT_LE(cg, amax);
      EXPECT_GE(cg, 0.5f * amax);
      shrunk += cg < amax;
      // The group's own output error (its columns of x only), clipped against not.
      std::vector<float> xg(static_cast<size_t>(tokens * group));
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < group; ++i) xg[t * group + i] = x[t * cols + g * group + i];
      auto cut = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + r * cols + g * group,
                                  v.begin() + r * cols + (g + 1) * group);
      };
      const std::vector<float> orig = cut(w);
      EXPECT_LE(direct_error(xg, tokens, cut(clipped), orig, 1, group),
                direct_error(xg, tokens, cut(plain), orig, 1, group) * (1 + 1e-4));
    }
  EXPECT_GT(shrunk, 0);
}

// A decoder layer of random weights with calibration statistics from random inputs
// (norm outputs, attention outputs and the SiLU-gated MLP hidden state as the forward
// pass would show them to the collectors).
struct LayerCase {
  int64_t hidden = 64, kv = 64, inter = 128, tokens = 160;
  std::map<std::string, AwqMatrix> w;
};

double silu(double v) {
  return v / (1 + std::exp(-v));
}

std::vector<double> mlp(std::map<std::string, AwqMatrix>& w, const std::vector<double>& x,
                        int64_t tokens) {
  const AwqMatrix &g = w["mlp.gate_proj"], &u = w["mlp.up_proj"], &d = w["mlp.down_proj"];
  std::vector<double> a = apply(g.w, g.rows, g.cols, x, tokens),
                      b = apply(u.w, u.rows, u.cols, x, tokens);
  for (size_t i = 0; i < a.size(); ++i) a[i] = silu(a[i]) * b[i];
  return apply(d.w, d.rows, d.cols, a, tokens);
}

void run_layer_case(int64_t kv) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  LayerCase lc;
  lc.kv = kv;
  const int64_t h = lc.hidden, f = lc.inter, t = lc.tokens;
  const std::pair<const char*, std::pair<int64_t, int64_t>> shapes[] = {
      {"self_attn.q_proj", {h, h}}, {"self_attn.k_proj", {kv, h}}, {"self_attn.v_proj", {kv, h}},
      {"self_attn.o_proj", {h, h}}, {"mlp.gate_proj", {f, h}},     {"mlp.up_proj", {f, h}},
      {"mlp.down_proj", {h, f}}};
  for (const auto& [name, rc] : shapes)
    lc.w[name] = AwqMatrix{gaussian(rc.first * rc.second, 0.1f, rng), rc.first, rc.second};
  HessianCollector hc(1, pool);
  ChannelMaxCollector cm(1);
  auto observe = [&](In which, const std::vector<float>& x, int64_t cols) {
    hc.observe(0, which, x.data(), t, cols);
    cm.observe(0, which, x.data(), t, cols);
    return std::vector<double>(x.begin(), x.end());
  };
  const std::vector<double> xa = observe(In::kQkv, inputs(t, h, rng), h);
  const std::vector<double> xo = observe(In::kWo, inputs(t, h, rng), h);
  const std::vector<double> xm = observe(In::kGateUp, inputs(t, h, rng), h);
  {
    std::map<std::string, AwqMatrix> w = lc.w;
    const std::vector<double> hid = [&] {
      const AwqMatrix &g = w["mlp.gate_proj"], &u = w["mlp.up_proj"];
      std::vector<double> a = apply(g.w, g.rows, g.cols, xm, t),
                          b = apply(u.w, u.rows, u.cols, xm, t);
      for (size_t i = 0; i < a.size(); ++i) a[i] = silu(a[i]) * b[i];
      return a;
    }();
    observe(In::kDown, std::vector<float>(hid.begin(), hid.end()), f);
  }
  std::map<std::string, AwqMatrix> w = lc.w;  // scaled in place
  std::map<std::string, std::vector<float>> divide;
  AwqLayerReport rep;
  auto packed = awq_quantize_layer(0, w, hc, cm, 32, pool, &divide, &rep);
  ASSERT_TRUE(packed.is_ok()) << packed.status().message();
  EXPECT_EQ(packed->size(), 7u);
  const bool o_scaled = kv == h;
  EXPECT_EQ(rep.groups.size(), o_scaled ? 4u : 3u);
  EXPECT_EQ(divide.count("self_attn.v_proj.bias"), o_scaled ? 1u : 0u);
  ASSERT_EQ(divide.count("input_layernorm.weight"), 1u);
  ASSERT_EQ(divide.count("post_attention_layernorm.weight"), 1u);

  auto divided = [](const std::vector<double>& x, const std::vector<float>& s) {
    std::vector<double> y(x);
    for (size_t i = 0; i < y.size(); ++i) y[i] /= s[i % s.size()];
    return y;
  };
  auto close = [](const std::vector<double>& a, const std::vector<double>& b, const char* what) {
    double amax = 0, err = 0;
    for (size_t i = 0; i < a.size(); ++i)
      amax = std::max(amax, std::fabs(b[i])), err = std::max(err, std::fabs(a[i] - b[i]));
    EXPECT_LT(err, 1e-4 * amax) << what;
  };
  // The norm's output divided by the factors, against the scaled q/k/v.
  const std::vector<double> xa2 = divided(xa, divide["input_layernorm.weight"]);
  for (const char* p : {"self_attn.q_proj", "self_attn.k_proj"})
    close(apply(w[p].w, w[p].rows, h, xa2, t), apply(lc.w[p].w, lc.w[p].rows, h, xa, t), p);
  // v then o: attention mixes tokens, not channels, so o(v(x)) per token stands for it.
  auto vo = [&](std::map<std::string, AwqMatrix>& m, const std::vector<double>& x) {
    std::vector<double> v = apply(m["self_attn.v_proj"].w, kv, h, x, t);
    if (kv != h) v = std::vector<double>(xo);  // grouped query: o's input is its own
    return apply(m["self_attn.o_proj"].w, h, h, v, t);
  };
  close(vo(w, xa2), vo(lc.w, xa), "v_proj -> o_proj");
  close(mlp(w, divided(xm, divide["post_attention_layernorm.weight"]), t), mlp(lc.w, xm, t),
        "gate/up -> down");
  // And the packed weights are the scaled ones, quantized: within a step of each.
  for (const auto& [name, m] : w) {
    const std::vector<float> got = decode((*packed)[name], m.rows, m.cols, 32);
    double e = 0, n = 0;
    for (size_t i = 0; i < got.size(); ++i) e += std::pow(got[i] - m.w[i], 2), n += m.w[i] * m.w[i];
    EXPECT_LT(std::sqrt(e / n), 0.2) << name;
  }
}

TEST(Awq, FoldingKeepsTheLayersFunction) {
  run_layer_case(64);
}

TEST(Awq, GroupedQueryLeavesOProjUnscaled) {
  run_layer_case(32);
}

TEST(Awq, GroupSizesThatDoNotDivideAreRefusedByName) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> smol = {
      {"model.layers.0.self_attn.q_proj.weight", {576, 576}},
      {"model.layers.0.mlp.down_proj.weight", {576, 1536}}};
  EXPECT_TRUE(awq_check_shapes(smol, 64).is_ok());
  const Status s = awq_check_shapes(smol, 128);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("model.layers.0.self_attn.q_proj.weight"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("--group-size 64"), std::string::npos) << s.message();
  const Status odd = awq_check_shapes({{"model.layers.3.mlp.up_proj.weight", {100, 64}}}, 64);
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.message().find("model.layers.3.mlp.up_proj.weight"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
