// pagoda mkmodel: writes a GGUF model with random weights in any llama-like shape,
// taking its vocabulary from an existing GGUF file. Used to test architectures and
// features for which no small real model is at hand (Qwen2's biases, Qwen3's q/k norms,
// llama3 RoPE scaling), and to measure speed in real shapes without downloading weights. The
// random stream is our own (splitmix64 + Box-Muller), so a given seed writes the same
// bytes on every machine. --preset writes the exact shapes of a published model (speed
// measurements without downloads, as vLLM's dummy weights); preset files draw each row
// from its own stream (seeded by tensor and row) so they are generated on all cores,
// with bytes that do not depend on the number of threads.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "args.h"
#include "backend/cpu/matmul.h"
#include "commands.h"
#include "common.h"
#include "core/thread_pool.h"
#include "model/gguf_writer.h"

namespace pagoda::cli {
namespace {

class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : state_(seed) {}
  double uniform() {  // (0, 1)
    return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  }
  float normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u = uniform(), v = uniform();
    const double r = std::sqrt(-2.0 * std::log(u));
    spare_ = static_cast<float>(r * std::sin(2 * M_PI * v));
    have_spare_ = true;
    return static_cast<float>(r * std::cos(2 * M_PI * v));
  }

 private:
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
  bool have_spare_ = false;
  float spare_ = 0;
};

