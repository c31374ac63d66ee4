// pagoda mkmodel: writes a GGUF model with random weights in any llama-like shape,
// taking its vocabulary from an existing GGUF file. Used to test architectures and
// features for which no small real model is at hand (Qwen2's biases, llama3 RoPE
// scaling), and to measure speed in real shapes without downloading weights. The
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

}  // namespace

int cmd_mkmodel(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--output", "-o", true, "file to write"},
      {"--arch", "", true, "llama or qwen2 (default llama)"},
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
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("mkmodel", args.status());
  if (args->has("--help")) {
    std::printf("%s",
                usage("mkmodel", "--vocab VOCAB.gguf -o OUT.gguf [shape flags]", specs).c_str());
    return 0;
  }
  if (!args->has("--output") || !args->has("--vocab"))
    return fail("mkmodel", invalid_argument("need --vocab VOCAB.gguf and -o OUT.gguf"));
  const Preset* preset = nullptr;
  if (args->has("--preset")) {
    for (const Preset& p : kPresets)
      if (*args->get("--preset") == p.name) preset = &p;
    if (!preset)
      return fail("mkmodel", invalid_argument("unknown --preset '" + *args->get("--preset") + "'"));
  }
  const std::string arch = args->get_or("--arch", preset ? preset->arch : "llama");
  if (arch != "llama" && arch != "qwen2")
    return fail("mkmodel", invalid_argument("--arch must be llama or qwen2"));
  FlagReader flags(*args);
  auto integer = [&](const char* flag, int64_t def, int64_t lo, int64_t hi) {
    return flags.integer(flag, def, lo, hi);
  };
  auto num = [&](const char* flag, double def, double lo, double hi) {
    return flags.number(flag, def, lo, hi);
  };
  const int64_t dim = integer("--dim", preset ? preset->dim : 64, 2, 1 << 16),
                layers = integer("--layers", preset ? preset->layers : 2, 1, 1024);
  const int64_t heads = integer("--heads", preset ? preset->heads : 4, 1, 1024);
  const int64_t kv_heads = integer("--kv-heads", preset ? preset->kv_heads : heads, 1, heads);
  const int64_t head_dim =
      integer("--head-dim", preset ? preset->head_dim : dim / std::max<int64_t>(heads, 1), 2, 1024);
  const int64_t ffn = integer("--ffn", preset ? preset->ffn : 4 * dim, 1, 1 << 20),
                ctx = integer("--ctx", preset ? preset->ctx : 2048, 1, 1 << 24);
  const double theta = num("--rope-theta", preset ? preset->rope_theta : 10000, 1.0001, 1e9);
  const double factor = num("--rope-factor", preset ? preset->rope_factor : 8, 1e-3, 1e6);
  const double lo_f = num("--rope-low-freq-factor", 1, 1e-6, 1e6),
               hi_f = num("--rope-high-freq-factor", 4, 1e-6, 1e6);
  const double orig_ctx = num("--rope-orig-ctx", 8192, 1, 1e9);
  const double stdev = num("--std", 0.02, 0, 100);
  const double embd_std = num("--embd-std", stdev, 0, 100);
  const uint64_t seed = static_cast<uint64_t>(integer("--seed", 42, 0, INT64_MAX));
  const std::string scaling =
      args->get_or("--rope-scaling", preset ? preset->rope_scaling : "none");
  const int threads = static_cast<int>(integer("--threads", 0, 0, 1024));
  if (!flags.status()) return fail("mkmodel", flags.status());
  if (heads % kv_heads != 0)
    return fail("mkmodel", invalid_argument("--heads must be a multiple of --kv-heads"));
  if (head_dim % 2) return fail("mkmodel", invalid_argument("head size must be even"));
  if (scaling != "none" && scaling != "linear" && scaling != "llama3")
    return fail("mkmodel", invalid_argument("--rope-scaling must be none, linear or llama3"));
  DType wtype;
  if (!parse_dtype(args->get_or("--type", "F32"), &wtype))
    return fail("mkmodel", invalid_argument("unknown --type"));

  auto vocab = GgufFile::open(*args->get("--vocab"));
  if (!vocab) return fail("mkmodel", vocab.status());
  const GgufValue* tokens = (*vocab)->find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->elem_type != GgufType::kString)
    return fail("mkmodel", corrupt("the --vocab file has no tokenizer.ggml.tokens"));
  const int64_t n_vocab = static_cast<int64_t>(tokens->count);

  GgufWriter w;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "pagoda random " + arch);
  w.set_u32(arch + ".block_count", static_cast<uint32_t>(layers));
  w.set_u32(arch + ".context_length", static_cast<uint32_t>(ctx));
  w.set_u32(arch + ".embedding_length", static_cast<uint32_t>(dim));
  w.set_u32(arch + ".feed_forward_length", static_cast<uint32_t>(ffn));
  w.set_u32(arch + ".attention.head_count", static_cast<uint32_t>(heads));
  w.set_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  if (head_dim * heads != dim) {
    w.set_u32(arch + ".attention.key_length", static_cast<uint32_t>(head_dim));
    w.set_u32(arch + ".attention.value_length", static_cast<uint32_t>(head_dim));
  }
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(arch + ".rope.freq_base", static_cast<float>(theta));
  w.set_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(head_dim));
  if (scaling == "linear") {
    w.set_string(arch + ".rope.scaling.type", "linear");
    w.set_f32(arch + ".rope.scaling.factor", static_cast<float>(factor));
  }
  for (const auto& [k, v] : (*vocab)->metadata())
    if (k.rfind("tokenizer.", 0) == 0) w.set_value(k, v);

  NormalRng rng(seed);
  ThreadPool pool(preset ? threads : 1);
  uint64_t tensor_index = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, double sd, double mean,
                 DType type) -> Status {
    const int64_t cols = ne[0];
    int64_t rows = 1;
    for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
    const size_t rb = row_bytes(type, cols);
    std::vector<uint8_t> data(rb * static_cast<size_t>(rows));
    ++tensor_index;
    if (!preset) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        for (float& x : row) x = static_cast<float>(mean + sd * rng.normal());
        PAGODA_RETURN_IF_ERROR(cpu::quantize_row(type, row.data(), data.data() + rb * r, cols));
      }
    } else {
      Status first;
      std::mutex mu;
      pool.parallel_for(rows, 16, [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = b; r < e; ++r) {
          NormalRng row_rng(mix(seed ^ mix(tensor_index << 32 ^ static_cast<uint64_t>(r))));
          for (float& x : row) x = static_cast<float>(mean + sd * row_rng.normal());
          Status s = cpu::quantize_row(type, row.data(), data.data() + rb * r, cols);
          if (!s) {
            std::lock_guard<std::mutex> lock(mu);
            if (first) first = s;
          }
        }
      });
      PAGODA_RETURN_IF_ERROR(first);
    }
    w.add_tensor(name, type, std::move(ne), std::move(data));
    return Status::ok();
  };
  const int64_t qd = heads * head_dim, kvd = kv_heads * head_dim;
  Status s = add("token_embd.weight", {dim, n_vocab}, embd_std, 0, wtype);
  if (s) s = add("output_norm.weight", {dim}, 0.1, 1.0, DType::kF32);
  const bool tied = args->has("--tied") || (preset && preset->tied);
  if (s && !tied) s = add("output.weight", {dim, n_vocab}, embd_std, 0, wtype);
  if (s && scaling == "llama3") {
    // Per-pair frequency divisors as Meta's Llama 3.1 reference defines them.
    std::vector<float> f(static_cast<size_t>(head_dim / 2));
    const double lo_wavelen = orig_ctx / lo_f, hi_wavelen = orig_ctx / hi_f;
    for (size_t i = 0; i < f.size(); ++i) {
      const double freq =
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double wavelen = 2 * M_PI / freq;
      double div = 1;
      if (wavelen > lo_wavelen) {
        div = factor;
      } else if (wavelen >= hi_wavelen) {
        const double smooth = (orig_ctx / wavelen - lo_f) / (hi_f - lo_f);
        div = 1 / ((1 - smooth) / factor + smooth);
      }
      f[i] = static_cast<float>(div);
    }
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", DType::kF32, {head_dim / 2}, std::move(bytes));
  }
  for (int64_t l = 0; l < layers && s; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    s = add(p + "attn_norm.weight", {dim}, 0.1, 1.0, DType::kF32);
    if (s) s = add(p + "attn_q.weight", {dim, qd}, stdev, 0, wtype);
    if (s) s = add(p + "attn_k.weight", {dim, kvd}, stdev, 0, wtype);
    if (s) s = add(p + "attn_v.weight", {dim, kvd}, stdev, 0, wtype);
    if (s && arch == "qwen2") {
      s = add(p + "attn_q.bias", {qd}, stdev * 10, 0, DType::kF32);
      if (s) s = add(p + "attn_k.bias", {kvd}, stdev * 10, 0, DType::kF32);
      if (s) s = add(p + "attn_v.bias", {kvd}, stdev * 10, 0, DType::kF32);
    }
    if (s) s = add(p + "attn_output.weight", {qd, dim}, stdev, 0, wtype);
    if (s) s = add(p + "ffn_norm.weight", {dim}, 0.1, 1.0, DType::kF32);
    if (s) s = add(p + "ffn_gate.weight", {dim, ffn}, stdev, 0, wtype);
    if (s) s = add(p + "ffn_up.weight", {dim, ffn}, stdev, 0, wtype);
    if (s) s = add(p + "ffn_down.weight", {ffn, dim}, stdev, 0, wtype);
  }
  if (!s) return fail("mkmodel", s);
  if (Status ws = w.write(*args->get("--output")); !ws) return fail("mkmodel", ws);
  return 0;
}

}  // namespace pagoda::cli
