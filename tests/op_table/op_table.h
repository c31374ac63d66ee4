// One table of op cases run on every backend a test binary has, each against the plain
// CPU reference (in the manner of llama.cpp's test-backend-ops): a case names the op, its
// shapes and dtypes, and a bound on the normalised error sum (out - ref)^2 / sum ref^2.
// The table, the inputs and the reference are here and in op_table.cpp, compiled into
// both test binaries; each binary supplies its backends (op_backends()): the CPU binary
// the CPU backend at every ISA level, the CUDA binary the GPU. op_table_test.cpp makes
// one GoogleTest case per (backend, case), and the perf suite times the same pairs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace pagoda::optest {

enum class Op { kMatmul, kEmbed, kRmsNorm, kSiluMul, kRope, kAttention };
const char* op_name(Op op);

// What a row-wise op writes: f32, or (the GPU) the next product's 16-bit activation type.
enum class OutType { kF32, kF16, kBF16 };
const char* out_name(OutType t);

// How a KV pool stores keys and values: fp16; llama.cpp's q8_0 (CPU); FP8 E4M3 with one
// scale per tensor (GPU; kFp8KScale, kFp8VScale).
enum class KvKind { kF16, kQ8_0, kFp8 };
const char* kv_name(KvKind k);
// Powers of two, so x / scale is exact and only the FP8 rounding remains.
constexpr float kFp8KScale = 0.5f, kFp8VScale = 2.0f;

// One sequence of an attention batch: n_q queries at positions pos0 ...
struct SeqSpec {
  int pos0, n_q;
};

struct OpCase {
  Op op = Op::kMatmul;
  std::string name;  // unique in the table; letters, digits and _
  // kMatmul: y[m][n] = x[m][k] W^T with W n x k of `wtype`.
  // kEmbed: m rows looked up in a table of n rows of k of `wtype`.
  // kRmsNorm: m rows of k; kSiluMul: m rows, k outputs each (gate and up of k).
  // kRope: m rows of n_heads heads of head_dim, the first rope_dims of each rotated.
  DType wtype = DType::kF32;
  int64_t m = 1, k = 0, n = 0;
  OutType out = OutType::kF32;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, rope_dims = 0;
  bool neox = false;
  // kAttention: causal attention of every sequence's queries over its paged KV.
  int block_size = 16;
  std::vector<SeqSpec> seqs;
  KvKind kv = KvKind::kF16;
  double tol = 0;  // bound on the normalised error against the reference
};

// The table, in a fixed order.
const std::vector<OpCase>& op_cases();

// A case's inputs, made from its name (the same bytes for every backend).
struct OpInputs {
  std::vector<uint8_t> w;           // kMatmul, kEmbed: GGUF rows of wtype
  std::vector<float> x;             // activations: matmul [m][k]; rms_norm [m][k]; silu_mul [m][2k]
                                    // (gate, then up); rope [m][n_heads * head_dim]; attention q
                                    // [rows][n_heads * head_dim] (fp16 values)
  std::vector<float> w_norm;        // kRmsNorm: the weight [k]
  std::vector<float> cos_t, sin_t;  // kRope: [m][rope_dims / 2]
  std::vector<int32_t> tokens;      // kEmbed: m row indices
  std::vector<std::vector<float>> keys, vals;  // kAttention: per sequence [len][kv_dim]
  std::vector<std::vector<int32_t>> tables;    // kAttention: per sequence, block ids
  int n_blocks = 0;                            // kAttention: blocks in the pool
  float scale = 1;                             // kAttention: the softmax scale
};
OpInputs make_inputs(const OpCase& c);
// Output elements of a case.
size_t output_size(const OpCase& c);
// Bytes one call reads and writes (weights, activations, KV) and its flops (products
// and attention; 0 for the others), for the perf suite.
double case_bytes(const OpCase& c);
double case_flops(const OpCase& c);

// The plain reference: scalar loops over dequantized weights (quant_ref), the inputs as
// given (attention: keys and values as the case's pool stores them), sums in double.
std::vector<double> reference(const OpCase& c, const OpInputs& in);

// sum (a - ref)^2 / sum ref^2 (sum (a - ref)^2 when ref is 0); infinity on NaN.
double nmse(const float* a, const double* ref, size_t n);
// x rounded as each store holds it.
float round_f16(float x);
float round_bf16(float x);
float round_out(float x, OutType t);
// E4M3 (round to nearest even, saturated at 448) of x / scale, times scale.
float round_fp8(float x, float scale);

// One case prepared on a backend: inputs in place, outputs allocated.
class PreparedOp {
 public:
  virtual ~PreparedOp() = default;
  // One call of the op (may only enqueue it).
  virtual Status run() = 0;
  // The last run's output as f32 (waits for it).
  virtual Result<std::vector<float>> output() = 0;
  // Median time of one call in milliseconds over `reps` calls after two warm-ups.
  virtual double median_ms(int reps);
};

class OpBackend {
 public:
  virtual ~OpBackend() = default;
  virtual std::string name() const = 0;
  // Empty when the backend runs the case, else why not (the test says so and skips).
  virtual std::string skip_reason(const OpCase& c) const = 0;
  virtual Result<std::unique_ptr<PreparedOp>> prepare(const OpCase& c, const OpInputs& in) = 0;
};

// The reference as a backend ("ref"), timed in the perf suite beside the others.
std::unique_ptr<OpBackend> make_reference_backend();

// The backends of this binary (defined once per test binary), and one by name.
const std::vector<std::string>& op_backend_names();
OpBackend* op_backend(const std::string& name);

}  // namespace pagoda::optest