// Shapes as in the models' published config.json files.
struct Preset {
  const char* name;
  const char* arch;
  int64_t dim, layers, heads, kv_heads, head_dim, ffn, ctx;
  double rope_theta;
  const char* rope_scaling;  // "none" or "llama3"
  double rope_factor;
  bool tied;
};
constexpr Preset kPresets[] = {
    {"llama3.1-8b", "llama", 4096, 32, 32, 8, 128, 14336, 131072, 500000, "llama3", 8, false},
    {"llama3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 131072, 500000, "llama3", 32, true},
    {"qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 128, 18944, 32768, 1000000, "none", 1, false},
    {"smollm2-135m", "llama", 576, 30, 9, 3, 64, 1536, 8192, 100000, "none", 1, true},
};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<FlagSpec> mkmodel_flag_specs() {
  return {
      {"--output", "-o", true, "file to write"},
      {"--arch", "", true, "llama, qwen2 or qwen3 (default llama)"},
      {"--vocab", "", true, "GGUF file whose tokenizer.* metadata (vocabulary) is copied"},
      {"--dim", "", true, "embedding width (default 64)"},
      {"--layers", "", true, "layers (default 2)"},
      {"--heads", "", true, "attention heads (default 4)"},
      {"--kv-heads", "", true, "KV heads (default: heads)"},
      {"--head-dim", "", true, "head size (default dim/heads)"},
      {"--ffn", "", true, "FFN width (default 4*dim)"},
      {"--ctx", "", true, "context length (default 2048)"},
      {"--rope-theta", "", true, "RoPE base (default 10000)"},
      {"--rope-scaling", "", true, "none, linear or llama3 (default none)"},
      {"--rope-factor", "", true, "scaling factor (default 8)"},
      {"--rope-low-freq-factor", "", true, "llama3 (default 1)"},
      {"--rope-high-freq-factor", "", true, "llama3 (default 4)"},
      {"--rope-orig-ctx", "", true, "llama3 original context (default 8192)"},
      {"--type", "", true, "type of the weight matrices (default F32)"},
      {"--tied", "", false, "no output.weight: the output projection is token_embd"},
      {"--std", "", true, "standard deviation of the weights (default 0.02)"},
      {"--embd-std", "", true, "standard deviation of token_embd/output (default: --std)"},
      {"--seed", "", true, "random seed (default 42)"},
      {"--preset", "", true,
       "exact shapes of llama3.1-8b, llama3.2-1b, qwen2.5-7b or smollm2-135m (flags still "
       "override)"},
      {"--threads", "-t", true, "threads for --preset files (default: all cores)"},
      {"--help", "-h", false, "show this help"},
  };
}

// The model to write, from the flags (and --preset's shapes where a flag is not given).
struct Shape {
  const Preset* preset = nullptr;
  std::string arch;
  int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, ctx = 0;
  double theta = 0, factor = 0, lo_f = 0, hi_f = 0, orig_ctx = 0;  // RoPE
  double stdev = 0, embd_std = 0;
  uint64_t seed = 0;
  std::string scaling;  // none, linear or llama3
  int threads = 0;
  DType wtype = DType::kF32;
  bool tied = false;
};

Result<const Preset*> find_preset(const Args& args) {
  if (!args.has("--preset")) return nullptr;
  for (const Preset& p : kPresets)
    if (*args.get("--preset") == p.name) return &p;
  return invalid_argument("unknown --preset '" + *args.get("--preset") + "'");
}

Result<Shape> read_shape(const Args& args) {
  Shape m;
  PAGODA_ASSIGN_OR_RETURN(m.preset, find_preset(args));
  const Preset* preset = m.preset;
  m.arch = args.get_or("--arch", preset ? preset->arch : "llama");
  if (m.arch != "llama" && m.arch != "qwen2" && m.arch != "qwen3")
    return invalid_argument("--arch must be llama, qwen2 or qwen3");
  FlagReader flags(args);
  auto integer = [&](const char* flag, int64_t def, int64_t lo, int64_t hi) {
    return flags.integer(flag, def, lo, hi);
  };
  auto num = [&](const char* flag, double def, double lo, double hi) {
    return flags.number(flag, def, lo, hi);
  };
  m.dim = integer("--dim", preset ? preset->dim : 64, 2, 1 << 16);
  m.layers = integer("--layers", preset ? preset->layers : 2, 1, 1024);
  m.heads = integer("--heads", preset ? preset->heads : 4, 1, 1024);
  m.kv_heads = integer("--kv-heads", preset ? preset->kv_heads : m.heads, 1, m.heads);
  m.head_dim = integer("--head-dim",
                       preset ? preset->head_dim : m.dim / std::max<int64_t>(m.heads, 1), 2, 1024);
  m.ffn = integer("--ffn", preset ? preset->ffn : 4 * m.dim, 1, 1 << 20);
  m.ctx = integer("--ctx", preset ? preset->ctx : 2048, 1, 1 << 24);
  m.theta = num("--rope-theta", preset ? preset->rope_theta : 10000, 1.0001, 1e9);
  m.factor = num("--rope-factor", preset ? preset->rope_factor : 8, 1e-3, 1e6);
  m.lo_f = num("--rope-low-freq-factor", 1, 1e-6, 1e6);
  m.hi_f = num("--rope-high-freq-factor", 4, 1e-6, 1e6);
  m.orig_ctx = num("--rope-orig-ctx", 8192, 1, 1e9);
  m.stdev = num("--std", 0.02, 0, 100);
  m.embd_std = num("--embd-std", m.stdev, 0, 100);
  m.seed = static_cast<uint64_t>(integer("--seed", 42, 0, INT64_MAX));
  m.scaling = args.get_or("--rope-scaling", preset ? preset->rope_scaling : "none");
  m.threads = static_cast<int>(integer("--threads", 0, 0, 1024));
  PAGODA_RETURN_IF_ERROR(flags.status());
  if (m.heads % m.kv_heads != 0)
    return invalid_argument("--heads must be a multiple of --kv-heads");
  if (m.head_dim % 2) return invalid_argument("head size must be even");
  if (m.scaling != "none" && m.scaling != "linear" && m.scaling != "llama3")
    return invalid_argument("--rope-scaling must be none, linear or llama3");
  if (!parse_dtype(args.get_or("--type", "F32"), &m.wtype))
    return invalid_argument("unknown --type");
  m.tied = args.has("--tied") || (preset && preset->tied);
  return m;
}

// The architecture's metadata, and the vocabulary copied from the --vocab file.
void write_metadata(const Shape& m, const GgufFile& vocab, GgufWriter* w) {
  const std::string& arch = m.arch;
  w->set_string("general.architecture", arch);
  w->set_string("general.name", "pagoda random " + arch);
  w->set_u32(arch + ".block_count", static_cast<uint32_t>(m.layers));
  w->set_u32(arch + ".context_length", static_cast<uint32_t>(m.ctx));
  w->set_u32(arch + ".embedding_length", static_cast<uint32_t>(m.dim));
  w->set_u32(arch + ".feed_forward_length", static_cast<uint32_t>(m.ffn));
  w->set_u32(arch + ".attention.head_count", static_cast<uint32_t>(m.heads));
  w->set_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(m.kv_heads));
  if (m.head_dim * m.heads != m.dim) {
    w->set_u32(arch + ".attention.key_length", static_cast<uint32_t>(m.head_dim));
    w->set_u32(arch + ".attention.value_length", static_cast<uint32_t>(m.head_dim));
  }
  w->set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w->set_f32(arch + ".rope.freq_base", static_cast<float>(m.theta));
  w->set_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(m.head_dim));
  if (m.scaling == "linear") {
    w->set_string(arch + ".rope.scaling.type", "linear");
    w->set_f32(arch + ".rope.scaling.factor", static_cast<float>(m.factor));
  }
  for (const auto& [k, v] : vocab.metadata())
    if (k.rfind("tokenizer.", 0) == 0) w->set_value(k, v);
}

