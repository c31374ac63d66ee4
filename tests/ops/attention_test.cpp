// Paged attention against a plain reference on every ISA this machine has, to a tighter
// bound than the op table's (tests/op_table) and with the cache written in pieces as
// earlier steps would: random queries/keys/values, shuffled block tables (so paging is
// really exercised), several sequences per batch, prefill chunks at offsets, GQA groups,
// head sizes that are and are not multiples of 16, block sizes 16 and 32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/kv_storage.h"
#include "op_test_util.h"

namespace pagoda::cpu {
namespace {

using testing::available_isas;
using testing::IsaScope;
using testing::nmse;
using testing::random_floats;

struct Shape {
  int n_heads, n_kv_heads, head_dim, block_size;
};

// The values as a pool holds them: fp16-rounded, or (q8) through llama.cpp's Q8_0 rule
// per 32 values of each token's head vector (quantize_row / dequantize_row).
std::vector<float> as_stored(const Shape& sh, std::vector<float> x, bool q8) {
  if (!q8) {
    for (float& e : x) e = fp16_to_f32(f32_to_fp16(e));
    return x;
  }
  std::vector<uint8_t> blocks(row_bytes(DType::kQ8_0, static_cast<int64_t>(x.size())));
  EXPECT_TRUE(quantize_row(DType::kQ8_0, x.data(), blocks.data(), static_cast<int64_t>(x.size())));
  EXPECT_TRUE(
      dequantize_row(DType::kQ8_0, blocks.data(), x.data(), static_cast<int64_t>(x.size())));
  (void)sh;  // rows are whole head vectors (head_dim a multiple of 32): blocks never straddle
  return x;
}

// Plain causal attention in double over the keys and values as stored.
std::vector<double> reference(const Shape& sh, const std::vector<float>& q,
                              const std::vector<float>& k_in, const std::vector<float>& v_in,
                              int n_past, int n_new, float scale, bool q8) {
  const std::vector<float> k = as_stored(sh, k_in, q8), v = as_stored(sh, v_in, q8);
  const int hd = sh.head_dim, group = sh.n_heads / sh.n_kv_heads, kvd = sh.n_kv_heads * hd;
  std::vector<double> out(static_cast<size_t>(n_new) * sh.n_heads * hd);
  for (int t = 0; t < n_new; ++t) {
    const int pos = n_past + t;
    for (int h = 0; h < sh.n_heads; ++h) {
      const int g = h / group;
      std::vector<double> s(static_cast<size_t>(pos + 1));
      double mx = -1e300;
      for (int j = 0; j <= pos; ++j) {
        double d = 0;
        for (int e = 0; e < hd; ++e)
          d += static_cast<double>(q[(static_cast<size_t>(t) * sh.n_heads + h) * hd + e]) *
               k[static_cast<size_t>(j) * kvd + g * hd + e];
        s[static_cast<size_t>(j)] = d * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int e = 0; e < hd; ++e) {
        double acc = 0;
        for (int j = 0; j <= pos; ++j)
          acc += s[static_cast<size_t>(j)] / z * v[static_cast<size_t>(j) * kvd + g * hd + e];
        out[(static_cast<size_t>(t) * sh.n_heads + h) * hd + e] = acc;
      }
    }
  }
  return out;
}

// Two sequences over one pool (16-bit, or 8-bit when q8) against the plain reference.
void check_attention(const Shape& sh, bool q8) {
  std::mt19937 rng(1234 + sh.head_dim + sh.block_size);
  const int hd = sh.head_dim, kvd = sh.n_kv_heads * hd, qd = sh.n_heads * hd;
  const int n_blocks = 64;
  ThreadPool pool(3);
  // Two sequences sharing the pool: A runs a prefill chunk after 37 cached tokens, B a
  // single decode step after 70. Their blocks are interleaved and shuffled.
  struct Seq {
    int n_past, n_new;
  };
  const Seq seqs[2] = {{37, 29}, {70, 1}};
  std::vector<int32_t> ids(n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(2);
  for (int i = 0; i < 2; ++i) {
    const int need = (seqs[i].n_past + seqs[i].n_new + sh.block_size - 1) / sh.block_size;
    tables[i].assign(ids.begin() + i * 16, ids.begin() + i * 16 + need);
  }
  for (Isa isa : available_isas()) {
    IsaScope scope(isa);
    const size_t elems = static_cast<size_t>(n_blocks) * sh.block_size * kvd;
    std::vector<uint16_t> kc(elems, 0x7e00), vc(elems, 0x7e00);  // NaN
    std::vector<int8_t> k8(elems, -128), v8(elems, -128);
    std::vector<uint16_t> ks(elems / 32, 0x7e00), vs(elems / 32, 0x7e00);
    KvLayer kv{kc.data(), vc.data(), sh.block_size, sh.n_kv_heads, hd};
    if (q8)
      kv = KvLayer{nullptr,   nullptr,   sh.block_size, sh.n_kv_heads, hd,
                   k8.data(), v8.data(), ks.data(),     vs.data()};
    std::vector<std::vector<float>> keys(2), vals(2), qs(2);
    std::vector<BatchSeq> batch;
    int row = 0;
    for (int i = 0; i < 2; ++i) {
      const int total = seqs[i].n_past + seqs[i].n_new;
      keys[i] = random_floats(rng, static_cast<size_t>(total) * kvd);
      vals[i] = random_floats(rng, static_cast<size_t>(total) * kvd);
      qs[i] = random_floats(rng, static_cast<size_t>(seqs[i].n_new) * qd, 0.5f);
      // The cached prefix is written as earlier steps would have, in two pieces.
      for (auto [p0, n] : {std::pair{0, seqs[i].n_past / 2},
                           std::pair{seqs[i].n_past / 2, seqs[i].n_past - seqs[i].n_past / 2},
                           std::pair{seqs[i].n_past, seqs[i].n_new}}) {
        BatchSeq s{0, n, p0, tables[i].data()};
        kv_write(kv, s, keys[i].data() + static_cast<size_t>(p0) * kvd,
                 vals[i].data() + static_cast<size_t>(p0) * kvd, kvd);
      }
      batch.push_back({row, seqs[i].n_new, seqs[i].n_past, tables[i].data()});
      row += seqs[i].n_new;
    }
    std::vector<float> q(static_cast<size_t>(row) * qd);
    std::copy(qs[0].begin(), qs[0].end(), q.begin());
    std::copy(qs[1].begin(), qs[1].end(), q.begin() + static_cast<std::ptrdiff_t>(qs[0].size()));
    std::vector<float> out(q.size(), NAN);
    AttentionParams p{sh.n_heads, 1.0f / std::sqrt(static_cast<float>(hd))};
    attention(kv, batch.data(), 2, p, q.data(), qd, out.data(), qd, pool);
    for (int i = 0; i < 2; ++i) {
      const auto ref =
          reference(sh, qs[i], keys[i], vals[i], seqs[i].n_past, seqs[i].n_new, p.scale, q8);
      const float* got = out.data() + static_cast<size_t>(batch[static_cast<size_t>(i)].q_row) * qd;
      // The kernel rounds q and the softmax weights to fp16 (as llama.cpp does), a
      // relative error of up to 2^-11 per operand: nmse ~1e-7. A wrong key, block or
      // mask shows as 1e-2 or worse.
      EXPECT_LT(nmse(got, ref.data(), ref.size()), 2e-6)
          << "isa " << isa_name(isa) << " seq " << i << " hd " << hd << " bs " << sh.block_size
          << (q8 ? " (8-bit pool)" : "");
    }
  }
}

class AttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionTest, MatchesPlainAttentionOnEveryIsa) {
  check_attention(GetParam(), false);
}

// The 8-bit pool (llama.cpp's q8_0 cache) against attention over the values it holds:
// the same bound, so its keys, values and scales are all where the kernel reads them;
// a block of 512 tokens crosses the kernel's 256-slot scale chunks.
TEST(AttentionQ8, MatchesPlainAttentionOverItsValuesOnEveryIsa) {
  for (const Shape& sh : {Shape{9, 3, 64, 16}, Shape{8, 2, 128, 32}, Shape{4, 2, 64, 512}})
    check_attention(sh, true);
}

// Copy-on-write of an 8-bit pool's block carries its values and scales: the copy, read
// through another block table, attends exactly as the original.
TEST(AttentionQ8, CopiedBlocksAttendAsTheOriginal) {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.dim = 256;
  KvStorage kv(c, 8, 16, true);
  std::mt19937 rng(5);
  const int kvd = c.n_kv_heads * c.head_dim, qd = c.n_heads * c.head_dim;
  const std::vector<int32_t> table = {2, 5}, copied = {7, 5};
  const auto k = random_floats(rng, 20 * static_cast<size_t>(kvd));
  const auto v = random_floats(rng, 20 * static_cast<size_t>(kvd));
  const auto q = random_floats(rng, static_cast<size_t>(qd));
  ThreadPool pool(2);
  const AttentionParams p{c.n_heads, 0.125f};
  for (int l = 0; l < c.n_layers; ++l)
    kv_write(kv.layer(l), {0, 20, 0, table.data()}, k.data(), v.data(), kvd);
  kv.copy_block(2, 7);
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<float> a(static_cast<size_t>(qd)), b(a.size());
    const BatchSeq sa{0, 1, 19, table.data()}, sb{0, 1, 19, copied.data()};
    attention(kv.layer(l), &sa, 1, p, q.data(), qd, a.data(), qd, pool);
    attention(kv.layer(l), &sb, 1, p, q.data(), qd, b.data(), qd, pool);
    EXPECT_EQ(a, b) << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Shape{9, 3, 64, 16}, Shape{4, 4, 8, 16},
                                           Shape{8, 2, 128, 32}, Shape{6, 1, 40, 16},
                                           Shape{2, 2, 80, 32}));

// rms_norm, silu_mul and rope meet the op table on every ISA (tests/op_table, the
// cpu_* backends); add_inplace is exact.
TEST(Ops, AddInplaceIsExactOnEveryIsa) {
  std::mt19937 rng(7);
  for (int n : {1, 15, 16, 17, 576, 1000}) {
    const auto x = random_floats(rng, static_cast<size_t>(n), 3.0f);
    const auto w = random_floats(rng, static_cast<size_t>(n));
    for (Isa isa : available_isas()) {
      IsaScope scope(isa);
      std::vector<float> y = w;
      add_inplace(y.data(), x.data(), n);
      for (int i = 0; i < n; ++i)
        EXPECT_EQ(y[static_cast<size_t>(i)], w[static_cast<size_t>(i)] + x[static_cast<size_t>(i)])
            << isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu
