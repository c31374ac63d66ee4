// Launchers of the CUDA kernels of one transformer layer. Plain C++ (no device code), so
// host code and tests call them from .cpp files. Every launcher enqueues on `stream` and
// returns the launch's Status; pointers are device pointers unless the name says host.
//
// Activations between ops: the residual stream and every GEMM output are f32; the
// inputs of a GEMM are in its "activation type" (ActType), which follows the weights
// (f32 for F32, f16 for F16 and the quantized types, bf16 for BF16), so cuBLASLt gets
// operands of one type and the producer of the activations writes them converted.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/sampling_row.h"
#include "core/status.h"

namespace pagoda::cuda {

enum class ActType : uint8_t { kF32, kF16, kBF16 };
inline size_t act_bytes(ActType t) {
  return t == ActType::kF32 ? 4 : 2;
}

// A weight matrix W[rows][cols] on the device. Float types are row-major as in GGUF.
// Quantized types are split into aligned arrays so loads are 16-byte wide: `data` holds
// the quants (Q8_0: int8 [rows][cols]; Q4_0/Q4_1 and the table types IQ4_NL/NF4:
// [rows][cols/2] bytes, each 32-element block's 16 bytes in GGUF nibble order), `scales` the fp16 d
// per 32-element block
// ([rows][cols/32]) and `mins` Q4_1's fp16 m. Q4_K, Q5_K and Q6_K keep the file's bits
// in 32-element sub-blocks (backend/cuda/kquant_layout.h): `data` the nibbles as Q4_0,
// `high` the bits above them, `scales` a scale word per sub-block, `mins` the fp16 d and
// dmin of each 256-element block.
//
// FP8 weights (`fp8`, from float weights quantized at load, as vLLM's --quantization fp8):
// `data` holds E4M3 bytes [rows][cols] and the real weight is byte x fp8_scale (one scale
// per matrix, also on the device at fp8_scale_dev for cuBLASLt). `type` keeps the type
// the file had, which still decides the activation type the producers write.
struct DeviceMatrix {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  void* data = nullptr;
  uint16_t* scales = nullptr;
  uint16_t* mins = nullptr;
  uint8_t* high = nullptr;
  bool fp8 = false;
  float fp8_scale = 1.0f;
  const float* fp8_scale_dev = nullptr;
};
// The largest E4M3 magnitude: a per-tensor scale maps a tensor's largest |x| onto it.
constexpr float kFp8Max = 448.0f;
bool is_supported_device_type(DType t);
// The activation type a product with weights of type `t` consumes.
ActType act_type_for(DType t);
// Device bytes of a rows x cols matrix of `t` in the layout above.
size_t device_matrix_bytes(DType t, int64_t rows, int64_t cols);
// Points m.data/scales/mins into `base` (device_matrix_bytes bytes).
void assign_matrix_storage(DeviceMatrix* m, void* base);
// Converts `n_rows` GGUF rows (already copied to the device at `raw`) into rows
// [row0, row0 + n_rows) of `m`. Float types are copied as is.
Status repack_rows(const void* raw, int64_t row0, int64_t n_rows, const DeviceMatrix& m,
                   cudaStream_t stream);

// out[i][:] = row tokens[i] of `table` as f32, i < n.
// A token t < 0 stands for prev[-t - 1] (a pipelined step's input picked by the step
// before, still on the device).
Status embed_rows(const DeviceMatrix& table, const int32_t* tokens, int n, float* out,
                  cudaStream_t stream, const int32_t* prev = nullptr);

// out[i] = x[r] / sqrt(mean(x[r]^2) + eps) * w, r = rows ? rows[i] : i, converted to
// out_type; rows of x have stride x_stride floats, rows of out are dim wide.
// With amax_out, also max-reduces |out| (as stored, after rounding to out_type) into
// *amax_out (fp8_amax's encoding): the FP8 product that reads `out` then skips its own
// pass over it (Gemm::fp8_amax_slot).
Status rms_norm(const float* x, int64_t x_stride, const int32_t* rows, const float* w, void* out,
                ActType out_type, int n, int dim, float eps, cudaStream_t stream,
                uint32_t* amax_out = nullptr);

// out[i][j] = silu(gu[i][j]) * gu[i][ff + j], converted to out_type ([n][ff]).
Status silu_mul(const float* gu, int n, int ff, void* out, ActType out_type, cudaStream_t stream);

// 8-bit activations of n rows, the input of the quantized matrix-vector products
// (gemv_q8.h): each 32-element block of a row (its values first rounded to fp16, the
// quantized weights' activation type) as q = round(x * 127 / amax) with d = amax / 127,
// s = d x sum(q) (Q4_1's offset, both rounded to fp16 as llama.cpp and the CPU backend
// do) and c = sum(q) (Q4_0's). q is [n][cols], d, s and c are [n][cols / 32].
struct Q8Act {
  int8_t* q = nullptr;
  float* d = nullptr;
  float* s = nullptr;
  int32_t* c = nullptr;
  int64_t cols = 0;
};
// rms_norm and silu_mul writing 8-bit activations (out.cols == dim, resp. ff; a multiple
// of 32): for a decode step of quantized weights this saves the separate quantization
// kernel before the product, with the same bytes as rms_norm / silu_mul to f16 followed
// by it.
Status rms_norm_q8(const float* x, int64_t x_stride, const int32_t* rows, const float* w,
                   const Q8Act& out, int n, int dim, float eps, cudaStream_t stream);
Status silu_mul_q8(const float* gu, int n, int ff, const Q8Act& out, cudaStream_t stream);

// How the KV pool stores K and V: fp16, or FP8 E4M3 with one scale per tensor (the
// stored byte is x / scale, saturated to +-448; readers multiply back). FP8 halves the
// bytes a decode step reads and the pool's size per token.
enum class KvType : uint8_t { kF16, kFp8E4M3 };
inline size_t kv_elem_bytes(KvType t) {
  return t == KvType::kF16 ? 2 : 1;
}

// The paged KV pool of one layer: K and V both [block][kv_head][slot][head_dim] of `type`
// (the CPU keeps K transposed; on the GPU rows of head_dim suit wide loads and the
// tensor-core fragments of the prefill kernel).
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  KvType type = KvType::kF16;
  float k_scale = 1.0f;  // FP8 only: real value = stored value * scale
  float v_scale = 1.0f;
};

