#include "op_table.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_blocks.h"

namespace pagoda::optest {

const char* op_name(Op op) {
  switch (op) {
    case Op::kMatmul:
      return "matmul";
    case Op::kEmbed:
      return "embed";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kSiluMul:
      return "silu_mul";
    case Op::kRope:
      return "rope";
    case Op::kAttention:
      return "attention";
  }
  return "?";
}

const char* out_name(OutType t) {
  return t == OutType::kF32 ? "f32" : t == OutType::kF16 ? "f16" : "bf16";
}

const char* kv_name(KvKind k) {
  return k == KvKind::kF16 ? "f16" : k == KvKind::kQ8_0 ? "q8_0" : "fp8";
}

namespace {

// The weight types of the products and lookups: every type either backend runs (each
// skips those it does not).
constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16, DType::kQ4_0,
                                  DType::kQ4_1, DType::kQ5_0,   DType::kQ5_1, DType::kQ8_0,
                                  DType::kQ2_K, DType::kQ3_K,   DType::kQ4_K, DType::kQ5_K,
                                  DType::kQ6_K, DType::kIQ4_NL, DType::kNF4,  DType::kFP8};

// Bounds of a product against the exact one over the dequantized weights. The backends
// round the activations to what the weights' kernel takes: f32 none (what is left is f32
// accumulation, ~1e-12); f16 2^-11 relative (~5e-8); bf16 2^-8 (~3e-6); 8-bit blocks of
// 32 (the Q8_0 rule, both backends; ~3e-5) or of 256 (the CPU's Q8_K for the K types;
// ~6e-5). The worst measured on the CPU (every level) is a quarter to a third of each
// bound; one wrong block of the 16 a row of 512 holds costs ~6e-2.
double product_tol(DType t) {
  if (t == DType::kF32 || t == DType::kFP8) return 1e-9;  // FP8 takes f32 activations
  if (t == DType::kF16) return 2e-7;
  if (t == DType::kBF16) return 1e-5;
  return dtype_info(t).block_elems > 32 ? 2e-4 : 1e-4;
}

// Bound of a rounded output: f32 sums in double then one f32 rounding; f16 2^-11
// relative; bf16 2^-8 (the GPU's bounds of its norm and activation tests).
double out_tol(OutType t) {
  return t == OutType::kF32 ? 1e-12 : t == OutType::kF16 ? 1e-6 : 3e-5;
}

std::string dtype_tag(DType t) {
  return std::string(dtype_name(t));
}

std::vector<OpCase> build_table() {
  std::vector<OpCase> v;
  auto add = [&](OpCase c) { v.push_back(std::move(c)); };
  // Weight products: one token (the matrix-vector path), a few (<= 8, still the GPU's
  // matrix-vector kernels), many (the GPU's cuBLASLt, the CPU's token groups), and odd
  // widths: float weights at 172 columns (not a multiple of 8), block weights at a
  // width of 18 blocks of 32 and an odd row count.
  for (DType t : kWeightTypes) {
    const bool k_type = dtype_info(t).block_elems > 32;
    const bool quant = dtype_info(t).block_elems > 1;
    struct Shape {
      int64_t m, k, n;
    };
    std::vector<Shape> shapes = {{1, 4096, 512}, {5, 1024, 300}, {64, 1024, 256}};
    shapes.push_back(!quant   ? Shape{3, 172, 64}
                     : k_type ? Shape{17, 1536, 37}
                              : Shape{17, 576, 37});
    for (const Shape& s : shapes) {
      OpCase c;
      c.op = Op::kMatmul;
      c.wtype = t;
      c.m = s.m;
      c.k = s.k;
      c.n = s.n;
      c.tol = product_tol(t);
      c.name = str_format("%s_m%lld_k%lld_n%lld", dtype_tag(t).c_str(), static_cast<long long>(s.m),
                          static_cast<long long>(s.k), static_cast<long long>(s.n));
      add(c);
    }
  }
  // Embedding rows: exact (the dequantization is the reference's own), tokens repeated.
  for (DType t : kWeightTypes) {
    OpCase c;
    c.op = Op::kEmbed;
    c.wtype = t;
    c.m = 5;
    c.k = 512;
    c.n = 50;
    c.tol = 1e-12;
    c.name = "embed_" + dtype_tag(t) + "_rows50_k512";
    add(c);
  }
  // RMSNorm and SiLU-and-multiply over widths that reach every tail of the vector loops
  // and the GPU's paths: rows held in registers (7 rows, 1,024 threads a row) and rows
  // too long for them (5,000 at 70 rows: 256 threads a row).
  struct Rows {
    int64_t m, k;
  };
  for (Rows r : {Rows{3, 1}, Rows{2, 15}, Rows{2, 16}, Rows{7, 17}, Rows{7, 64}, Rows{7, 100},
                 Rows{1, 576}, Rows{5, 1000}, Rows{7, 4096}, Rows{70, 5000}}) {
    for (OutType o : {OutType::kF32, OutType::kF16, OutType::kBF16}) {
      if (o != OutType::kF32 && r.k < 64) continue;
      OpCase c;
      c.op = Op::kRmsNorm;
      c.m = r.m;
      c.k = r.k;
      c.out = o;
      c.tol = out_tol(o);
      c.name = str_format("rms_norm_%s_m%lld_k%lld", out_name(o), static_cast<long long>(r.m),
                          static_cast<long long>(r.k));
      add(c);
    }
  }
  for (Rows r : {Rows{2, 1}, Rows{2, 15}, Rows{2, 16}, Rows{2, 17}, Rows{1, 576}, Rows{5, 1000}}) {
    for (OutType o : {OutType::kF32, OutType::kF16, OutType::kBF16}) {
      if (o != OutType::kF32 && r.k < 576) continue;
      OpCase c;
      c.op = Op::kSiluMul;
      c.m = r.m;
      c.k = r.k;
      c.out = o;
      c.tol = out_tol(o);
      c.name = str_format("silu_mul_%s_m%lld_k%lld", out_name(o), static_cast<long long>(r.m),
                          static_cast<long long>(r.k));
      add(c);
    }
  }
  // RoPE: adjacent pairs (llama) and NeoX's halves, whole and partial rotation.
  struct Rope {
    int heads, hd, dims;
    bool neox;
  };
  // f32 rows (the CPU), and q as the GPU stores it after rotating it (fp16).
  for (Rope r : {Rope{3, 64, 64, false}, Rope{3, 64, 64, true}, Rope{4, 64, 32, false},
                 Rope{4, 64, 32, true}, Rope{32, 128, 128, false}, Rope{32, 128, 128, true}}) {
    for (OutType o : {OutType::kF32, OutType::kF16}) {
      OpCase c;
      c.op = Op::kRope;
      c.m = 5;
      c.n_heads = r.heads;
      c.head_dim = r.hd;
      c.rope_dims = r.dims;
      c.neox = r.neox;
      c.out = o;
      c.tol = out_tol(o);
      c.name = str_format("rope_%s_%s_h%d_d%d_dims%d", r.neox ? "neox" : "norm", out_name(o),
                          r.heads, r.hd, r.dims);
      add(c);
    }
  }
  // Attention over a paged pool with shuffled block tables: decode rows, prefill chunks
  // at offsets (the GPU's tensor-core kernel takes those over 4 queries at head sizes 64
  // and 128), GQA groups of 1 to 4 and 8, head sizes without a tensor-core kernel, 16-,
  // 32- and 64-token blocks; each pool kind a backend has. Against attention in double
  // over the values as the pool holds them: the kernels round q and the softmax weights
  // to fp16 (~4e-8 on the CPU); a wrong key or block costs 1e-2. The bound is the CPU's
  // attention test's.
  struct Attn {
    const char* tag;
    int heads, kv, hd, bs;
    std::vector<SeqSpec> seqs;
  };
  const std::vector<SeqSpec> decode = {{0, 1}, {37, 1}, {300, 1}, {1000, 1}};
  const std::vector<SeqSpec> mixed = {{0, 1}, {37, 1}, {300, 1}, {1000, 2}, {37, 29}, {0, 130}};
  const std::vector<Attn> attn = {
      {"decode", 8, 2, 64, 16, decode}, {"decode", 32, 8, 128, 16, {{4000, 1}}},
      {"decode", 9, 3, 64, 32, decode}, {"mixed", 8, 8, 128, 16, mixed},
      {"mixed", 28, 4, 64, 64, mixed},  {"prefill", 8, 2, 128, 16, {{0, 200}, {64, 64}}},
      {"mixed", 4, 2, 80, 16, mixed},   {"prefill", 6, 1, 32, 32, {{5, 100}}},
  };
  for (const Attn& a : attn) {
    for (KvKind kv : {KvKind::kF16, KvKind::kQ8_0, KvKind::kFp8}) {
      OpCase c;
      c.op = Op::kAttention;
      c.n_heads = a.heads;
      c.n_kv_heads = a.kv;
      c.head_dim = a.hd;
      c.block_size = a.bs;
      c.seqs = a.seqs;
      c.kv = kv;
      c.tol = 2e-6;
      c.m = 0;
      for (const SeqSpec& s : a.seqs) c.m += s.n_q;
      c.name =
          str_format("attn_%s_%s_h%d_kv%d_d%d_bs%d", a.tag, kv_name(kv), a.heads, a.kv, a.hd, a.bs);
      add(c);
    }
  }
  return v;
}

// FNV-1a: a seed per case that depends on its name only.
uint32_t seed_of(const std::string& s) {
  uint32_t h = 2166136261u;
  for (char ch : s) h = (h ^ static_cast<uint8_t>(ch)) * 16777619u;
  return h;
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Offsets of the fp16 scales of a Q2_K / Q3_K / IQ4_NL / NF4 block, which random bytes
// must not make inf or NaN.
std::vector<int> half_fields(DType t) {
  if (t == DType::kQ2_K) return {80, 82};
  if (t == DType::kQ3_K) return {108};
  if (t == DType::kIQ4_NL || t == DType::kNF4) return {0};
  return {};
}

// GGUF rows of N(0, 1) values; Q2_K, Q3_K and the table types IQ4_NL and NF4 (no
// quantizer: files come from llama.cpp or bitsandbytes folders) random bytes with small random
// scales, which their fields can all hold.
std::vector<uint8_t> make_weights(std::mt19937& rng, DType t, int64_t rows, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  if (t == DType::kFP8) {  // random e4m3 bytes but the NaNs (refused at load), f32 scales
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    for (size_t off = 0; off < w.size(); off += sizeof(cpu::BlockFP8)) {
      cpu::BlockFP8 b;
      b.d = scale(rng);
      for (uint8_t& q : b.qs) {
        q = static_cast<uint8_t>(byte(rng));
        if ((q & 0x7F) == 0x7F) q ^= 1;
      }
      std::memcpy(&w[off], &b, sizeof(b));
    }
    return w;
  }
  if (half_fields(t).empty()) {
    const auto f = random_floats(rng, static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      (void)cpu::quantize_row(t, f.data() + r * cols, w.data() + rb * static_cast<size_t>(r), cols);
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  const size_t bb = dtype_info(t).block_bytes;
  for (size_t off = 0; off < w.size(); off += bb)
    for (int f : half_fields(t)) {
      const uint16_t h = f32_to_fp16(scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f));
      std::memcpy(&w[off + static_cast<size_t>(f)], &h, 2);
    }
  return w;
}

std::vector<float> dequant(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t rb = row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r)
    (void)cpu::dequantize_row(t, w.data() + rb * static_cast<size_t>(r), out.data() + r * cols,
                              cols);
  return out;
}

// Keys or values as a pool of `kind` holds them.
std::vector<float> as_stored(std::vector<float> x, KvKind kind, float fp8_scale) {
  if (kind == KvKind::kF16) {
    for (float& e : x) e = round_f16(e);
  } else if (kind == KvKind::kFp8) {
    for (float& e : x) e = round_fp8(e, fp8_scale);
  } else {
    // llama.cpp's q8_0 per 32 values of a head's vector (head_dim a multiple of 32: the
    // blocks of the whole array are those).
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(row_bytes(DType::kQ8_0, n));
    (void)cpu::quantize_row(DType::kQ8_0, x.data(), q.data(), n);
    (void)cpu::dequantize_row(DType::kQ8_0, q.data(), x.data(), n);
  }
  return x;
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> table = build_table();
  return table;
}

float round_f16(float x) {
  return fp16_to_f32(f32_to_fp16(x));
}
float round_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}
float round_out(float x, OutType t) {
  return t == OutType::kF32 ? x : t == OutType::kF16 ? round_f16(x) : round_bf16(x);
}

float round_fp8(float x, float scale) {
  const float v = x / scale;
  if (std::isnan(v)) return v;
  const float a = std::min(std::fabs(v), 448.0f);
  if (a == 0.0f) return 0.0f;
  // 3 mantissa bits; below 2^-6 the step stays 2^-9 (subnormals).
  int e2 = 0;
  (void)std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  const int e = std::max(e2 - 1, -6);
  const float step = std::ldexp(1.0f, e - 3);
  const float q = std::min(std::nearbyint(a / step) * step, 448.0f);
  return std::copysign(q, v) * scale;
}

double nmse(const float* a, const double* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

OpInputs make_inputs(const OpCase& c) {
  std::mt19937 rng(seed_of(c.name));
  OpInputs in;
  switch (c.op) {
    case Op::kMatmul:
      in.w = make_weights(rng, c.wtype, c.n, c.k);
      in.x = random_floats(rng, static_cast<size_t>(c.m * c.k));
      break;
    case Op::kEmbed: {
      in.w = make_weights(rng, c.wtype, c.n, c.k);
      std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.n - 1));
      for (int64_t i = 0; i < c.m; ++i) in.tokens.push_back(tok(rng));
      // The last row, and a row twice.
      if (c.m > 2) in.tokens[2] = static_cast<int32_t>(c.n - 1);
      if (c.m > 3) in.tokens[3] = in.tokens[0];
      break;
    }
    case Op::kRmsNorm:
      in.x = random_floats(rng, static_cast<size_t>(c.m * c.k), 3.0f);
      in.w_norm = random_floats(rng, static_cast<size_t>(c.k));
      break;
    case Op::kSiluMul:
      in.x = random_floats(rng, static_cast<size_t>(c.m * 2 * c.k), 2.0f);
      break;
    case Op::kRope: {
      const int pairs = c.rope_dims / 2;
      in.x = random_floats(rng, static_cast<size_t>(c.m) * c.n_heads * c.head_dim);
      for (int64_t r = 0; r < c.m; ++r) {
        const float pos = static_cast<float>(r * 37 + 3);
        for (int i = 0; i < pairs; ++i) {
          const float angle = pos * std::pow(10000.0f, -2.0f * i / static_cast<float>(c.rope_dims));
          in.cos_t.push_back(std::cos(angle));
          in.sin_t.push_back(std::sin(angle));
        }
      }
      break;
    }
    case Op::kAttention: {
      const int kvd = c.n_kv_heads * c.head_dim, qd = c.n_heads * c.head_dim;
      int need = 0;
      for (const SeqSpec& s : c.seqs) need += (s.pos0 + s.n_q + c.block_size - 1) / c.block_size;
      in.n_blocks = need + 7;  // blocks no sequence owns
      std::vector<int32_t> ids(static_cast<size_t>(in.n_blocks));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      size_t next = 0;
      for (const SeqSpec& s : c.seqs) {
        const int len = s.pos0 + s.n_q;
        const int nb = (len + c.block_size - 1) / c.block_size;
        in.tables.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(next),
                               ids.begin() + static_cast<std::ptrdiff_t>(next + nb));
        next += static_cast<size_t>(nb);
        in.keys.push_back(random_floats(rng, static_cast<size_t>(len) * kvd));
        in.vals.push_back(random_floats(rng, static_cast<size_t>(len) * kvd));
      }
      // Queries as fp16 values: both backends take them in fp16.
      in.x = random_floats(rng, static_cast<size_t>(c.m) * qd, 2.0f);
      for (float& q : in.x) q = round_f16(q);
      in.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      break;
    }
  }
  return in;
}