// Adds tensors of normal random values to a writer. Without a preset one stream runs
// through every tensor in order; with one each row has its own stream (seeded by tensor
// and row), so rows are drawn on all cores with bytes independent of the thread count.
class RandomTensors {
 public:
  RandomTensors(const Shape& m, GgufWriter* w)
      : w_(w),
        seed_(m.seed),
        per_row_(m.preset != nullptr),
        rng_(m.seed),
        pool_(per_row_ ? m.threads : 1) {}

  Status add(const std::string& name, std::vector<int64_t> ne, double sd, double mean, DType type) {
    const int64_t cols = ne[0];
    int64_t rows = 1;
    for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
    const size_t rb = row_bytes(type, cols);
    std::vector<uint8_t> data(rb * static_cast<size_t>(rows));
    ++tensor_index_;
    PAGODA_RETURN_IF_ERROR(per_row_ ? fill_per_row(type, rows, cols, sd, mean, data.data())
                                    : fill_in_order(type, rows, cols, sd, mean, data.data()));
    w_->add_tensor(name, type, std::move(ne), std::move(data));
    return Status::ok();
  }

 private:
  Status fill_in_order(DType type, int64_t rows, int64_t cols, double sd, double mean,
                       uint8_t* out) {
    const size_t rb = row_bytes(type, cols);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (float& x : row) x = static_cast<float>(mean + sd * rng_.normal());
      PAGODA_RETURN_IF_ERROR(cpu::quantize_row(type, row.data(), out + rb * r, cols));
    }
    return Status::ok();
  }

  Status fill_per_row(DType type, int64_t rows, int64_t cols, double sd, double mean,
                      uint8_t* out) {
    const size_t rb = row_bytes(type, cols);
    Status first;
    std::mutex mu;
    pool_.parallel_for(rows, 16, [&](int64_t b, int64_t e) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = b; r < e; ++r) {
        NormalRng row_rng(mix(seed_ ^ mix(tensor_index_ << 32 ^ static_cast<uint64_t>(r))));
        for (float& x : row) x = static_cast<float>(mean + sd * row_rng.normal());
        Status s = cpu::quantize_row(type, row.data(), out + rb * r, cols);
        if (!s) {
          std::lock_guard<std::mutex> lock(mu);
          if (first) first = s;
        }
      }
    });
    return first;
  }

  GgufWriter* w_;
  uint64_t seed_;
  bool per_row_;
  NormalRng rng_;
  ThreadPool pool_;
  uint64_t tensor_index_ = 0;
};

// Llama 3.1's per-pair RoPE frequency divisors, as Meta's reference defines them.
std::vector<uint8_t> llama3_rope_freqs(const Shape& m) {
  std::vector<float> f(static_cast<size_t>(m.head_dim / 2));
  const double lo_wavelen = m.orig_ctx / m.lo_f, hi_wavelen = m.orig_ctx / m.hi_f;
  for (size_t i = 0; i < f.size(); ++i) {
    const double freq =
        std::pow(m.theta, -2.0 * static_cast<double>(i) / static_cast<double>(m.head_dim));
    const double wavelen = 2 * M_PI / freq;
    double div = 1;
    if (wavelen > lo_wavelen) {
      div = m.factor;
    } else if (wavelen >= hi_wavelen) {
      const double smooth = (m.orig_ctx / wavelen - m.lo_f) / (m.hi_f - m.lo_f);
      div = 1 / ((1 - smooth) / m.factor + smooth);
    }
    f[i] = static_cast<float>(div);
  }
  std::vector<uint8_t> bytes(f.size() * 4);
  std::memcpy(bytes.data(), f.data(), bytes.size());
  return bytes;
}