// A batch as index arrays on the device (FlashInfer's style): sequence s owns rows
// [seq_q_row[s], seq_q_row[s] + seq_n_q[s]) at positions seq_pos0[s].., and its block
// table is blocks[seq_blocks_off[s] ..]. row_seq / row_pos give each row's sequence and
// position.
struct DeviceBatch {
  int n_rows = 0;
  int n_seqs = 0;
  const int32_t* row_seq = nullptr;
  const int32_t* row_pos = nullptr;
  const int32_t* seq_q_row = nullptr;
  const int32_t* seq_n_q = nullptr;
  const int32_t* seq_pos0 = nullptr;
  const int32_t* seq_blocks_off = nullptr;
  const int32_t* blocks = nullptr;
};

struct RopeParams {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_pairs = 0;  // rope_dims / 2
  bool neox = false;
  float theta_scale = 1;                // rope_theta^(-2/rope_dims)
  float freq_scale = 1;                 // linear scaling
  const float* freq_factors = nullptr;  // llama3 per-pair divisors (device), or null
};

// cos/sin of every (row, pair) angle of the batch, computed once per forward pass as
// the CPU computes them: cs[row][pair] = {cos, sin} ([n_rows][n_pairs][2] floats).
Status rope_tables(const RopeParams& p, const DeviceBatch& b, float* cs, cudaStream_t stream);

// For each row of qkv ([n_rows][q_dim + 2 kv_dim], f32): adds `bias` (or not), rotates q
// and k by the angles in `cs` (rope_tables), writes q rounded to fp16 into q_out
// ([n_rows][q_dim]) and k, v in the pool's type into the row's cache slot.
Status rope_qkv_store(const float* qkv, const float* bias, const RopeParams& p, const float* cs,
                      const DeviceBatch& b, uint16_t* q_out, const KvLayerView& kv,
                      cudaStream_t stream);

// out[i] = index of the largest of logits[i][0 .. n_vocab) (the first on ties), i < n.
Status argmax_rows(const float* logits, int n, int n_vocab, int32_t* out, cudaStream_t stream);

// out[r] = the token drawn for logit row r ([n][n_vocab] f32, penalised in place) as
// rows[r] says (core/sampling_row.h; sample.cu).
Status sample_rows(float* logits, int n, int n_vocab, const SamplingRow* rows,
                   const int32_t* penalties, int32_t* out, cudaStream_t stream);

