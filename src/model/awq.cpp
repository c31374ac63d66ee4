#include "model/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"

namespace pagoda {
namespace {

constexpr float kNoClip = std::numeric_limits<float>::infinity();

// AutoAWQ's interleave: output column 8j + k in nibble kSlot[k] of word j.
constexpr int kSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// One row's groups through the quantizer; clip per group or null.
void fake_quantize_row(const float* w, int64_t cols, int64_t group, const float* clip, float* out) {
  for (int64_t c0 = 0, g = 0; c0 < cols; c0 += group, ++g) {
    const float c = clip != nullptr ? clip[g] : kNoClip;
    const AwqGroup p = awq_group_params(w + c0, group, c);
    for (int64_t i = 0; i < group; ++i)
      out[c0 + i] = p.scale * static_cast<float>(awq_code(w[c0 + i], c, p) - p.zero);
  }
}

}  // namespace

AwqGroup awq_group_params(const float* w, int64_t n, float clip) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::clamp(w[i], -clip, clip);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const float scale = std::max(hi - lo, 1e-5f) / 15.0f;
  AwqGroup g;
  g.scale_f16 = f32_to_fp16(std::min(scale, 65504.0f));
  if ((g.scale_f16 & 0x7fff) == 0) g.scale_f16 = 1;  // the smallest f16 above 0
  g.scale = fp16_to_f32(g.scale_f16);
  g.zero = static_cast<int>(std::clamp(awq_round(-lo / g.scale), 0.0f, 15.0f));
  return g;
}

void awq_fake_quantize(const float* w, int64_t rows, int64_t cols, int64_t group, const float* clip,
                       float* out, ThreadPool& pool) {
  const int64_t groups = cols / group;
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      fake_quantize_row(w + r * cols, cols, group, clip != nullptr ? clip + r * groups : nullptr,
                        out + r * cols);
  });
}

Result<HessianError> HessianError::make(const float* h, int64_t cols) {
  HessianError e;
  PAGODA_ASSIGN_OR_RETURN(e.h_, cpu::WeightMatrix::from_gguf(DType::kF32, h, cols, cols));
  e.cols_ = cols;
  return e;
}

double HessianError::operator()(const float* e, int64_t rows, ThreadPool& pool,
                                std::vector<double>* per_row) {
  // Row t of E H is H e_t (H symmetric): the GEMM's "tokens" are E's rows.
  y_.resize(static_cast<size_t>(rows * cols_));
  cpu::matmul(h_, e, rows, cols_, y_.data(), cols_, pool, scratch_);
  std::vector<double> local;
  std::vector<double>& terms = per_row != nullptr ? *per_row : local;
  terms.assign(static_cast<size_t>(rows), 0.0);
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* a = e + r * cols_;
      const float* b = y_.data() + r * cols_;
      double s = 0;
      for (int64_t c = 0; c < cols_; ++c) s += static_cast<double>(a[c]) * b[c];
      terms[static_cast<size_t>(r)] = s;
    }
  });
  double total = 0;
  for (double t : terms) total += t;
  return total;
}

std::vector<float> awq_scales(const std::vector<float>& mean_abs, double alpha) {
  std::vector<double> s(mean_abs.size());
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    s[j] = std::max(std::pow(static_cast<double>(mean_abs[j]), alpha), 1e-4);
    lo = std::min(lo, s[j]);
    hi = std::max(hi, s[j]);
  }
  const double norm = std::sqrt(lo * hi);
  std::vector<float> out(s.size());
  for (size_t j = 0; j < s.size(); ++j) {
    const double v = s[j] / norm;
    out[j] = std::isfinite(v) && v > 0 ? static_cast<float>(v) : 1.0f;
  }
  return out;
}

Result<AwqScaleSearch> awq_search_scales(const std::vector<AwqProduct>& products,
                                         const std::vector<float>& h,
                                         const std::vector<float>& mean_abs, int64_t group,
                                         ThreadPool& pool) {
  const int64_t cols = static_cast<int64_t>(mean_abs.size());
  if (cols == 0 || group <= 0 || cols % group != 0 || static_cast<int64_t>(h.size()) != cols * cols)
    return internal_error("awq_search_scales: statistics of the wrong size");
  PAGODA_ASSIGN_OR_RETURN(HessianError err, HessianError::make(h.data(), cols));
  AwqScaleSearch best;
  best.error = std::numeric_limits<double>::infinity();
  std::vector<float> e;
  for (int i = 0; i < kAwqScaleGrid; ++i) {
    const double alpha = static_cast<double>(i) / kAwqScaleGrid;
    std::vector<float> s = awq_scales(mean_abs, alpha);
    double total = 0;
    for (const AwqProduct& p : products) {
      e.resize(static_cast<size_t>(p.rows * cols));
      // E = Q(W diag(s)) diag(s)^-1 - W, row by row.
      pool.parallel_for(p.rows, 16, [&](int64_t r0, int64_t r1) {
        std::vector<float> ws(static_cast<size_t>(cols)), q(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          const float* w = p.w + r * cols;
          for (int64_t c = 0; c < cols; ++c) ws[static_cast<size_t>(c)] = w[c] * s[c];
          fake_quantize_row(ws.data(), cols, group, nullptr, q.data());
          float* er = e.data() + r * cols;
          for (int64_t c = 0; c < cols; ++c) er[c] = q[static_cast<size_t>(c)] / s[c] - w[c];
        }
      });
      total += err(e.data(), p.rows, pool);
    }
    if (i == 0) best.error_rtn = total;
    if (total < best.error) {
      best.error = total;
      best.alpha = alpha;
      best.scales = std::move(s);
    }
  }
  if (best.scales.empty())
    return invalid_argument(
        "the AWQ scale search found no finite output error (the calibration "
        "statistics hold NaN or infinity?)");
  return best;
}