size_t output_size(const OpCase& c) {
  switch (c.op) {
    case Op::kMatmul:
      return static_cast<size_t>(c.m * c.n);
    case Op::kEmbed:
    case Op::kRmsNorm:
    case Op::kSiluMul:
      return static_cast<size_t>(c.m * c.k);
    case Op::kRope:
      return static_cast<size_t>(c.m) * c.n_heads * c.head_dim;
    case Op::kAttention:
      return static_cast<size_t>(c.m) * c.n_heads * c.head_dim;
  }
  return 0;
}

double case_bytes(const OpCase& c) {
  const double out_b = c.out == OutType::kF32 ? 4 : 2;
  switch (c.op) {
    case Op::kMatmul:
      return static_cast<double>(row_bytes(c.wtype, c.k)) * c.n + 4.0 * c.m * c.k + 4.0 * c.m * c.n;
    case Op::kEmbed:
      return static_cast<double>(row_bytes(c.wtype, c.k)) * c.m + 4.0 * c.m * c.k;
    case Op::kRmsNorm:
      return 4.0 * c.m * c.k + 4.0 * c.k + out_b * c.m * c.k;
    case Op::kSiluMul:
      return 8.0 * c.m * c.k + out_b * c.m * c.k;
    case Op::kRope:
      return (4.0 + out_b) * c.m * c.n_heads * c.head_dim + 4.0 * c.m * c.rope_dims;
    case Op::kAttention: {
      const double elem = c.kv == KvKind::kF16 ? 2 : c.kv == KvKind::kFp8 ? 1 : 34.0 / 32;
      double kv = 0;
      for (const SeqSpec& s : c.seqs)
        kv += 2.0 * (s.pos0 + s.n_q) * c.n_kv_heads * c.head_dim * elem;
      return kv + 6.0 * c.m * c.n_heads * c.head_dim;  // q in fp16, out in f32
    }
  }
  return 0;
}

