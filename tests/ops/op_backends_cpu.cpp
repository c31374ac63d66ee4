// The op table's backends in pagoda_tests: the reference, and the CPU backend's kernels
// (what the engine runs) capped at each ISA level, so every level's kernels meet the
// table; a level this machine lacks skips.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "../op_table/op_table.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/thread_pool.h"

namespace pagoda::optest {
namespace {

ThreadPool& pool() {
  static ThreadPool p(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u)));
  return p;
}

bool has_isa(cpu::Isa isa) {
  cpu::set_isa_override(cpu::Isa::kAvx512);
  return static_cast<int>(isa) <= static_cast<int>(cpu::best_isa());
}

// Caps the ISA level while alive.
class IsaScope {
 public:
  explicit IsaScope(cpu::Isa isa) { cpu::set_isa_override(isa); }
  ~IsaScope() { cpu::set_isa_override(cpu::Isa::kAvx512); }
};

class CpuOp : public PreparedOp {
 public:
  CpuOp(const OpCase& c, const OpInputs& in, cpu::Isa isa) : c_(c), in_(in), isa_(isa) {
    y_.assign(output_size(c), NAN);
  }

  Status prepare() {
    if (c_.op == Op::kMatmul || c_.op == Op::kEmbed) {
      auto w = cpu::WeightMatrix::from_gguf(c_.wtype, in_.w.data(), c_.n, c_.k);
      if (!w) return w.status();
      w_ = std::make_unique<cpu::WeightMatrix>(std::move(w).value());
    }
    if (c_.op == Op::kAttention) {
      IsaScope scope(isa_);
      const int kvd = c_.n_kv_heads * c_.head_dim;
      const size_t elems = static_cast<size_t>(in_.n_blocks) * c_.block_size * kvd;
      // NaN (or -128 with NaN scales) in every slot no sequence owns.
      if (c_.kv == KvKind::kQ8_0) {
        k8_.assign(elems, -128);
        v8_.assign(elems, -128);
        ks_.assign(elems / 32, 0x7e00);
        vs_.assign(elems / 32, 0x7e00);
        kv_ = cpu::KvLayer{nullptr,    nullptr,    c_.block_size, c_.n_kv_heads, c_.head_dim,
                           k8_.data(), v8_.data(), ks_.data(),    vs_.data()};
      } else {
        k16_.assign(elems, 0x7e00);
        v16_.assign(elems, 0x7e00);
        kv_ = cpu::KvLayer{k16_.data(), v16_.data(), c_.block_size, c_.n_kv_heads, c_.head_dim};
      }
      int row = 0;
      for (size_t s = 0; s < c_.seqs.size(); ++s) {
        const int len = c_.seqs[s].pos0 + c_.seqs[s].n_q;
        cpu::kv_write(kv_, BatchSeq{0, len, 0, in_.tables[s].data()}, in_.keys[s].data(),
                      in_.vals[s].data(), kvd);
        seqs_.push_back(BatchSeq{row, c_.seqs[s].n_q, c_.seqs[s].pos0, in_.tables[s].data()});
        row += c_.seqs[s].n_q;
      }
    }
    return Status::ok();
  }

  Status run() override {
    IsaScope scope(isa_);
    const int64_t m = c_.m, k = c_.k;
    switch (c_.op) {
      case Op::kMatmul:
        cpu::matmul(*w_, in_.x.data(), m, k, y_.data(), c_.n, pool(), scratch_);
        break;
      case Op::kEmbed:
        for (int64_t i = 0; i < m; ++i) w_->dequantize_row(in_.tokens[i], y_.data() + i * k);
        break;
      case Op::kRmsNorm:
        for (int64_t i = 0; i < m; ++i)
          cpu::rms_norm(in_.x.data() + i * k, in_.w_norm.data(), y_.data() + i * k, k, 1e-5f);
        break;
      case Op::kSiluMul:
        for (int64_t i = 0; i < m; ++i)
          cpu::silu_mul(in_.x.data() + i * 2 * k, in_.x.data() + i * 2 * k + k, y_.data() + i * k,
                        k);
        break;
      case Op::kRope: {
        const int pairs = c_.rope_dims / 2, width = c_.n_heads * c_.head_dim;
        std::copy(in_.x.begin(), in_.x.end(), y_.begin());
        for (int64_t r = 0; r < m; ++r)
          cpu::rope(y_.data() + r * width, c_.n_heads, c_.head_dim, pairs,
                    in_.cos_t.data() + r * pairs, in_.sin_t.data() + r * pairs, c_.neox);
        break;
      }
      case Op::kAttention: {
        const int qd = c_.n_heads * c_.head_dim;
        const cpu::AttentionParams p{c_.n_heads, in_.scale};
        cpu::attention(kv_, seqs_.data(), static_cast<int>(seqs_.size()), p, in_.x.data(), qd,
                       y_.data(), qd, pool());
        break;
      }
    }
    return Status::ok();
  }

  Result<std::vector<float>> output() override { return y_; }

 private:
  const OpCase& c_;
  const OpInputs& in_;
  cpu::Isa isa_;
  std::vector<float> y_;
  std::unique_ptr<cpu::WeightMatrix> w_;
  cpu::MatmulScratch scratch_;
  cpu::KvLayer kv_;
  std::vector<uint16_t> k16_, v16_, ks_, vs_;
  std::vector<int8_t> k8_, v8_;
  std::vector<BatchSeq> seqs_;
};

class CpuBackend : public OpBackend {
 public:
  explicit CpuBackend(cpu::Isa isa) : isa_(isa) {}
  std::string name() const override { return "cpu_" + std::string(cpu::isa_name(isa_)); }

  std::string skip_reason(const OpCase& c) const override {
    if (!has_isa(isa_)) return "this machine has no " + std::string(cpu::isa_name(isa_));
    if ((c.op == Op::kMatmul || c.op == Op::kEmbed) && !cpu::is_supported_weight_type(c.wtype))
      return "no kernel for " + std::string(dtype_name(c.wtype)) + " weights";
    if (c.out != OutType::kF32) return "its row-wise ops write f32 only";
    if (c.op == Op::kAttention && c.kv == KvKind::kFp8) return "no FP8 KV pool (q8_0 instead)";
    if (c.op == Op::kAttention && c.kv == KvKind::kQ8_0 && c.head_dim % 32 != 0)
      return "an 8-bit pool needs head_dim a multiple of 32";
    return "";
  }

  Result<std::unique_ptr<PreparedOp>> prepare(const OpCase& c, const OpInputs& in) override {
    auto op = std::make_unique<CpuOp>(c, in, isa_);
    PAGODA_RETURN_IF_ERROR(op->prepare());
    return std::unique_ptr<PreparedOp>(std::move(op));
  }

 private:
  cpu::Isa isa_;
};

std::vector<std::unique_ptr<OpBackend>>& backends() {
  static std::vector<std::unique_ptr<OpBackend>> b = [] {
    std::vector<std::unique_ptr<OpBackend>> v;
    v.push_back(make_reference_backend());
    for (cpu::Isa isa : {cpu::Isa::kAvx512, cpu::Isa::kAvx2, cpu::Isa::kGeneric})
      v.push_back(std::make_unique<CpuBackend>(isa));
    return v;
  }();
  return b;
}

}  // namespace

const std::vector<std::string>& op_backend_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& b : backends()) v.push_back(b->name());
    return v;
  }();
  return names;
}

OpBackend* op_backend(const std::string& name) {
  for (const auto& b : backends())
    if (b->name() == name) return b.get();
  return nullptr;
}

}  // namespace pagoda::optest
