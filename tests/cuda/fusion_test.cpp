// The fused one-token products (gemv_fused: the RoPE + KV-store epilogue, block weights
// quantizing their input in the kernel) against the separate kernels they replace in a
// decode step, which the op and attention tests check against the CPU: fresh random
// inputs, outputs poisoned, every weight type the fused kernels take, the kernels' own
// and forced splits of a row among warps.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv_q8.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "harness.h"

namespace pagoda::cuda::testing {
namespace {

class CudaFusion : public CudaTest {};

struct Shape {
  int dim, n_heads, n_kv, hd, ff;
};
// The second is Llama-like (GQA 4, head 128, a long FFN row); the first is small, with an
// FFN width (340) that is not a multiple of 32 (block weights' down products take 320).
constexpr Shape kShapes[] = {{256, 4, 2, 64, 340}, {1024, 8, 2, 128, 2816}};

// A weight type as the model holds it: FP8 weights are E4M3 bytes of a BF16/F16 matrix.
struct WType {
  DType type;
  bool fp8;
};
constexpr WType kTypes[] = {{DType::kF16, false},  {DType::kBF16, false}, {DType::kBF16, true},
                            {DType::kF16, true},   {DType::kQ8_0, false}, {DType::kQ4_0, false},
                            {DType::kQ4_1, false}, {DType::kQ4_K, false}, {DType::kQ5_K, false},
                            {DType::kQ6_K, false}};

std::string type_name(WType t) {
  return std::string(t.fp8 ? "FP8/" : "") + std::string(dtype_name(t.type));
}

// A weight matrix of `t`; FP8 bytes are quantized on the host (cuda_fp8.h) with one scale.
struct Weights {
  TestMatrix tm;
  DeviceBuffer fp8_bytes;
  DeviceMatrix m;
};
std::unique_ptr<Weights> make_weights(std::mt19937& rng, WType t, int64_t rows, int64_t cols) {
  auto w = std::make_unique<Weights>();
  w->tm = make_matrix(rng, t.type, rows, cols);
  w->m = w->tm.m;
  if (t.fp8) {
    float amax = 0;
    for (float v : w->tm.deq) amax = std::max(amax, std::fabs(v));
    const float scale = amax / 448.0f;
    std::vector<uint8_t> bytes(w->tm.deq.size());
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = to_fp8(w->tm.deq[i] / scale);
    w->fp8_bytes = to_device(bytes);
    w->m.data = w->fp8_bytes.get();
    w->m.fp8 = true;
    w->m.fp8_scale = scale;
  }
  return w;
}

// One decode row at position 37 of a sequence whose block table is {5, 2, 7} (block size
// 16: the row's slot is 5 of block 7).
struct OneRow {
  static constexpr int kPos = 37, kBlockSize = 16, kBlocks = 8;
  std::vector<int32_t> row_seq{0}, row_pos{kPos}, q_row{0}, n_q{1}, pos0{kPos}, boff{0},
      blocks{5, 2, 7};
  DeviceBuffer d_row_seq = to_device(row_seq), d_row_pos = to_device(row_pos),
               d_q_row = to_device(q_row), d_n_q = to_device(n_q), d_pos0 = to_device(pos0),
               d_boff = to_device(boff), d_blocks = to_device(blocks);
  DeviceBatch db() const {
    DeviceBatch b;
    b.n_rows = 1;
    b.n_seqs = 1;
    b.row_seq = d_row_seq.as<int32_t>();
    b.row_pos = d_row_pos.as<int32_t>();
    b.seq_q_row = d_q_row.as<int32_t>();
    b.seq_n_q = d_n_q.as<int32_t>();
    b.seq_pos0 = d_pos0.as<int32_t>();
    b.seq_blocks_off = d_boff.as<int32_t>();
    b.blocks = d_blocks.as<int32_t>();
    return b;
  }
};

// A KV pool of the row's layer, filled with the same random bytes for both paths.
struct Pool {
  DeviceBuffer k, v;
  KvLayerView view;
};
Pool make_pool(const std::vector<uint8_t>& fill, const Shape& s, KvType type) {
  Pool p;
  p.k = to_device(fill);
  p.v = to_device(fill);
  p.view.k = p.k.get();
  p.view.v = p.v.get();
  p.view.block_size = OneRow::kBlockSize;
  p.view.n_kv_heads = s.n_kv;
  p.view.head_dim = s.hd;
  p.view.type = type;
  // Powers of two, so x / scale is exact and only the FP8 rounding remains.
  p.view.k_scale = type == KvType::kF16 ? 1.0f : 0.5f;
  p.view.v_scale = type == KvType::kF16 ? 1.0f : 2.0f;
  return p;
}

// The values of a pool as floats (fp16, or FP8 bytes times their scale).
std::vector<float> pool_values(const DeviceBuffer& b, KvType type, float scale, size_t n) {
  std::vector<float> out(n);
  if (type == KvType::kF16) {
    const auto h = to_host<uint16_t>(b, n);
    for (size_t i = 0; i < n; ++i) out[i] = fp16_to_f32(h[i]);
  } else {
    const auto h = to_host<uint8_t>(b, n);
    for (size_t i = 0; i < n; ++i) out[i] = from_fp8(h[i]) * scale;
  }
  return out;
}

// 16-bit results of the same f32 sums, perhaps added in another order (block weights:
// the fused kernel may split a row among warps differently), which moves a few values by
// one rounding.
double bound_for(ActType t) {
  return t == ActType::kBF16 ? 1e-5 : 1e-6;
}

RopeParams rope_params(const Shape& s) {
  RopeParams p;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv;
  p.head_dim = s.hd;
  p.n_pairs = s.hd / 2;
  p.neox = false;
  p.theta_scale = std::pow(500000.0f, -2.0f / static_cast<float>(s.hd));
  return p;
}

// qkv + RoPE + KV store after the norm: fused against matmul, rope_qkv_store.
// The norm's input as a folded norm hands it to the product after it (GemvFusion's
// norm_out and norm_ss), made on the host: x * w in the activation type, and the sum of
// squares in fixed point, all in the first slot (the kernels sum the slots).
struct FoldedInput {
  DeviceBuffer act, ss;
};
FoldedInput fold_on_host(const std::vector<float>& x, const std::vector<float>& norm_w,
                         ActType at) {
  std::vector<float> xw(x.size());
  unsigned long long sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xw[i] = x[i] * norm_w[i];
    sum +=
        static_cast<unsigned long long>(std::llrint(static_cast<double>(x[i] * x[i]) * kNormFixed));
  }
  std::vector<unsigned long long> slots(kNormBytes / 8, 0);
  slots[0] = sum;
  return {to_device(encode_act(xw, at)), to_device(slots)};
}
GemvFusion reading_norm(const FoldedInput& in, int dim) {
  GemvFusion f;
  f.in_ss = in.ss.as<unsigned long long>();
  f.in_dim = dim;
  f.in_eps = 1e-5f;
  return f;
}
// A folded norm's product against the norm's kernel and the plain product: the 16-bit
// activations round x * w rather than the normalised x * w, so each moves by up to a
// rounding (bf16: 2^-9), and 8-bit blocks quantized from them may move a step.
double folded_bound(WType t) {
  if (is_q8_block_type(t.type)) return 3e-4;
  return act_type_for(t.type) == ActType::kBF16 ? 2e-5 : 1e-6;
}

// How a product's norm is folded in, if at all: the slots (GemvFusion::in_ss) or, for
// block weights, the product's prologue (in_norm_w).
enum class Fold { kNone, kSlots, kPrologue };

void check_qkv(std::mt19937& rng, Gemm& gemm, const Shape& s, WType t, KvType kv_type, bool bias,
               Fold fold = Fold::kNone) {
  const bool folded = fold != Fold::kNone;
  const int qd = s.n_heads * s.hd, kvd = s.n_kv * s.hd, width = qd + 2 * kvd;
  const auto w = make_weights(rng, t, width, s.dim);
  const ActType at = act_type_for(t.type);
  const auto x = random_floats(rng, static_cast<size_t>(s.dim), 3.0f);
  const auto norm_w = random_floats(rng, static_cast<size_t>(s.dim));
  const auto b = random_floats(rng, static_cast<size_t>(width), 0.5f);
  DeviceBuffer dx = to_device(x), dnw = to_device(norm_w), dbias = to_device(b);
  OneRow row;
  const RopeParams p = rope_params(s);
  DeviceBuffer cs = poisoned(static_cast<size_t>(p.n_pairs) * 2 * 4);
  EXPECT_OK(rope_tables(p, row.db(), cs.as<float>(), nullptr));
  const size_t pool_elems = static_cast<size_t>(OneRow::kBlocks) * OneRow::kBlockSize * kvd;
  std::vector<uint8_t> fill(pool_elems * kv_elem_bytes(kv_type));
  for (auto& v : fill) v = static_cast<uint8_t>(rng() % 120);  // finite in fp16 and E4M3
  Pool sep = make_pool(fill, s, kv_type), fus = make_pool(fill, s, kv_type);
  DeviceBuffer q_sep = poisoned(static_cast<size_t>(qd) * 2),
               q_fus = poisoned(static_cast<size_t>(qd) * 2);

  DeviceBuffer xn = poisoned(static_cast<size_t>(s.dim) * act_bytes(at));
  DeviceBuffer qkv = poisoned(static_cast<size_t>(width) * 4);
  EXPECT_OK(rms_norm(dx.as<float>(), s.dim, nullptr, dnw.as<float>(), xn.get(), at, 1, s.dim, 1e-5f,
                     nullptr));
  EXPECT_OK(gemm.matmul(w->m, xn.get(), s.dim, 1, qkv.as<float>(), width, false, nullptr));
  EXPECT_OK(rope_qkv_store(qkv.as<float>(), bias ? dbias.as<float>() : nullptr, p, cs.as<float>(),
                           row.db(), q_sep.as<uint16_t>(), sep.view, nullptr));

  const FoldedInput in = fold_on_host(x, norm_w, at);
  GemvFusion f = fold == Fold::kSlots ? reading_norm(in, s.dim) : GemvFusion{};
  if (fold == Fold::kPrologue) {
    f.in_norm_w = dnw.as<float>();
    f.in_eps = 1e-5f;
  }
  f.kind = GemvFusion::kRopeKv;
  f.bias = bias ? dbias.as<float>() : nullptr;
  f.rope = p;
  f.cs = cs.as<float>();
  f.batch = row.db();
  f.q_out = q_fus.as<uint16_t>();
  f.kv = fus.view;
  const std::string name =
      str_format("fused qkv+rope %s %dx%d %s KV%s%s", type_name(t).c_str(), width, s.dim,
                 kv_type == KvType::kF16 ? "fp16" : "fp8", bias ? " bias" : "",
                 fold == Fold::kSlots      ? ", norm folded in"
                 : fold == Fold::kPrologue ? ", norm in the prologue"
                                           : "");
  if (!gemv_takes(w->m, 1, f)) FAIL() << name + ": gemv_takes refused it";
  const void* in_x = fold == Fold::kSlots      ? in.act.get()
                     : fold == Fold::kPrologue ? dx.get()
                                               : xn.get();
  EXPECT_OK(gemv_fused(w->m, in_x, nullptr, false, f, nullptr));
  const double bound = folded ? folded_bound(t) : bound_for(at);

  const auto qs = pool_values(q_sep, KvType::kF16, 1, static_cast<size_t>(qd));
  const auto qf = pool_values(q_fus, KvType::kF16, 1, static_cast<size_t>(qd));
  EXPECT_NMSE(name + ": q", qf.data(), qs.data(), qs.size(), bound);
  // The whole pools: the row's slot as the separate kernels wrote it, every other slot
  // as it was.
  for (int kv_i = 0; kv_i < 2; ++kv_i) {
    const float scale = kv_i == 0 ? sep.view.k_scale : sep.view.v_scale;
    const auto ps = pool_values(kv_i == 0 ? sep.k : sep.v, kv_type, scale, pool_elems);
    const auto pf = pool_values(kv_i == 0 ? fus.k : fus.v, kv_type, scale, pool_elems);
    // FP8: a value within a rounding of an E4M3 midpoint may land one step away.
    EXPECT_NMSE(name + (kv_i == 0 ? ": K pool" : ": V pool"), pf.data(), ps.data(), ps.size(),
                kv_type == KvType::kF16 ? bound : std::max(bound, 1e-4));
    const auto bytes = to_host<uint8_t>(kv_i == 0 ? fus.k : fus.v, fill.size());
    const size_t eb = kv_elem_bytes(kv_type);
    size_t changed_elsewhere = 0;
    for (size_t i = 0; i < pool_elems; ++i) {
      const size_t slot = i / static_cast<size_t>(s.hd);  // [block][head][slot]
      const size_t block = slot / (static_cast<size_t>(s.n_kv) * OneRow::kBlockSize);
      const size_t in_block = slot % OneRow::kBlockSize;
      const bool ours = block == 7 && in_block == OneRow::kPos % OneRow::kBlockSize;
      if (!ours && std::memcmp(&bytes[i * eb], &fill[i * eb], eb) != 0) ++changed_elsewhere;
    }
    EXPECT_TRUE(changed_elsewhere == 0) << str_format(
        "%s: %zu values outside the row's slot changed", name.c_str(), changed_elsewhere);
  }
}

// Block weights' products that store the residual row (wo, down: accumulating into y),
// their f16 input quantized in the kernel, against quantize_q8 + the plain product.
void check_store(std::mt19937& rng, Gemm& gemm, const Shape& s, WType t) {
  // down's shape: the FFN width (a multiple of 32) into dim.
  // Whole blocks: 32 elements, 256 for the K types.
  const int unit = dtype_info(t.type).block_elems > 32 ? 256 : 32;
  const int cols = s.ff / unit * unit, rows = s.dim;
  const auto w = make_weights(rng, t, rows, cols);
  const auto y0 = random_floats(rng, static_cast<size_t>(rows));
  DeviceBuffer y_sep = to_device(y0), y_fus = to_device(y0);
  DeviceBuffer dx =
      to_device(encode_act(random_floats(rng, static_cast<size_t>(cols)), ActType::kF16));
  EXPECT_OK(gemm.matmul(w->m, dx.get(), cols, 1, y_sep.as<float>(), rows, true, nullptr));
  const std::string name =
      str_format("fused quantize + %s %dx%d, accumulate", type_name(t).c_str(), rows, cols);
  if (!gemv_takes(w->m, 1, GemvFusion{})) FAIL() << name + ": gemv_takes refused it";
  EXPECT_OK(gemv_fused(w->m, dx.get(), y_fus.as<float>(), true, GemvFusion{}, nullptr));
  const auto ys = to_host<float>(y_sep, static_cast<size_t>(rows));
  const auto yf = to_host<float>(y_fus, static_cast<size_t>(rows));
  // f32 sums of the same products, perhaps in another order (one warp a row where the
  // plain kernel may give a long row four).
  EXPECT_NMSE(name, yf.data(), ys.data(), ys.size(), 1e-10);
}

// A product adding to the residual that also hands the next norm its input
// (GemvFusion::norm_*): the residual as the plain product leaves it, the norm's input
// exactly x * w in `at` and the slots exactly the fixed-point squares (integer sums: the
// same in any order), both computed on the host from the residual the GPU left.
void check_norm_store(std::mt19937& rng, Gemm& gemm, const Shape& s, WType t, ActType at) {
  const int unit = dtype_info(t.type).block_elems > 32 ? 256 : 32;
  const int cols = s.ff / unit * unit, rows = s.dim;
  const auto w = make_weights(rng, t, rows, cols);
  const auto y0 = random_floats(rng, static_cast<size_t>(rows));
  const auto norm_w = random_floats(rng, static_cast<size_t>(rows));
  const ActType in_t = is_q8_block_type(t.type) ? ActType::kF16 : act_type_for(t.type);
  DeviceBuffer y_sep = to_device(y0), y_fus = to_device(y0), dnw = to_device(norm_w);
  DeviceBuffer dx = to_device(encode_act(random_floats(rng, static_cast<size_t>(cols)), in_t));
  DeviceBuffer out = poisoned(static_cast<size_t>(rows) * act_bytes(at));
  DeviceBuffer ss = to_device(std::vector<unsigned long long>(kNormBytes / 8, 0));
  if (is_q8_block_type(t.type))
    EXPECT_OK(gemv_fused(w->m, dx.get(), y_sep.as<float>(), true, GemvFusion{}, nullptr));
  else
    EXPECT_OK(gemm.matmul(w->m, dx.get(), cols, 1, y_sep.as<float>(), rows, true, nullptr));
  GemvFusion f;
  f.norm_w = dnw.as<float>();
  f.norm_out = out.get();
  f.norm_out_type = at;
  f.norm_ss = ss.as<unsigned long long>();
  const std::string name = str_format("%s %dx%d storing the next norm's %s input",
                                      type_name(t).c_str(), rows, cols, act_name(at));
  if (!gemv_takes(w->m, 1, f)) FAIL() << name + ": gemv_takes refused it";
  EXPECT_OK(gemv_fused(w->m, dx.get(), y_fus.as<float>(), true, f, nullptr));
  const auto ys = to_host<float>(y_sep, static_cast<size_t>(rows));
  const auto yf = to_host<float>(y_fus, static_cast<size_t>(rows));
  EXPECT_NMSE(name + ": the residual", yf.data(), ys.data(), ys.size(), 1e-10);
  std::vector<float> xw(yf.size());
  std::vector<unsigned long long> want(kNormBytes / 8, 0);
  for (size_t i = 0; i < yf.size(); ++i) {
    xw[i] = yf[i] * norm_w[i];
    want[i % kNormSlots * kNormSlotStride] += static_cast<unsigned long long>(
        std::llrint(static_cast<double>(yf[i] * yf[i]) * kNormFixed));
  }
  const auto got = to_host<uint8_t>(out, static_cast<size_t>(rows) * act_bytes(at));
  EXPECT_TRUE(got == encode_act(xw, at)) << name + ": x * w differs from the host's";
  EXPECT_TRUE(to_host<unsigned long long>(ss, kNormBytes / 8) == want)
      << name + ": sums of squares differ from the host's";
}

// A plain one-token product (gate_up) reading a folded norm's input (float and FP8
// weights: the slots; block weights: the norm in the product's prologue, reading the f32
// residual), against rms_norm and the product.
void check_norm_read(std::mt19937& rng, Gemm& gemm, const Shape& s, WType t) {
  const int rows = 2 * s.ff;
  const auto w = make_weights(rng, t, rows, s.dim);
  const ActType at = act_type_for(t.type);
  const auto x = random_floats(rng, static_cast<size_t>(s.dim), 3.0f);
  const auto norm_w = random_floats(rng, static_cast<size_t>(s.dim));
  DeviceBuffer dx = to_device(x), dnw = to_device(norm_w);
  DeviceBuffer xn = poisoned(static_cast<size_t>(s.dim) * act_bytes(at));
  DeviceBuffer y_sep = poisoned(static_cast<size_t>(rows) * 4),
               y_fus = poisoned(static_cast<size_t>(rows) * 4);
  EXPECT_OK(rms_norm(dx.as<float>(), s.dim, nullptr, dnw.as<float>(), xn.get(), at, 1, s.dim, 1e-5f,
                     nullptr));
  EXPECT_OK(gemm.matmul(w->m, xn.get(), s.dim, 1, y_sep.as<float>(), rows, false, nullptr));
  const bool prologue = is_q8_block_type(t.type);
  const FoldedInput in = fold_on_host(x, norm_w, at);
  GemvFusion f = prologue ? GemvFusion{} : reading_norm(in, s.dim);
  if (prologue) {
    f.in_norm_w = dnw.as<float>();
    f.in_eps = 1e-5f;
  }
  const std::string name =
      str_format("%s %dx%d %s", type_name(t).c_str(), rows, s.dim,
                 prologue ? "with the norm in its prologue" : "reading a folded norm's input");
  if (!gemv_takes(w->m, 1, f)) FAIL() << name + ": gemv_takes refused it";
  EXPECT_OK(
      gemv_fused(w->m, prologue ? dx.get() : in.act.get(), y_fus.as<float>(), false, f, nullptr));
  const auto ys = to_host<float>(y_sep, static_cast<size_t>(rows));
  const auto yf = to_host<float>(y_fus, static_cast<size_t>(rows));
  EXPECT_NMSE(name, yf.data(), ys.data(), ys.size(), folded_bound(t));
}

TEST_F(CudaFusion, folded_norms_match_separate_kernels) {
  std::mt19937 rng(33);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  for (const Shape& s : kShapes) {
    for (WType t : kTypes) {
      for (ActType at : {ActType::kF16, ActType::kBF16})
        if (!t.fp8 || at == act_type_for(t.type)) check_norm_store(rng, **gemm, s, t, at);
      check_qkv(rng, **gemm, s, t, KvType::kF16, false, Fold::kSlots);
      check_qkv(rng, **gemm, s, t, KvType::kFp8E4M3, true, Fold::kSlots);
      if (is_q8_block_type(t.type)) {
        check_qkv(rng, **gemm, s, t, KvType::kF16, false, Fold::kPrologue);
        check_qkv(rng, **gemm, s, t, KvType::kFp8E4M3, true, Fold::kPrologue);
      }
      check_norm_read(rng, **gemm, s, t);
    }
  }
}

TEST_F(CudaFusion, fused_products_match_separate_kernels) {
  std::mt19937 rng(31);
  auto gemm = Gemm::create();
  if (!gemm) FAIL() << gemm.status().message();
  // Each shape with the kernels' own choice of warps a row, then the small one with each
  // split forced (1, 2 and, for block weights, 4 warps a row).
  for (int forced : {0, 1, 2, 4}) {
    set_gemv_split_override(forced);
    set_gemv_q8_split_override(forced);
    for (const Shape& s : kShapes) {
      if (forced != 0 && &s != &kShapes[0]) continue;
      for (WType t : kTypes) {
        check_qkv(rng, **gemm, s, t, KvType::kF16, false);
        check_qkv(rng, **gemm, s, t, KvType::kFp8E4M3, true);
        if (!t.fp8 && is_q8_block_type(t.type)) check_store(rng, **gemm, s, t);
      }
    }
  }
  set_gemv_split_override(0);
  set_gemv_q8_split_override(0);
}

TEST_F(CudaFusion, fused_products_refuse_what_they_cannot_run) {
  std::mt19937 rng(32);
  const Shape s = kShapes[0];
  const int width = (s.n_heads + 2 * s.n_kv) * s.hd;
  const auto w16 = make_weights(rng, {DType::kF16, false}, width, s.dim);
  // Block weights with one row pair too many for q, k and v.
  const auto q4 = make_weights(rng, {DType::kQ4_0, false}, width + 2, 96);
  DeviceBuffer dummy = poisoned(4096);
  GemvFusion f;
  f.kind = GemvFusion::kRopeKv;
  f.rope = rope_params(s);
  f.cs = dummy.as<float>();
  f.q_out = dummy.as<uint16_t>();
  f.kv.n_kv_heads = s.n_kv;
  f.kv.head_dim = s.hd;
  EXPECT_TRUE(gemv_takes(w16->m, 1, f)) << "gemv_takes: F16 qkv with the RoPE epilogue";
  EXPECT_TRUE(!gemv_takes(w16->m, 2, f)) << "gemv_takes refuses two tokens";
  GemvFusion neox = f;
  neox.rope.neox = true;
  EXPECT_TRUE(!gemv_takes(w16->m, 1, neox))
      << "gemv_takes refuses NeoX RoPE (pairs in other blocks)";
  GemvFusion rows = f;
  rows.rope.n_kv_heads = s.n_kv + 1;
  EXPECT_TRUE(!gemv_takes(w16->m, 1, rows)) << "gemv_takes refuses rows that are not q, k, v";
  EXPECT_TRUE(!gemv_takes(q4->m, 1, f))
      << "gemv_takes refuses block weights' rows that are not q, k, v";
  EXPECT_TRUE(gemv_takes(q4->m, 1, GemvFusion{}))
      << "gemv_takes: Q4_0 with its input quantized in the kernel";
  EXPECT_TRUE(!gemv_fused(w16->m, dummy.get(), nullptr, true, f, nullptr))
      << "gemv_fused refuses to accumulate with an epilogue";
  GemvFusion norm;
  norm.norm_w = dummy.as<float>();
  norm.norm_out = dummy.get();
  norm.norm_ss = reinterpret_cast<unsigned long long*>(dummy.get());
  EXPECT_TRUE(gemv_takes(w16->m, 1, norm)) << "gemv_takes: a storing product with a norm folded in";
  EXPECT_TRUE(!gemv_fused(w16->m, dummy.get(), dummy.as<float>(), false, norm, nullptr))
      << "gemv_fused refuses a norm's input from a product not adding to the residual";
  GemvFusion rope_norm = f;
  rope_norm.norm_w = norm.norm_w;
  rope_norm.norm_out = norm.norm_out;
  rope_norm.norm_ss = norm.norm_ss;
  EXPECT_TRUE(!gemv_takes(w16->m, 1, rope_norm))
      << "gemv_takes refuses a norm's input from qkv+RoPE";
  GemvFusion reading;
  reading.in_ss = norm.norm_ss;
  EXPECT_TRUE(!gemv_takes(w16->m, 1, reading))
      << "gemv_takes refuses a folded norm without its width";
  EXPECT_TRUE(!gemv_fused(w16->m, dummy.get(), nullptr, false, neox, nullptr))
      << "gemv_fused refuses what gemv_takes refuses";
}

}  // namespace
}  // namespace pagoda::cuda::testing