Status add_layer(const Shape& m, int64_t l, RandomTensors& t) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t qd = m.heads * m.head_dim, kvd = m.kv_heads * m.head_dim;
  const double sd = m.stdev;
  PAGODA_RETURN_IF_ERROR(t.add(p + "attn_norm.weight", {m.dim}, 0.1, 1.0, DType::kF32));
  PAGODA_RETURN_IF_ERROR(t.add(p + "attn_q.weight", {m.dim, qd}, sd, 0, m.wtype));
  PAGODA_RETURN_IF_ERROR(t.add(p + "attn_k.weight", {m.dim, kvd}, sd, 0, m.wtype));
  PAGODA_RETURN_IF_ERROR(t.add(p + "attn_v.weight", {m.dim, kvd}, sd, 0, m.wtype));
  if (m.arch == "qwen2") {
    PAGODA_RETURN_IF_ERROR(t.add(p + "attn_q.bias", {qd}, sd * 10, 0, DType::kF32));
    PAGODA_RETURN_IF_ERROR(t.add(p + "attn_k.bias", {kvd}, sd * 10, 0, DType::kF32));
    PAGODA_RETURN_IF_ERROR(t.add(p + "attn_v.bias", {kvd}, sd * 10, 0, DType::kF32));
  }
  if (m.arch == "qwen3") {  // per-head q and k RMSNorm weights, about 1 as trained ones
    PAGODA_RETURN_IF_ERROR(t.add(p + "attn_q_norm.weight", {m.head_dim}, 0.1, 1.0, DType::kF32));
    PAGODA_RETURN_IF_ERROR(t.add(p + "attn_k_norm.weight", {m.head_dim}, 0.1, 1.0, DType::kF32));
  }
  PAGODA_RETURN_IF_ERROR(t.add(p + "attn_output.weight", {qd, m.dim}, sd, 0, m.wtype));
  PAGODA_RETURN_IF_ERROR(t.add(p + "ffn_norm.weight", {m.dim}, 0.1, 1.0, DType::kF32));
  PAGODA_RETURN_IF_ERROR(t.add(p + "ffn_gate.weight", {m.dim, m.ffn}, sd, 0, m.wtype));
  PAGODA_RETURN_IF_ERROR(t.add(p + "ffn_up.weight", {m.dim, m.ffn}, sd, 0, m.wtype));
  return t.add(p + "ffn_down.weight", {m.ffn, m.dim}, sd, 0, m.wtype);
}

// Every tensor, in the order llama.cpp's converters write them.
Status add_tensors(const Shape& m, int64_t n_vocab, GgufWriter* w) {
  RandomTensors t(m, w);
  PAGODA_RETURN_IF_ERROR(t.add("token_embd.weight", {m.dim, n_vocab}, m.embd_std, 0, m.wtype));
  PAGODA_RETURN_IF_ERROR(t.add("output_norm.weight", {m.dim}, 0.1, 1.0, DType::kF32));
  if (!m.tied)
    PAGODA_RETURN_IF_ERROR(t.add("output.weight", {m.dim, n_vocab}, m.embd_std, 0, m.wtype));
  if (m.scaling == "llama3")
    w->add_tensor("rope_freqs.weight", DType::kF32, {m.head_dim / 2}, llama3_rope_freqs(m));
  for (int64_t l = 0; l < m.layers; ++l) PAGODA_RETURN_IF_ERROR(add_layer(m, l, t));
  return Status::ok();
}

}  // namespace

int cmd_mkmodel(int argc, char** argv) {
  const std::vector<FlagSpec> specs = mkmodel_flag_specs();
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("mkmodel", args.status());
  if (args->has("--help")) {
    std::printf("%s",
                usage("mkmodel", "--vocab VOCAB.gguf -o OUT.gguf [shape flags]", specs).c_str());
    return 0;
  }
  if (!args->has("--output") || !args->has("--vocab"))
    return fail("mkmodel", invalid_argument("need --vocab VOCAB.gguf and -o OUT.gguf"));
  const Result<Shape> shape = read_shape(*args);
  if (!shape) return fail("mkmodel", shape.status());

  auto vocab = GgufFile::open(*args->get("--vocab"));
  if (!vocab) return fail("mkmodel", vocab.status());
  const GgufValue* tokens = (*vocab)->find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->elem_type != GgufType::kString)
    return fail("mkmodel", corrupt("the --vocab file has no tokenizer.ggml.tokens"));

  GgufWriter w;
  write_metadata(*shape, **vocab, &w);
  if (Status s = add_tensors(*shape, static_cast<int64_t>(tokens->count), &w); !s)
    return fail("mkmodel", s);
  if (Status ws = w.write(*args->get("--output")); !ws) return fail("mkmodel", ws);
  return 0;
}

}  // namespace pagoda::cli