std::vector<float> awq_scale_hessian(const std::vector<float>& h, const std::vector<float>& s) {
  const size_t n = s.size();
  std::vector<float> out(h.size());
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b) out[a * n + b] = h[a * n + b] / (s[a] * s[b]);
  return out;
}

Result<std::vector<float>> awq_search_clip(const float* w, int64_t rows, int64_t cols,
                                           const std::vector<float>& h, int64_t group,
                                           ThreadPool& pool) {
  if (group <= 0 || cols % group != 0 || static_cast<int64_t>(h.size()) != cols * cols)
    return internal_error("awq_search_clip: a Hessian or group of the wrong size");
  const int64_t groups = cols / group;
  std::vector<float> best_c(static_cast<size_t>(rows * groups));
  std::vector<double> best_err(best_c.size(), std::numeric_limits<double>::infinity());
  std::vector<float> hg(static_cast<size_t>(group * group)), e(static_cast<size_t>(rows * group)),
      c(static_cast<size_t>(rows));
  std::vector<double> per_row;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c0 = g * group;
    for (int64_t a = 0; a < group; ++a)
      std::copy_n(h.data() + (c0 + a) * cols + c0, group, hg.data() + a * group);
    PAGODA_ASSIGN_OR_RETURN(HessianError err, HessianError::make(hg.data(), group));
    for (int i = 0; i < kAwqClipSteps; ++i) {
      const float ratio = 1.0f - static_cast<float>(i) / kAwqClipGrid;
      pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* x = w + r * cols + c0;
          float amax = 0;
          for (int64_t k = 0; k < group; ++k) amax = std::max(amax, std::fabs(x[k]));
          const float cr = amax * ratio;
          c[static_cast<size_t>(r)] = cr;
          const AwqGroup p = awq_group_params(x, group, cr);
          float* er = e.data() + r * group;
          for (int64_t k = 0; k < group; ++k)
            er[k] = p.scale * static_cast<float>(awq_code(x[k], cr, p) - p.zero) - x[k];
        }
      });
      err(e.data(), rows, pool, &per_row);
      for (int64_t r = 0; r < rows; ++r) {
        const size_t k = static_cast<size_t>(r * groups + g);
        if (per_row[static_cast<size_t>(r)] < best_err[k]) {
          best_err[k] = per_row[static_cast<size_t>(r)];
          best_c[k] = c[static_cast<size_t>(r)];
        }
      }
    }
  }
  return best_c;
}

AwqTensors awq_pack(const float* w, int64_t rows, int64_t cols, int64_t group, const float* clip,
                    ThreadPool& pool) {
  const int64_t words = rows / 8, groups = cols / group;
  AwqTensors t;
  t.qweight.assign(static_cast<size_t>(cols * words), 0);
  t.qzeros.assign(static_cast<size_t>(groups * words), 0);
  t.scales.resize(static_cast<size_t>(groups * rows));
  // A task owns whole word columns j (outputs 8j .. 8j+7), so no word is shared.
  pool.parallel_for(words, 4, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int k = 0; k < 8; ++k) {
        const int64_t r = 8 * j + k;
        const int shift = 4 * kSlot[k];
        for (int64_t g = 0; g < groups; ++g) {
          const float c = clip != nullptr ? clip[r * groups + g] : kNoClip;
          const float* x = w + r * cols + g * group;
          const AwqGroup p = awq_group_params(x, group, c);
          t.scales[static_cast<size_t>(g * rows + r)] = p.scale_f16;
          auto& z = reinterpret_cast<uint32_t&>(t.qzeros[static_cast<size_t>(g * words + j)]);
          z |= static_cast<uint32_t>(p.zero) << shift;
          for (int64_t i = 0; i < group; ++i) {
            auto& q = reinterpret_cast<uint32_t&>(
                t.qweight[static_cast<size_t>((g * group + i) * words + j)]);
            q |= static_cast<uint32_t>(awq_code(x[i], c, p)) << shift;
          }
        }
      }
  });
  return t;
}

}  // namespace pagoda
