// RoPE + KV store and paged attention on the GPU against the CPU's rope() and
// attention(): shuffled block tables shared by several sequences, decode rows and
// prefill chunks at offsets, GQA groups, head sizes with and without a tensor-core
// kernel, forced KV splits, fp16 and FP8 E4M3 pools (FP8 values from CUDA's own host
// conversion, cuda_fp8.h, with scales that are not 1).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "harness.h"

namespace pagoda::cuda::testing {
namespace {

class CudaAttention : public CudaTest {};

struct SeqSpec {
  int pos0, n_q;
};

constexpr uint8_t kFp8Nan = 0x7f;
// Scales of the FP8 cases: powers of two, so x / scale and back are exact on both sides.
constexpr float kFp8KScale = 0.5f, kFp8VScale = 2.0f;
// Which decode kernel the cases run (set_decode_tensor_cores), for their names.
bool g_decode_mma = true;

// Host copy of a batch and its device arrays.
struct TestBatch {
  std::vector<BatchSeq> seqs;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> row_seq, row_pos, q_row, n_q, pos0, boff, blocks;
  DeviceBuffer d_row_seq, d_row_pos, d_q_row, d_n_q, d_pos0, d_boff, d_blocks;
  DeviceBatch db;
  int n_rows = 0;
};

TestBatch make_batch(std::mt19937& rng, const std::vector<SeqSpec>& specs, int block_size,
                     int n_blocks) {
  TestBatch t;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const int need = (specs[s].pos0 + specs[s].n_q + block_size - 1) / block_size;
    t.tables.emplace_back(ids.begin() + static_cast<long>(next),
                          ids.begin() + static_cast<long>(next + need));
    next += static_cast<size_t>(need);
    if (next > ids.size()) ADD_FAILURE() << "test pool too small";
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    BatchSeq q;
    q.q_row = t.n_rows;
    q.n_q = specs[s].n_q;
    q.pos0 = specs[s].pos0;
    q.blocks = t.tables[s].data();
    t.seqs.push_back(q);
    t.q_row.push_back(q.q_row);
    t.n_q.push_back(q.n_q);
    t.pos0.push_back(q.pos0);
    t.boff.push_back(static_cast<int32_t>(t.blocks.size()));
    t.blocks.insert(t.blocks.end(), t.tables[s].begin(), t.tables[s].end());
    for (int i = 0; i < q.n_q; ++i) {
      t.row_seq.push_back(static_cast<int32_t>(s));
      t.row_pos.push_back(q.pos0 + i);
    }
    t.n_rows += q.n_q;
  }
  t.d_row_seq = to_device(t.row_seq);
  t.d_row_pos = to_device(t.row_pos);
  t.d_q_row = to_device(t.q_row);
  t.d_n_q = to_device(t.n_q);
  t.d_pos0 = to_device(t.pos0);
  t.d_boff = to_device(t.boff);
  t.d_blocks = to_device(t.blocks);
  t.db.n_rows = t.n_rows;
  t.db.n_seqs = static_cast<int>(specs.size());
  t.db.row_seq = t.d_row_seq.as<int32_t>();
  t.db.row_pos = t.d_row_pos.as<int32_t>();
  t.db.seq_q_row = t.d_q_row.as<int32_t>();
  t.db.seq_n_q = t.d_n_q.as<int32_t>();
  t.db.seq_pos0 = t.d_pos0.as<int32_t>();
  t.db.seq_blocks_off = t.d_boff.as<int32_t>();
  t.db.blocks = t.d_blocks.as<int32_t>();
  return t;
}

struct RopeCase {
  bool neox, bias, factors;
  int rope_dims;  // < head_dim: partial rotation
};

TEST_F(CudaAttention, rope_qkv_store_matches_cpu) {
  std::mt19937 rng(10);
  const int n_heads = 4, n_kv = 2, hd = 64, bs = 16, n_blocks = 40;
  const int qd = n_heads * hd, kvd = n_kv * hd, width = qd + 2 * kvd;
  for (const RopeCase rc : {RopeCase{false, false, false, 64}, RopeCase{true, true, false, 64},
                            RopeCase{false, false, true, 64}, RopeCase{true, false, false, 32}}) {
    TestBatch tb = make_batch(rng, {{0, 5}, {1000, 1}, {77, 30}}, bs, n_blocks + 60);
    const int n = tb.n_rows;
    const auto qkv = random_floats(rng, static_cast<size_t>(n) * width);
    const auto bias = random_floats(rng, static_cast<size_t>(width), 0.5f);
    std::vector<float> factors(static_cast<size_t>(rc.rope_dims / 2));
    for (float& f : factors) f = 1.0f + static_cast<float>(rng() % 7);
    RopeParams p;
    p.n_heads = n_heads;
    p.n_kv_heads = n_kv;
    p.head_dim = hd;
    p.n_pairs = rc.rope_dims / 2;
    p.neox = rc.neox;
    const float theta = 500000.0f;
    p.theta_scale = std::pow(theta, -2.0f / static_cast<float>(rc.rope_dims));
    p.freq_scale = 0.5f;
    DeviceBuffer dfac = to_device(factors);
    p.freq_factors = rc.factors ? dfac.as<float>() : nullptr;
    DeviceBuffer dqkv = to_device(qkv), dbias = to_device(bias);
    const size_t pool = static_cast<size_t>(n_blocks + 60) * bs * kvd;
    DeviceBuffer kc = poisoned(pool * 2), vc = poisoned(pool * 2),
                 q16 = poisoned(static_cast<size_t>(n) * qd * 2);
    KvLayerView kv{kc.as<uint16_t>(), vc.as<uint16_t>(), bs, n_kv, hd};
    DeviceBuffer cs = poisoned(static_cast<size_t>(n) * p.n_pairs * 2 * 4);
    EXPECT_OK(rope_tables(p, tb.db, cs.as<float>(), nullptr));
    EXPECT_OK(rope_qkv_store(dqkv.as<float>(), rc.bias ? dbias.as<float>() : nullptr, p,
                             cs.as<float>(), tb.db, q16.as<uint16_t>(), kv, nullptr));
    const auto q_got = to_host<uint16_t>(q16, static_cast<size_t>(n) * qd);
    const auto k_all = to_host<uint16_t>(kc, pool), v_all = to_host<uint16_t>(vc, pool);
    // Reference: the CPU's ops with the angles Model::compute_rope_tables computes.
    std::vector<float> q_ref, q_out, k_ref, k_out, v_ref, v_out;
    for (int r = 0; r < n; ++r) {
      std::vector<float> row(qkv.begin() + static_cast<long>(r) * width,
                             qkv.begin() + static_cast<long>(r + 1) * width);
      if (rc.bias) cpu::add_inplace(row.data(), bias.data(), width);
      std::vector<float> cs(static_cast<size_t>(p.n_pairs)), sn(cs.size());
      float th = static_cast<float>(tb.row_pos[static_cast<size_t>(r)]);
      for (int i = 0; i < p.n_pairs; ++i) {
        float angle = th;
        if (rc.factors) angle /= factors[static_cast<size_t>(i)];
        angle *= p.freq_scale;
        cs[static_cast<size_t>(i)] = std::cos(angle);
        sn[static_cast<size_t>(i)] = std::sin(angle);
        th *= p.theta_scale;
      }
      cpu::rope(row.data(), n_heads, hd, p.n_pairs, cs.data(), sn.data(), rc.neox);
      cpu::rope(row.data() + qd, n_kv, hd, p.n_pairs, cs.data(), sn.data(), rc.neox);
      for (int i = 0; i < qd; ++i) {
        q_ref.push_back(fp16_to_f32(f32_to_fp16(row[static_cast<size_t>(i)])));
        q_out.push_back(fp16_to_f32(q_got[static_cast<size_t>(r) * qd + static_cast<size_t>(i)]));
      }
      const int pos = tb.row_pos[static_cast<size_t>(r)];
      const int seq = tb.row_seq[static_cast<size_t>(r)];
      const int32_t blk = tb.tables[static_cast<size_t>(seq)][static_cast<size_t>(pos / bs)];
      for (int g = 0; g < n_kv; ++g)
        for (int d = 0; d < hd; ++d) {
          const size_t off = ((static_cast<size_t>(blk) * n_kv + g) * bs + pos % bs) * hd + d;
          k_ref.push_back(fp16_to_f32(f32_to_fp16(row[static_cast<size_t>(qd + g * hd + d)])));
          v_ref.push_back(
              fp16_to_f32(f32_to_fp16(row[static_cast<size_t>(qd + kvd + g * hd + d)])));
          k_out.push_back(fp16_to_f32(k_all[off]));
          v_out.push_back(fp16_to_f32(v_all[off]));
        }
    }
    const std::string name =
        str_format("rope %s%s%s dims %d", rc.neox ? "neox" : "normal", rc.bias ? " bias" : "",
                   rc.factors ? " factors" : "", rc.rope_dims);
    // CUDA's sincosf is within 2 ulp of the C library's: a few fp16 roundings may differ.
    EXPECT_NMSE(name + ": q", q_out.data(), q_ref.data(), q_ref.size(), 1e-8);
    EXPECT_NMSE(name + ": k cache", k_out.data(), k_ref.data(), k_ref.size(), 1e-8);
    EXPECT_NMSE(name + ": v cache", v_out.data(), v_ref.data(), v_ref.size(), 0.0);

    // The same rows into an FP8 pool: each slot holds fp8(x / scale). The reference is
    // the fp16 reference's value (within an fp16 rounding of the exact one) through
    // cuda_fp8.h; a value within that rounding of an FP8 midpoint may round the other
    // way, so a few slots may differ by one FP8 step.
    DeviceBuffer k8 = to_device(std::vector<uint8_t>(pool, kFp8Nan)),
                 v8 = to_device(std::vector<uint8_t>(pool, kFp8Nan));
    KvLayerView kv8{k8.get(), v8.get(), bs, n_kv, hd, KvType::kFp8E4M3, kFp8KScale, kFp8VScale};
    EXPECT_OK(rope_qkv_store(dqkv.as<float>(), rc.bias ? dbias.as<float>() : nullptr, p,
                             cs.as<float>(), tb.db, q16.as<uint16_t>(), kv8, nullptr));
    const auto k8_all = to_host<uint8_t>(k8, pool), v8_all = to_host<uint8_t>(v8, pool);
    std::vector<float> k8_ref, k8_out, v8_ref, v8_out;
    size_t i = 0;
    for (int r = 0; r < n; ++r) {
      const int pos = tb.row_pos[static_cast<size_t>(r)];
      const int seq = tb.row_seq[static_cast<size_t>(r)];
      const int32_t blk = tb.tables[static_cast<size_t>(seq)][static_cast<size_t>(pos / bs)];
      for (int g = 0; g < n_kv; ++g)
        for (int d = 0; d < hd; ++d, ++i) {
          const size_t off = ((static_cast<size_t>(blk) * n_kv + g) * bs + pos % bs) * hd + d;
          k8_ref.push_back(from_fp8(to_fp8(k_ref[i] / kFp8KScale)) * kFp8KScale);
          v8_ref.push_back(from_fp8(to_fp8(v_ref[i] / kFp8VScale)) * kFp8VScale);
          k8_out.push_back(from_fp8(k8_all[off]) * kFp8KScale);
          v8_out.push_back(from_fp8(v8_all[off]) * kFp8VScale);
        }
    }
    EXPECT_NMSE(name + ": k fp8 cache", k8_out.data(), k8_ref.data(), k8_ref.size(), 1e-4);
    EXPECT_NMSE(name + ": v fp8 cache", v8_out.data(), v8_ref.data(), v8_ref.size(), 1e-4);
  }
}

struct AttnCase {
  int n_heads, n_kv, hd;
  std::vector<SeqSpec> seqs;
  bool prefill_kernel;  // long sequences to the tensor-core kernel
  int splits;           // 0: auto
  ActType out;
  bool fp8 = false;  // FP8 E4M3 pool with kFp8KScale / kFp8VScale
  int bs = 16;       // tokens a KV block (--block-size)
};

void run_attention_case(const AttnCase& ac, std::mt19937& rng, ThreadPool& pool) {
  const int bs = ac.bs, hd = ac.hd;
  int total_blocks = 0;
  for (const SeqSpec& s : ac.seqs) total_blocks += (s.pos0 + s.n_q + bs - 1) / bs;
  total_blocks += 7;
  TestBatch tb = make_batch(rng, ac.seqs, bs, total_blocks);
  const int n = tb.n_rows, qd = ac.n_heads * hd, kvd = ac.n_kv * hd;
  // Queries rounded to fp16 (the GPU's operand); K and V for every cached position.
  auto q = random_floats(rng, static_cast<size_t>(n) * qd, 2.0f);
  for (float& v : q) v = fp16_to_f32(f32_to_fp16(v));
  std::vector<uint16_t> q16(q.size());
  for (size_t i = 0; i < q.size(); ++i) q16[i] = f32_to_fp16(q[i]);
  const size_t pool_elems = static_cast<size_t>(total_blocks) * bs * kvd;
  std::vector<uint16_t> kc_cpu(pool_elems), vc_cpu(pool_elems), kc_gpu(pool_elems, 0x7e00),
      vc_gpu(pool_elems, 0x7e00);  // NaN in every slot no sequence owns
  std::vector<uint8_t> kc_fp8(pool_elems, kFp8Nan), vc_fp8(pool_elems, kFp8Nan);
  cpu::KvLayer kl{kc_cpu.data(), vc_cpu.data(), bs, ac.n_kv, hd};
  for (size_t s = 0; s < ac.seqs.size(); ++s) {
    const int len = ac.seqs[s].pos0 + ac.seqs[s].n_q;
    auto k = random_floats(rng, static_cast<size_t>(len) * kvd);
    auto v = random_floats(rng, static_cast<size_t>(len) * kvd);
    if (ac.fp8) {
      // The CPU reference attends over the values the FP8 pool represents (exact in fp16).
      for (float& x : k) x = from_fp8(to_fp8(x / kFp8KScale)) * kFp8KScale;
      for (float& x : v) x = from_fp8(to_fp8(x / kFp8VScale)) * kFp8VScale;
    }
    BatchSeq all = tb.seqs[s];
    all.pos0 = 0;
    all.n_q = len;
    cpu::kv_write(kl, all, k.data(), v.data(), kvd);
    for (int pos = 0; pos < len; ++pos) {
      const int32_t blk = tb.tables[s][static_cast<size_t>(pos / bs)];
      for (int g = 0; g < ac.n_kv; ++g)
        for (int d = 0; d < hd; ++d) {
          const size_t off = ((static_cast<size_t>(blk) * ac.n_kv + g) * bs + pos % bs) * hd + d;
          const float kx = k[static_cast<size_t>(pos) * kvd + g * hd + d];
          const float vx = v[static_cast<size_t>(pos) * kvd + g * hd + d];
          kc_gpu[off] = f32_to_fp16(kx);
          vc_gpu[off] = f32_to_fp16(vx);
          kc_fp8[off] = to_fp8(kx / kFp8KScale);
          vc_fp8[off] = to_fp8(vx / kFp8VScale);
        }
    }
  }
  cpu::AttentionParams ap;
  ap.n_heads = ac.n_heads;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> ref(static_cast<size_t>(n) * qd);
  cpu::attention(kl, tb.seqs.data(), static_cast<int>(tb.seqs.size()), ap, q.data(), qd, ref.data(),
                 qd, pool);

  std::vector<int32_t> decode_rows, prefill_seqs;
  AttentionPlan plan;
  for (size_t s = 0; s < ac.seqs.size(); ++s) {
    if (ac.prefill_kernel && ac.seqs[s].n_q > kDecodeMaxQueries) {
      prefill_seqs.push_back(static_cast<int32_t>(s));
      plan.max_prefill_q = std::max(plan.max_prefill_q, ac.seqs[s].n_q);
    } else {
      for (int t = 0; t < ac.seqs[s].n_q; ++t) decode_rows.push_back(tb.q_row[s] + t);
    }
  }
  DeviceBuffer ddr = to_device(decode_rows), dps = to_device(prefill_seqs);
  DeviceBuffer dq = to_device(q16);
  DeviceBuffer dk = ac.fp8 ? to_device(kc_fp8) : to_device(kc_gpu);
  DeviceBuffer dv = ac.fp8 ? to_device(vc_fp8) : to_device(vc_gpu);
  const size_t ws_bytes = static_cast<size_t>(std::max<size_t>(1, decode_rows.size())) *
                          ac.n_heads * std::max(ac.splits, 32) * (hd + 2) * 4;
  DeviceBuffer ws = poisoned(ws_bytes);
  plan.decode_rows = ddr.as<int32_t>();
  plan.n_decode_rows = static_cast<int>(decode_rows.size());
  plan.n_splits = ac.splits;
  plan.prefill_seqs = dps.as<int32_t>();
  plan.n_prefill_seqs = static_cast<int>(prefill_seqs.size());
  plan.workspace = ws.get();
  plan.workspace_bytes = ws_bytes;
  DeviceBuffer out = poisoned(static_cast<size_t>(n) * qd * act_bytes(ac.out));
  KvLayerView kv{dk.get(), dv.get(), bs, ac.n_kv, hd};
  if (ac.fp8) {
    kv.type = KvType::kFp8E4M3;
    kv.k_scale = kFp8KScale;
    kv.v_scale = kFp8VScale;
  }
  EXPECT_OK(attention(dq.as<uint16_t>(), kv, tb.db, plan, ac.n_heads, ap.scale, out.get(), ac.out,
                      nullptr));
  const auto got = decode_act(to_host<uint8_t>(out, out.bytes()), ac.out);
  std::string seqs;
  for (const SeqSpec& s : ac.seqs) seqs += str_format(" %d+%d", s.pos0, s.n_q);
  // fp16 operands on both sides; the CPU rounds normalised softmax weights to fp16, the
  // tensor-core kernel unnormalised ones, the decode kernel none: differences ~1e-7.
  const double bound = ac.out == ActType::kBF16 ? 5e-5 : 1e-5;
  EXPECT_NMSE(str_format("attention h%d/kv%d d%d %s splits %d %s%s bs %d:%s", ac.n_heads, ac.n_kv,
                         hd, ac.prefill_kernel ? "tc" : "rows", ac.splits, act_name(ac.out),
                         ac.fp8 ? " fp8 kv" : "", bs, seqs.c_str()),
              got.data(), ref.data(), ref.size(), bound);
}

// One Llama-3.1-8B row (32 query, 8 KV heads) at the splits its context gets under
// the default PAGODA_CUDA_SPLIT_KEYS=256.
void run_context_splits(int hd, bool fp8, std::mt19937& rng, ThreadPool& pool) {
  for (int ctx : {1, 100, 700, 4000}) {
    const int splits = decode_splits_for_context(1, 8, ctx, 256);
    run_attention_case({32, 8, hd, {{ctx - 1, 1}}, false, splits, ActType::kBF16, fp8}, rng, pool);
  }
}

TEST_F(CudaAttention, decode_splits_follow_the_context) {
  // Llama-3.1-8B's 8 KV heads: one row may take up to 32 splits (264 / 8 blocks), 4 rows
  // up to 8; 128 rows fill the GPU with one split each.
  EXPECT_TRUE(decode_splits(1, 8) == 32) << "decode_splits(1, 8) == 32";
  struct Case {
    int rows, ctx, keys, splits;
  };
  for (const Case& c : {Case{1, 1, 256, 1}, Case{1, 256, 256, 1}, Case{1, 257, 256, 2},
                        Case{1, 1000, 256, 4}, Case{1, 4000, 256, 16}, Case{1, 100000, 256, 32},
                        Case{128, 100000, 256, 1}, Case{4, 3000, 128, 8}}) {
    const int got = decode_splits_for_context(c.rows, 8, c.ctx, c.keys);
    EXPECT_TRUE(got == c.splits) << str_format(
        "decode_splits_for_context(%d, 8, %d, %d) = %d, want %d", c.rows, c.ctx, c.keys, got,
        c.splits);
  }
}

TEST_F(CudaAttention, attention_matches_cpu) {
  std::mt19937 rng(11);
  ThreadPool pool(4);
  const std::vector<SeqSpec> mixed = {{0, 1}, {37, 1}, {300, 1}, {1000, 2}, {37, 29}, {0, 130}};
  const std::vector<SeqSpec> long_prefill = {{0, 200}, {64, 64}, {5, 300}};
  // Decode rows through the tensor-core kernel (where it applies), then the row kernel.
  for (bool mma : {true, false}) {
    set_decode_tensor_cores(mma);
    g_decode_mma = mma;
    for (int hd : {64, 128}) {
      for (auto [h, kv] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{28, 4}, std::pair{9, 3},
                           std::pair{32, 2}}) {
        run_attention_case({h, kv, hd, mixed, true, 0, ActType::kF32}, rng, pool);
        run_attention_case({h, kv, hd, long_prefill, true, 0, ActType::kF16}, rng, pool);
      }
      run_attention_case({8, 2, hd, mixed, false, 1, ActType::kF32}, rng, pool);
      run_attention_case({8, 2, hd, mixed, false, 7, ActType::kBF16}, rng, pool);
      run_attention_case({32, 8, hd, {{4000, 1}}, false, 0, ActType::kF32}, rng, pool);
      run_context_splits(hd, false, rng, pool);
    }
  }
  set_decode_tensor_cores(true);
  g_decode_mma = true;
  // Head sizes without a tensor-core kernel go through the row kernel only.
  for (int hd : {8, 32, 80, 256})
    run_attention_case({4, 2, hd, mixed, false, 0, ActType::kF32}, rng, pool);
}

