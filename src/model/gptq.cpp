#include "model/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.h"

namespace pagoda {
namespace {

double dot(const double* a, const double* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// U upper triangular with U^T U = A^-1 (torch's cholesky(cholesky_inverse(cholesky(A)),
// upper=True)), from one Cholesky and one triangular inverse: with J the reversal, if
// J A J = L L^T then A = R R^T for the upper R = J L J, so A^-1 = R^-T R^-1 and U = R^-1 =
// J L^-1 J. `a` is overwritten.
Status inverse_cholesky_upper(std::vector<double>& a, int64_t n, ThreadPool& pool,
                              std::vector<float>* u) {
  std::vector<double> l(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j)
      l[static_cast<size_t>(i * n + j)] = a[static_cast<size_t>((n - 1 - i) * n + (n - 1 - j))];
  for (int64_t j = 0; j < n; ++j) {
    double* lj = l.data() + j * n;
    const double s = lj[j] - dot(lj, lj, j);
    if (!(s > 0.0))
      return invalid_argument(
          "the Hessian is not positive definite (too few calibration tokens for this layer's "
          "inputs?)");
    lj[j] = std::sqrt(s);
    const double inv = 1.0 / lj[j];
    pool.parallel_for(n - j - 1, 64, [&](int64_t b, int64_t e) {
      for (int64_t i = j + 1 + b; i < j + 1 + e; ++i) {
        double* li = l.data() + i * n;
        li[j] = (li[j] - dot(li, lj, j)) * inv;
      }
    });
  }
  // Column k of L^-1 by forward substitution, written reversed into U.
  u->assign(static_cast<size_t>(n * n), 0.0f);
  pool.parallel_for(n, 8, [&](int64_t k0, int64_t k1) {
    std::vector<double> x(static_cast<size_t>(n));
    for (int64_t k = k0; k < k1; ++k) {
      x[static_cast<size_t>(k)] = 1.0 / l[static_cast<size_t>(k * n + k)];
      for (int64_t i = k + 1; i < n; ++i) {
        const double* li = l.data() + i * n;
        x[static_cast<size_t>(i)] = -dot(li + k, x.data() + k, i - k) / li[i];
      }
      for (int64_t i = k; i < n; ++i)
        (*u)[static_cast<size_t>((n - 1 - i) * n + (n - 1 - k))] =
            static_cast<float>(x[static_cast<size_t>(i)]);
    }
  });
  a.clear();
  return Status::ok();
}

struct GroupParams {
  float scale;
  uint16_t scale_f16;
  int zero;
};

// The header's quantizer over one row's group of n current weights.
GroupParams find_params(const float* x, int64_t n, bool sym, int maxq) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  if (sym) {
    hi = std::max(-lo, hi);
    lo = -hi;
  }
  if (lo == 0.0f && hi == 0.0f) lo = -1.0f, hi = 1.0f;
  float scale = (hi - lo) / static_cast<float>(maxq);
  int zero = (maxq + 1) / 2;
  if (!sym) {
    zero = static_cast<int>(std::nearbyint(-lo / scale));
    if (zero < 1) {  // v1 stores zero - 1: keep it >= 0
      zero = 1;
      scale = hi / static_cast<float>(maxq - 1);
    }
  }
  GroupParams p;
  p.scale_f16 = f32_to_fp16(std::min(scale, 65504.0f));
  if ((p.scale_f16 & 0x7fff) == 0) p.scale_f16 = 1;  // smallest f16 above 0
  p.scale = fp16_to_f32(p.scale_f16);
  if (!sym && zero > 1) zero = std::clamp(static_cast<int>(std::nearbyint(-lo / p.scale)), 1, maxq);
  p.zero = zero;
  return p;
}

}  // namespace

Result<GptqTensors> gptq_quantize(const std::vector<float>& w, int64_t rows, int64_t cols,
                                  const std::vector<float>& h, const GptqOptions& o,
                                  ThreadPool& pool) {
  if (o.bits != 4 && o.bits != 8)
    return unsupported("GPTQ writes 4- or 8-bit weights, not " + std::to_string(o.bits));
  const int pack = 32 / o.bits, maxq = (1 << o.bits) - 1;
  if (cols % pack != 0 || rows % pack != 0)
    return unsupported(
        str_format("GPTQ packs %d weights per int32: a [%lld, %lld] weight is not "
                   "whole words",
                   pack, static_cast<long long>(rows), static_cast<long long>(cols)));
  if (static_cast<int64_t>(w.size()) != rows * cols ||
      static_cast<int64_t>(h.size()) != cols * cols)
    return internal_error("gptq_quantize: weight or Hessian of the wrong size");
  const int64_t g = o.group_size <= 0 || o.group_size >= cols ? cols : o.group_size;
  const int64_t n_groups = (cols + g - 1) / g;
  const int64_t block = std::max(1, o.block);

  // Dead inputs (never nonzero) get weight 0 and a unit diagonal, as the reference does.
  std::vector<char> dead(static_cast<size_t>(cols));
  std::vector<double> diag(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) {
    diag[static_cast<size_t>(i)] = h[static_cast<size_t>(i * cols + i)];
    dead[static_cast<size_t>(i)] = diag[static_cast<size_t>(i)] == 0.0;
    if (dead[static_cast<size_t>(i)]) diag[static_cast<size_t>(i)] = 1.0;
  }
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (o.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return diag[static_cast<size_t>(a)] > diag[static_cast<size_t>(b)];
    });
  const double mean_diag =
      std::accumulate(diag.begin(), diag.end(), 0.0) / static_cast<double>(cols);
  std::vector<double> hp(static_cast<size_t>(cols * cols));
  for (int64_t a = 0; a < cols; ++a) {
    const int64_t pa = perm[static_cast<size_t>(a)];
    for (int64_t b = 0; b < cols; ++b)
      hp[static_cast<size_t>(a * cols + b)] =
          a == b ? diag[static_cast<size_t>(pa)] + o.damp * mean_diag
                 : h[static_cast<size_t>(pa * cols + perm[static_cast<size_t>(b)])];
  }
  std::vector<float> u;
  PAGODA_RETURN_IF_ERROR(inverse_cholesky_upper(hp, cols, pool, &u));