double case_flops(const OpCase& c) {
  if (c.op == Op::kMatmul) return 2.0 * c.m * c.n * c.k;
  if (c.op != Op::kAttention) return 0;
  double keys = 0;  // causal: query t of a sequence sees pos0 + t + 1 keys
  for (const SeqSpec& s : c.seqs) keys += s.n_q * (s.pos0 + (s.n_q + 1) / 2.0);
  return 4.0 * keys * c.n_heads * c.head_dim;
}

std::vector<double> reference(const OpCase& c, const OpInputs& in) {
  std::vector<double> y(output_size(c));
  switch (c.op) {
    case Op::kMatmul: {
      const auto w = dequant(c.wtype, in.w, c.n, c.k);
      for (int64_t t = 0; t < c.m; ++t)
        for (int64_t r = 0; r < c.n; ++r) {
          double s = 0;
          const float* wr = w.data() + r * c.k;
          const float* xr = in.x.data() + t * c.k;
          for (int64_t i = 0; i < c.k; ++i) s += static_cast<double>(wr[i]) * xr[i];
          y[static_cast<size_t>(t * c.n + r)] = s;
        }
      break;
    }
    case Op::kEmbed: {
      const auto w = dequant(c.wtype, in.w, c.n, c.k);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.k; ++j)
          y[static_cast<size_t>(i * c.k + j)] = w[static_cast<size_t>(in.tokens[i] * c.k + j)];
      break;
    }
    case Op::kRmsNorm:
      for (int64_t i = 0; i < c.m; ++i) {
        const float* x = in.x.data() + i * c.k;
        double ss = 0;
        for (int64_t j = 0; j < c.k; ++j) ss += static_cast<double>(x[j]) * x[j];
        const double sc = 1.0 / std::sqrt(ss / static_cast<double>(c.k) + 1e-5);
        for (int64_t j = 0; j < c.k; ++j)
          y[static_cast<size_t>(i * c.k + j)] = x[j] * sc * in.w_norm[static_cast<size_t>(j)];
      }
      break;
    case Op::kSiluMul:
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.k; ++j) {
          const double g = in.x[static_cast<size_t>(i * 2 * c.k + j)];
          const double u = in.x[static_cast<size_t>(i * 2 * c.k + c.k + j)];
          y[static_cast<size_t>(i * c.k + j)] = g / (1.0 + std::exp(-g)) * u;
        }
      break;
    case Op::kRope: {
      const int pairs = c.rope_dims / 2, width = c.n_heads * c.head_dim;
      for (size_t i = 0; i < y.size(); ++i) y[i] = in.x[i];
      for (int64_t r = 0; r < c.m; ++r)
        for (int h = 0; h < c.n_heads; ++h)
          for (int i = 0; i < pairs; ++i) {
            const size_t base = static_cast<size_t>(r * width + h * c.head_dim);
            const size_t a = base + static_cast<size_t>(c.neox ? i : 2 * i);
            const size_t b = base + static_cast<size_t>(c.neox ? i + pairs : 2 * i + 1);
            const double co = in.cos_t[static_cast<size_t>(r * pairs + i)];
            const double si = in.sin_t[static_cast<size_t>(r * pairs + i)];
            const double xa = in.x[a], xb = in.x[b];
            y[a] = xa * co - xb * si;
            y[b] = xa * si + xb * co;
          }
      break;
    }
    case Op::kAttention: {
      const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads, kvd = c.n_kv_heads * hd;
      const int qd = c.n_heads * hd;
      int row = 0;
      for (size_t s = 0; s < c.seqs.size(); ++s) {
        const auto k = as_stored(in.keys[s], c.kv, kFp8KScale);
        const auto v = as_stored(in.vals[s], c.kv, kFp8VScale);
        for (int t = 0; t < c.seqs[s].n_q; ++t, ++row) {
          const int pos = c.seqs[s].pos0 + t;
          for (int h = 0; h < c.n_heads; ++h) {
            const int g = h / group;
            const float* q = in.x.data() + static_cast<size_t>(row) * qd + h * hd;
            std::vector<double> sc(static_cast<size_t>(pos + 1));
            double mx = -1e300;
            for (int j = 0; j <= pos; ++j) {
              double d = 0;
              const float* kr = k.data() + static_cast<size_t>(j) * kvd + g * hd;
              for (int e = 0; e < hd; ++e) d += static_cast<double>(q[e]) * kr[e];
              sc[static_cast<size_t>(j)] = d * in.scale;
              mx = std::max(mx, sc[static_cast<size_t>(j)]);
            }
            double z = 0;
            for (double& x : sc) z += (x = std::exp(x - mx));
            double* out = y.data() + static_cast<size_t>(row) * qd + h * hd;
            for (int j = 0; j <= pos; ++j) {
              const double p = sc[static_cast<size_t>(j)] / z;
              const float* vr = v.data() + static_cast<size_t>(j) * kvd + g * hd;
              for (int e = 0; e < hd; ++e) out[e] += p * vr[e];
            }
          }
        }
      }
      break;
    }
  }
  return y;
}

double PreparedOp::median_ms(int reps) {
  for (int i = 0; i < 2; ++i) (void)run();
  (void)output();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    (void)run();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

namespace {

class RefOp : public PreparedOp {
 public:
  RefOp(const OpCase& c, const OpInputs& in) : c_(c), in_(in) {}
  Status run() override {
    y_ = reference(c_, in_);
    return Status::ok();
  }
  Result<std::vector<float>> output() override { return std::vector<float>(y_.begin(), y_.end()); }

 private:
  const OpCase& c_;
  const OpInputs& in_;
  std::vector<double> y_;
};

class RefBackend : public OpBackend {
 public:
  std::string name() const override { return "ref"; }
  std::string skip_reason(const OpCase&) const override { return ""; }
  Result<std::unique_ptr<PreparedOp>> prepare(const OpCase& c, const OpInputs& in) override {
    return std::unique_ptr<PreparedOp>(std::make_unique<RefOp>(c, in));
  }
};

}  // namespace

std::unique_ptr<OpBackend> make_reference_backend() {
  return std::make_unique<RefBackend>();
}

}  // namespace pagoda::optest