TEST_F(CudaAttention, attention_fp8_kv_matches_cpu) {
  std::mt19937 rng(12);
  ThreadPool pool(4);
  const std::vector<SeqSpec> mixed = {{0, 1}, {37, 1}, {300, 1}, {1000, 2}, {37, 29}, {0, 130}};
  const std::vector<SeqSpec> long_prefill = {{0, 200}, {64, 64}, {5, 300}};
  // The tensor-core kernel (keys on M), then the row kernel at both of its FP8 unrolls.
  // Groups of 1 to 16 heads: one n tile of 8 heads, then two.
  for (int variant = 0; variant < 3; ++variant) {
    set_decode_tensor_cores(variant == 0);
    g_decode_mma = variant == 0;
    set_decode_fp8_unroll(variant == 2 ? 4 : 8);
    for (int hd : {64, 128}) {
      for (auto [h, kv] :
           {std::pair{8, 2}, std::pair{28, 4}, std::pair{9, 3}, std::pair{24, 2}, std::pair{32, 2}})
        run_attention_case({h, kv, hd, mixed, true, 0, ActType::kF32, true}, rng, pool);
      run_attention_case({8, 8, hd, long_prefill, true, 0, ActType::kF16, true}, rng, pool);
      run_attention_case({8, 2, hd, mixed, false, 7, ActType::kBF16, true}, rng, pool);
      run_attention_case({32, 8, hd, {{4000, 1}}, false, 0, ActType::kF32, true}, rng, pool);
      run_context_splits(hd, true, rng, pool);
    }
    for (int hd : {8, 80, 256})
      run_attention_case({4, 2, hd, mixed, false, 0, ActType::kF32, true}, rng, pool);
  }
  set_decode_tensor_cores(true);
  g_decode_mma = true;
  set_decode_fp8_unroll(8);
}

// KV blocks of 32, 64 and 256 tokens (--block-size): a sequence's keys then run longer
// between block-table lookups, and a key tile may sit inside one block or cross several.
TEST_F(CudaAttention, attention_other_block_sizes_match_cpu) {
  std::mt19937 rng(13);
  ThreadPool pool(4);
  const std::vector<SeqSpec> mixed = {{0, 1}, {37, 1}, {300, 1}, {1000, 2}, {37, 29}, {0, 130}};
  for (bool mma : {true, false}) {
    set_decode_tensor_cores(mma);
    g_decode_mma = mma;
    for (int bs : {32, 64, 256}) {
      for (bool fp8 : {false, true}) {
        run_attention_case({32, 8, 128, mixed, true, 0, ActType::kF32, fp8, bs}, rng, pool);
        run_attention_case({8, 2, 64, mixed, false, 7, ActType::kBF16, fp8, bs}, rng, pool);
        run_attention_case({32, 8, 128, {{4000, 1}}, false, 0, ActType::kF32, fp8, bs}, rng, pool);
      }
    }
  }
  set_decode_tensor_cores(true);
  g_decode_mma = true;
}

}  // namespace
}  // namespace pagoda::cuda::testing