  // Rows are independent given U; a tile of rows shares each row of U while it is cached.
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));  // in permuted column order
  std::vector<GroupParams> params(static_cast<size_t>(rows * n_groups));
  if (o.static_groups)
    pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
      std::vector<float> x(static_cast<size_t>(g));
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t gr = 0; gr < n_groups; ++gr) {
          const int64_t c0 = gr * g, n = std::min(g, cols - c0);
          for (int64_t k = 0; k < n; ++k)
            x[static_cast<size_t>(k)] = dead[static_cast<size_t>(c0 + k)]
                                            ? 0.0f
                                            : w[static_cast<size_t>(r * cols + c0 + k)];
          params[static_cast<size_t>(r * n_groups + gr)] = find_params(x.data(), n, o.sym, maxq);
        }
    });
  constexpr int64_t kTile = 8;
  pool.parallel_for(rows, kTile, [&](int64_t r0, int64_t r1) {
    const int64_t nr = r1 - r0;
    std::vector<float> wt(static_cast<size_t>(nr * cols)), err(static_cast<size_t>(nr * block));
    std::vector<GroupParams> cur(static_cast<size_t>(nr));
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const int64_t c = perm[static_cast<size_t>(k)];
        wt[static_cast<size_t>(r * cols + k)] =
            dead[static_cast<size_t>(c)] ? 0.0f : w[static_cast<size_t>((r0 + r) * cols + c)];
      }
    for (int64_t i1 = 0; i1 < cols; i1 += block) {
      const int64_t i2 = std::min(i1 + block, cols);
      for (int64_t i = i1; i < i2; ++i) {
        const float* ui = u.data() + i * cols;
        const float d = ui[i];
        for (int64_t r = 0; r < nr; ++r) {
          float* wr = wt.data() + r * cols;
          GroupParams& p = cur[static_cast<size_t>(r)];
          if (o.static_groups) {
            p = params[static_cast<size_t>((r0 + r) * n_groups + perm[static_cast<size_t>(i)] / g)];
          } else if (i % g == 0) {
            p = find_params(wr + i, std::min(g, cols - i), o.sym, maxq);
            params[static_cast<size_t>((r0 + r) * n_groups + i / g)] = p;
          }
          const int q =
              std::clamp(static_cast<int>(std::nearbyint(wr[i] / p.scale)) + p.zero, 0, maxq);
          codes[static_cast<size_t>((r0 + r) * cols + i)] = static_cast<uint8_t>(q);
          const float e = (wr[i] - p.scale * static_cast<float>(q - p.zero)) / d;
          err[static_cast<size_t>(r * block + (i - i1))] = e;
          for (int64_t j = i + 1; j < i2; ++j) wr[j] -= e * ui[j];
        }
      }
      // The block's errors onto the columns after it.
      for (int64_t k = i1; k < i2; ++k) {
        const float* uk = u.data() + k * cols;
        for (int64_t r = 0; r < nr; ++r) {
          const float e = err[static_cast<size_t>(r * block + (k - i1))];
          float* wr = wt.data() + r * cols;
          for (int64_t j = i2; j < cols; ++j) wr[j] -= e * uk[j];
        }
      }
    }
  });

  GptqTensors t;
  t.n_groups = n_groups;
  t.g_idx.resize(static_cast<size_t>(cols));
  std::vector<int64_t> pos(static_cast<size_t>(cols));  // column -> permuted position
  for (int64_t k = 0; k < cols; ++k) {
    pos[static_cast<size_t>(perm[static_cast<size_t>(k)])] = k;
    const int64_t c = perm[static_cast<size_t>(k)];
    t.g_idx[static_cast<size_t>(c)] = static_cast<int32_t>((o.static_groups ? c : k) / g);
  }
  t.qweight.assign(static_cast<size_t>(cols / pack * rows), 0);
  pool.parallel_for(cols / pack, 16, [&](int64_t w0, int64_t w1) {
    for (int64_t wi = w0; wi < w1; ++wi)
      for (int64_t r = 0; r < rows; ++r) {
        uint32_t word = 0;
        for (int j = 0; j < pack; ++j) {
          const int64_t c = wi * pack + j;
          word |= static_cast<uint32_t>(
                      codes[static_cast<size_t>(r * cols + pos[static_cast<size_t>(c)])])
                  << (o.bits * j);
        }
        t.qweight[static_cast<size_t>(wi * rows + r)] = static_cast<int32_t>(word);
      }
  });
  t.qzeros.assign(static_cast<size_t>(n_groups * (rows / pack)), 0);
  t.scales.resize(static_cast<size_t>(n_groups * rows));
  for (int64_t gr = 0; gr < n_groups; ++gr)
    for (int64_t r = 0; r < rows; ++r) {
      const GroupParams& p = params[static_cast<size_t>(r * n_groups + gr)];
      t.scales[static_cast<size_t>(gr * rows + r)] = p.scale_f16;
      uint32_t& word =
          reinterpret_cast<uint32_t&>(t.qzeros[static_cast<size_t>(gr * (rows / pack) + r / pack)]);
      word |= static_cast<uint32_t>((p.zero - 1) & maxq) << (o.bits * (r % pack));
    }
  return t;
}

}  // namespace pagoda