// The work of one attention call. Rows listed in decode_rows go to a decode kernel
// (split-KV flash-decoding: one query row, all query heads of a KV head, the context cut
// into splits merged afterwards; on tensor cores for head sizes 64 and 128 and groups of
// up to 16 heads, else the row kernel); sequences in prefill_seqs go to the tiled tensor-core
// kernel (64 queries of one head per block; head sizes 64 and 128). The caller sends
// decodes and short chunks to the first, prefill chunks to the second, and every row
// to the first when the head size has no tensor-core kernel.
struct AttentionPlan {
  const int32_t* decode_rows = nullptr;
  int n_decode_rows = 0;
  // KV splits per decode row; 0 picks decode_splits(). Each row cuts its own context
  // into that many chunks of at least 64 keys (later splits of a short context are empty),
  // so launches do not depend on context lengths and replay from a CUDA graph.
  int n_splits = 0;
  const int32_t* prefill_seqs = nullptr;
  int n_prefill_seqs = 0;
  int max_prefill_q = 0;  // largest n_q among prefill sequences
  // Scratch for split-KV partial results (attention_workspace_bytes).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
// A sequence with at most this many queries runs through the row kernel.
constexpr int kDecodeMaxQueries = 4;
bool has_prefill_kernel(int head_dim);
// Splits for n_rows decode rows: enough blocks to fill the GPU twice.
int decode_splits(int n_rows, int n_kv_heads);
// Splits for decode rows whose longest context is max_ctx keys: about keys_per_split keys
// a split, rounded up to a power of two (few distinct values, so few CUDA graphs), never
// more than decode_splits(). One split needs no merge kernel: a short context at batch 1
// otherwise runs 32 splits, most of them empty, and the merge.
int decode_splits_for_context(int n_rows, int n_kv_heads, int max_ctx, int keys_per_split);
// Tests and benchmarks: keys per worker step of the decode kernel on an FP8 pool (4 or
// 8, the default).
void set_decode_fp8_unroll(int keys);
// Whether kernels may launch as programmatic dependents on Hopper (CudaSwitches::pdl,
// PAGODA_CUDA_PDL); on by default.
void set_pdl_allowed(bool allowed);
// Tests and benchmarks: whether decode rows go to the tensor-core kernel where it applies
// (true, the default) or always to the row kernel.
void set_decode_tensor_cores(bool on);
// Workspace for up to max_rows decode rows with any context.
size_t attention_workspace_bytes(int max_rows, int n_heads, int head_dim);

// out[row][h*head_dim + d] = softmax(q_h . K^T * scale, causal) . V, in out_type. q is
// fp16 [rows][n_heads * head_dim].
Status attention(const uint16_t* q, const KvLayerView& kv, const DeviceBatch& b,
                 const AttentionPlan& plan, int n_heads, float scale, void* out, ActType out_type,
                 cudaStream_t stream);

// y[t][r] (+)= sum_c W[r][c] x[t][c] for t < n, by the matrix-vector kernel (n <= 8;
// F32/F16/BF16 weights: quantized ones go through gemv_q8.h).
constexpr int kGemvMaxTokens = 8;
Status gemv(const DeviceMatrix& w, const void* x, int64_t x_stride, int n, float* y,
            int64_t y_stride, bool accumulate, cudaStream_t stream);
// Tests and benchmarks: force 1 or 2 warps per row in gemv (0: the size heuristic).
void set_gemv_split_override(int split);

// What a one-token matrix-vector product (gemv_fused) does besides multiplying, so that
// the small ops around it need no kernels of their own: on the 8B model's batch-1 step
// each of those costs a few microseconds of kernel boundary for little work.
//  - kRopeKv: the epilogue replaces the store of y (y is then not written): the rows are
//    a layer's qkv, and they go where rope_qkv_store puts them (bias, RoPE of adjacent
//    pairs, q to q_out, k and v to the KV pool), with its roundings.
//  - GGUF block weights (Q8_0, Q4_0, Q4_1) take f16 activations and quantize them in
//    every block as quantize_q8 does, so their input needs no kernel of its own either.
// (Measured and dropped, bench/RESULTS.md stop 17: the RMSNorm in front of a product,
// normalised by every block or on the fly from the sum of squares of the product that
// stored the row, and SiLU-and-multiply after gate/up: each lost time on the H200.)
struct GemvFusion {
  enum Kind : uint8_t { kStore, kRopeKv };
  Kind kind = kStore;
  // kRopeKv
  const float* bias = nullptr;
  RopeParams rope;
  const float* cs = nullptr;  // rope_tables of the batch
  DeviceBatch batch;
  uint16_t* q_out = nullptr;
  KvLayerView kv;
  // The next RMSNorm folded into the products on either side of it (one-token steps; the
  // norm's kernel and its two kernel boundaries go). The product that accumulates into
  // the residual (kStore with accumulate) also writes norm_out[r] = y[r] * norm_w[r] in
  // norm_out_type, un-normalised, and adds y[r]^2 in fixed point (kNormFixed units) into
  // slot r % kNormSlots of norm_ss: integer sums, so the scale is the same whatever order the
  // rows finish in. The product that reads norm_out (any kind) multiplies its sums by
  // 1 / sqrt(sum / in_dim + in_eps) from in_ss, which is the norm's scale, applied after
  // the product rather than before it. norm_ss must be zero before the producer runs.
  const float* norm_w = nullptr;
  void* norm_out = nullptr;
  ActType norm_out_type = ActType::kF16;
  unsigned long long* norm_ss = nullptr;
  const unsigned long long* in_ss = nullptr;
  int in_dim = 0;
  float in_eps = 0.0f;
  // Block weights only (the products quantizing their own input): the RMSNorm before the
  // product in its prologue. x is then the f32 residual; each block sums the row's squares
  // and quantizes x / sqrt(mean + in_eps) * in_norm_w itself. The norm's kernel and one
  // kernel boundary go, no other product takes part, and no f16 ever holds x * norm_w
  // un-normalised (why the slots above fold only into bf16 and f32 activations).
  const float* in_norm_w = nullptr;
};
// norm_ss / in_ss: a norm's sum of squares is spread over kNormSlots slots, each in a
// 128-byte line of its own (kNormSlotStride values apart), so that a product's atomics
// spread over L2 rather than queueing at one line; kNormBytes a norm. The fixed-point
// unit of a square is 2^-28, so sums up to 2^36 (a row's mean square up to 2^24 at 4,096
// columns) fit 64 bits.
constexpr int kNormSlots = 32;
constexpr int kNormSlotStride = 16;
constexpr size_t kNormBytes = kNormSlots * kNormSlotStride * sizeof(unsigned long long);
constexpr double kNormFixed = 268435456.0;
// Whether gemv_fused runs `f` for a product of `w` with n tokens (n == 1; float, FP8 and
// Q8_0 / Q4_0 / Q4_1 weights; RoPE over adjacent pairs; a norm's output only from a
// storing product); where not, the caller runs the separate kernels.
bool gemv_takes(const DeviceMatrix& w, int n, const GemvFusion& f);
// y (+)= W x for one token with the fusion `f` (gemv_takes(w, 1, f) must hold); x in
// act_type_for(w.type) (f16 for block weights; f32 with in_norm_w); y is written only for
// kStore.
Status gemv_fused(const DeviceMatrix& w, const void* x, float* y, bool accumulate,
                  const GemvFusion& f, cudaStream_t stream);
// Dequantizes a quantized matrix into fp16 rows ([rows][cols]) for the GEMM path.
Status dequantize_to_f16(const DeviceMatrix& w, uint16_t* out, cudaStream_t stream);

// Per-tensor FP8 quantization of a rows x cols matrix of `t` (row stride `stride`
// elements): *amax_bits must be 0 before fp8_amax, which max-reduces |x| into it (the
// bits of a non-negative float order as the float does); fp8_quantize then writes
// out[r][c] = E4M3(x / scale), saturated, with scale = amax / 448 (1 when amax is 0),
// to `out` ([rows][cols]) and the scale to *scale. Both stay on the device, so a
// product quantizes its activations inside a CUDA graph.
Status fp8_amax(const void* x, ActType t, int64_t rows, int64_t cols, int64_t stride,
                uint32_t* amax_bits, cudaStream_t stream);
// With `reset` (a counter, 0 between calls), the max is set back to 0 once every block
// has read it: a product's max then needs no memset before it.
Status fp8_quantize(const void* x, ActType t, int64_t rows, int64_t cols, int64_t stride,
                    uint32_t* amax_bits, uint8_t* out, float* scale, cudaStream_t stream,
                    uint32_t* reset = nullptr);

// Fills n floats with NaN (tests poison outputs with it).
Status fill_nan(void* p, size_t bytes, cudaStream_t stream);

}  // namespace pagoda::cuda
