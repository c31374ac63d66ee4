// The op table's backends in pagoda_cuda_tests: the reference and the GPU. Inputs go to
// the device as the engine hands them to the kernels (activations in the product's
// activation type, weights repacked, KV in the pool's layout), outputs come back as f32.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../op_table/op_table.h"
#include "backend/cuda/device.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "harness.h"

namespace pagoda::optest {
namespace {

using cuda::ActType;
using cuda::DeviceBuffer;

ActType act_of(OutType t) {
  return t == OutType::kF32 ? ActType::kF32 : t == OutType::kF16 ? ActType::kF16 : ActType::kBF16;
}

Result<DeviceBuffer> upload(const void* p, size_t bytes) {
  auto b = DeviceBuffer::alloc(std::max<size_t>(bytes, 16));
  if (!b) return b.status();
  if (bytes > 0 && cudaMemcpy(b->get(), p, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    return internal_error("copy to the device");
  return b;
}
template <typename T>
Result<DeviceBuffer> upload(const std::vector<T>& v) {
  return upload(v.data(), v.size() * sizeof(T));
}

Result<DeviceBuffer> nan_buffer(size_t bytes) {
  auto b = DeviceBuffer::alloc(std::max<size_t>(bytes, 16));
  if (!b) return b.status();
  PAGODA_RETURN_IF_ERROR(cuda::fill_nan(b->get(), b->bytes(), nullptr));
  return b;
}

// One for the whole run, never freed (the CUDA runtime may be gone at exit).
cuda::Gemm* gemm() {
  static cuda::Gemm* g = [] {
    auto r = cuda::Gemm::create();
    return r ? std::move(r).value().release() : nullptr;
  }();
  return g;
}

class CudaOp : public PreparedOp {
 public:
  CudaOp(const OpCase& c, const OpInputs& in) : c_(c), in_(in) {}

  Status prepare() {
    const OpCase& c = c_;
    switch (c.op) {
      case Op::kMatmul:
      case Op::kEmbed: {
        m_.type = c.wtype;
        m_.rows = c.n;
        m_.cols = c.k;
        PAGODA_ASSIGN_OR_RETURN(w_, nan_buffer(cuda::device_matrix_bytes(c.wtype, c.n, c.k)));
        cuda::assign_matrix_storage(&m_, w_.get());
        PAGODA_ASSIGN_OR_RETURN(DeviceBuffer raw, upload(in_.w));
        PAGODA_RETURN_IF_ERROR(cuda::repack_rows(raw.get(), 0, c.n, m_, nullptr));
        if (cudaDeviceSynchronize() != cudaSuccess) return internal_error("repack_rows");
        if (c.op == Op::kMatmul) {
          if (!gemm()) return internal_error("no cuBLASLt handle");
          const ActType at = cuda::act_type_for(c.wtype);
          PAGODA_ASSIGN_OR_RETURN(x_, upload(cuda::testing::encode_act(in_.x, at)));
          PAGODA_ASSIGN_OR_RETURN(y_, nan_buffer(output_size(c) * 4));
        } else {
          PAGODA_ASSIGN_OR_RETURN(x_, upload(in_.tokens));
          PAGODA_ASSIGN_OR_RETURN(y_, nan_buffer(output_size(c) * 4));
        }
        break;
      }
      case Op::kRmsNorm:
      case Op::kSiluMul: {
        PAGODA_ASSIGN_OR_RETURN(x_, upload(in_.x));
        PAGODA_ASSIGN_OR_RETURN(aux_, upload(in_.w_norm));
        PAGODA_ASSIGN_OR_RETURN(y_, nan_buffer(output_size(c) * cuda::act_bytes(act_of(c.out))));
        break;
      }
      case Op::kAttention:
        PAGODA_RETURN_IF_ERROR(prepare_attention());
        break;
      case Op::kRope:
        PAGODA_RETURN_IF_ERROR(prepare_rope());
        break;
    }
    return Status::ok();
  }

  Status run() override {
    const OpCase& c = c_;
    const int m = static_cast<int>(c.m);
    switch (c.op) {
      case Op::kMatmul:
        return gemm()->matmul(m_, x_.get(), c.k, m, y_.as<float>(), c.n, false, nullptr);
      case Op::kEmbed:
        return cuda::embed_rows(m_, x_.as<int32_t>(), m, y_.as<float>(), nullptr);
      case Op::kRmsNorm:
        return cuda::rms_norm(x_.as<float>(), c.k, nullptr, aux_.as<float>(), y_.get(),
                              act_of(c.out), m, static_cast<int>(c.k), 1e-5f, nullptr);
      case Op::kSiluMul:
        return cuda::silu_mul(x_.as<float>(), m, static_cast<int>(c.k), y_.get(), act_of(c.out),
                              nullptr);
      case Op::kAttention:
        return cuda::attention(x_.as<uint16_t>(), kv_, batch_, plan_, c.n_heads, in_.scale,
                               y_.get(), ActType::kF32, nullptr);
      case Op::kRope:
        return cuda::rope_qkv_store(x_.as<float>(), nullptr, rope_, aux_.as<float>(), batch_,
                                    y_.as<uint16_t>(), kv_, nullptr);
    }
    return unsupported(op_name(c.op));
  }

  Result<std::vector<float>> output() override {
    if (cudaDeviceSynchronize() != cudaSuccess) return internal_error("the op failed on the GPU");
    const size_t n = output_size(c_);
    const bool narrow = (c_.op == Op::kRmsNorm || c_.op == Op::kSiluMul || c_.op == Op::kRope) &&
                        c_.out != OutType::kF32;
    std::vector<uint8_t> raw(n * (narrow ? 2 : 4));
    if (cudaMemcpy(raw.data(), y_.get(), raw.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
      return internal_error("copy to the host");
    return cuda::testing::decode_act(raw, narrow ? act_of(c_.out) : ActType::kF32);
  }

  double median_ms(int reps) override {
    return cuda::testing::time_ms(reps, [&](int) { (void)run(); });
  }

 private:
  // RoPE runs inside rope_qkv_store (no kernel of its own): the case's rows as q, one
  // KV head after them, the angles' cos and sin as the table rope_tables would make;
  // the rotated q comes out in fp16, k and v go to a pool of one sequence.
  Status prepare_rope() {
    const OpCase& c = c_;
    const int hd = c.head_dim, qd = c.n_heads * hd, width = qd + 2 * hd, pairs = c.rope_dims / 2;
    const int m = static_cast<int>(c.m), bs = 16, n_blocks = (m + bs - 1) / bs;
    std::vector<float> qkv(static_cast<size_t>(m) * width, 0.5f), cs;
    for (int r = 0; r < m; ++r) {
      std::copy(in_.x.begin() + static_cast<std::ptrdiff_t>(r) * qd,
                in_.x.begin() + static_cast<std::ptrdiff_t>(r + 1) * qd,
                qkv.begin() + static_cast<std::ptrdiff_t>(r) * width);
      for (int i = 0; i < pairs; ++i) {
        cs.push_back(in_.cos_t[static_cast<size_t>(r * pairs + i)]);
        cs.push_back(in_.sin_t[static_cast<size_t>(r * pairs + i)]);
      }
    }
    rope_.n_heads = c.n_heads;
    rope_.n_kv_heads = 1;
    rope_.head_dim = hd;
    rope_.n_pairs = pairs;
    rope_.neox = c.neox;
    std::vector<int32_t> row_seq(static_cast<size_t>(m), 0), row_pos(static_cast<size_t>(m)),
        zero = {0}, n_q = {m}, blocks(static_cast<size_t>(n_blocks));
    for (int r = 0; r < m; ++r) row_pos[static_cast<size_t>(r)] = r;
    for (int b = 0; b < n_blocks; ++b) blocks[static_cast<size_t>(b)] = b;
    PAGODA_ASSIGN_OR_RETURN(x_, upload(qkv));
    PAGODA_ASSIGN_OR_RETURN(aux_, upload(cs));
    PAGODA_ASSIGN_OR_RETURN(k_, nan_buffer(static_cast<size_t>(n_blocks) * bs * hd * 2));
    PAGODA_ASSIGN_OR_RETURN(v_, nan_buffer(static_cast<size_t>(n_blocks) * bs * hd * 2));
    kv_ = cuda::KvLayerView{k_.get(), v_.get(), bs, 1, hd};
    for (auto [dst, src] :
         {std::pair{&d_row_seq_, &row_seq}, std::pair{&d_row_pos_, &row_pos},
          std::pair{&d_q_row_, &zero}, std::pair{&d_n_q_, &n_q}, std::pair{&d_pos0_, &zero},
          std::pair{&d_boff_, &zero}, std::pair{&d_blocks_, &blocks}}) {
      PAGODA_ASSIGN_OR_RETURN(*dst, upload(*src));
    }
    set_batch(m, 1);
    PAGODA_ASSIGN_OR_RETURN(y_, nan_buffer(output_size(c) * 2));
    return Status::ok();
  }

  void set_batch(int n_rows, int n_seqs) {
    batch_.n_rows = n_rows;
    batch_.n_seqs = n_seqs;
    batch_.row_seq = d_row_seq_.as<int32_t>();
    batch_.row_pos = d_row_pos_.as<int32_t>();
    batch_.seq_q_row = d_q_row_.as<int32_t>();
    batch_.seq_n_q = d_n_q_.as<int32_t>();
    batch_.seq_pos0 = d_pos0_.as<int32_t>();
    batch_.seq_blocks_off = d_boff_.as<int32_t>();
    batch_.blocks = d_blocks_.as<int32_t>();
  }

  // The pool in the GPU's layout ([block][kv_head][slot][head_dim], fp16 or E4M3 bytes of
  // x / scale), NaN in every slot no sequence owns; the batch as index arrays; decode
  // rows to the decode kernels, chunks of more than kDecodeMaxQueries to the prefill
  // kernel where the head size has one.
  Status prepare_attention() {
    const OpCase& c = c_;
    const int hd = c.head_dim, kvd = c.n_kv_heads * hd, bs = c.block_size;
    const bool fp8 = c.kv == KvKind::kFp8;
    const size_t elems = static_cast<size_t>(in_.n_blocks) * bs * kvd;
    std::vector<uint16_t> k16(fp8 ? 0 : elems, 0x7e00), v16(fp8 ? 0 : elems, 0x7e00);
    std::vector<uint8_t> k8(fp8 ? elems : 0, 0x7f), v8(fp8 ? elems : 0, 0x7f);
    std::vector<int32_t> row_seq, row_pos, q_row, n_q, pos0, boff, blocks, decode_rows,
        prefill_seqs;
    int row = 0;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const SeqSpec& sp = c.seqs[s];
      const int len = sp.pos0 + sp.n_q;
      for (int pos = 0; pos < len; ++pos) {
        const int32_t blk = in_.tables[s][static_cast<size_t>(pos / bs)];
        for (int g = 0; g < c.n_kv_heads; ++g)
          for (int d = 0; d < hd; ++d) {
            const size_t off =
                ((static_cast<size_t>(blk) * c.n_kv_heads + g) * bs + pos % bs) * hd +
                static_cast<size_t>(d);
            const size_t src = static_cast<size_t>(pos) * kvd + static_cast<size_t>(g * hd + d);
            if (fp8) {
              k8[off] = cuda::testing::to_fp8(in_.keys[s][src] / kFp8KScale);
              v8[off] = cuda::testing::to_fp8(in_.vals[s][src] / kFp8VScale);
            } else {
              k16[off] = f32_to_fp16(in_.keys[s][src]);
              v16[off] = f32_to_fp16(in_.vals[s][src]);
            }
          }
      }
      q_row.push_back(row);
      n_q.push_back(sp.n_q);
      pos0.push_back(sp.pos0);
      boff.push_back(static_cast<int32_t>(blocks.size()));
      blocks.insert(blocks.end(), in_.tables[s].begin(), in_.tables[s].end());
      const bool prefill = sp.n_q > cuda::kDecodeMaxQueries && cuda::has_prefill_kernel(hd);
      if (prefill) {
        prefill_seqs.push_back(static_cast<int32_t>(s));
        plan_.max_prefill_q = std::max(plan_.max_prefill_q, sp.n_q);
      }
      for (int t = 0; t < sp.n_q; ++t) {
        row_seq.push_back(static_cast<int32_t>(s));
        row_pos.push_back(sp.pos0 + t);
        if (!prefill) decode_rows.push_back(row + t);
      }
      row += sp.n_q;
    }
    if (fp8) {
      PAGODA_ASSIGN_OR_RETURN(k_, upload(k8));
      PAGODA_ASSIGN_OR_RETURN(v_, upload(v8));
    } else {
      PAGODA_ASSIGN_OR_RETURN(k_, upload(k16));
      PAGODA_ASSIGN_OR_RETURN(v_, upload(v16));
    }
    kv_ = cuda::KvLayerView{k_.get(), v_.get(), bs, c.n_kv_heads, hd};
    if (fp8) {
      kv_.type = cuda::KvType::kFp8E4M3;
      kv_.k_scale = kFp8KScale;
      kv_.v_scale = kFp8VScale;
    }
    std::vector<uint16_t> q16(in_.x.size());
    for (size_t i = 0; i < q16.size(); ++i) q16[i] = f32_to_fp16(in_.x[i]);
    PAGODA_ASSIGN_OR_RETURN(x_, upload(q16));
    for (auto [dst, src] :
         {std::pair{&d_row_seq_, &row_seq}, std::pair{&d_row_pos_, &row_pos},
          std::pair{&d_q_row_, &q_row}, std::pair{&d_n_q_, &n_q}, std::pair{&d_pos0_, &pos0},
          std::pair{&d_boff_, &boff}, std::pair{&d_blocks_, &blocks},
          std::pair{&d_decode_, &decode_rows}, std::pair{&d_prefill_, &prefill_seqs}}) {
      PAGODA_ASSIGN_OR_RETURN(*dst, upload(*src));
    }
    set_batch(row, static_cast<int>(c.seqs.size()));
    plan_.decode_rows = d_decode_.as<int32_t>();
    plan_.n_decode_rows = static_cast<int>(decode_rows.size());
    plan_.prefill_seqs = d_prefill_.as<int32_t>();
    plan_.n_prefill_seqs = static_cast<int>(prefill_seqs.size());
    const size_t ws_bytes =
        cuda::attention_workspace_bytes(std::max(1, plan_.n_decode_rows), c.n_heads, hd);
    PAGODA_ASSIGN_OR_RETURN(ws_, nan_buffer(ws_bytes));
    plan_.workspace = ws_.get();
    plan_.workspace_bytes = ws_bytes;
    PAGODA_ASSIGN_OR_RETURN(y_, nan_buffer(output_size(c) * 4));
    return Status::ok();
  }

  const OpCase& c_;
  const OpInputs& in_;
  cuda::DeviceMatrix m_;
  DeviceBuffer w_, x_, y_, aux_, k_, v_, ws_;
  DeviceBuffer d_row_seq_, d_row_pos_, d_q_row_, d_n_q_, d_pos0_, d_boff_, d_blocks_, d_decode_,
      d_prefill_;
  cuda::KvLayerView kv_;
  cuda::DeviceBatch batch_;
  cuda::AttentionPlan plan_;
  cuda::RopeParams rope_;
};

class CudaBackend : public OpBackend {
 public:
  std::string name() const override { return "cuda"; }

  std::string skip_reason(const OpCase& c) const override {
    if (!cuda::testing::have_device()) return "no CUDA device";
    if ((c.op == Op::kMatmul || c.op == Op::kEmbed) && !cuda::is_supported_device_type(c.wtype))
      return "no kernel for " + std::string(dtype_name(c.wtype)) + " weights";
    if (c.op == Op::kRope && c.out != OutType::kF16)
      return "RoPE runs inside rope_qkv_store, which stores q in fp16";
    if (c.op == Op::kAttention && c.kv == KvKind::kQ8_0) return "no q8_0 KV pool (FP8 instead)";
    return "";
  }

  Result<std::unique_ptr<PreparedOp>> prepare(const OpCase& c, const OpInputs& in) override {
    auto op = std::make_unique<CudaOp>(c, in);
    PAGODA_RETURN_IF_ERROR(op->prepare());
    return std::unique_ptr<PreparedOp>(std::move(op));
  }
};

std::vector<std::unique_ptr<OpBackend>>& backends() {
  static std::vector<std::unique_ptr<OpBackend>> b = [] {
    std::vector<std::unique_ptr<OpBackend>> v;
    v.push_back(make_reference_backend());
    v.push_back(std::make_unique<CudaBackend>());
    return v;
  }();
  return b;
}

}  // namespace

const std::vector<std::string>& op_backend_names() {
  static const std::vector<std::string> names = {"ref", "cuda"};
  return names;
}

OpBackend* op_backend(const std::string& name) {
  for (const auto& b : backends())
    if (b->name() == name) return b.get();
  return nullptr;
}

}  // namespace pagoda::optest
