// pagoda info: what a GGUF file or checkpoint folder holds (metadata or configuration,
// tensors), or with --env the PAGODA_* switches and the values in force.
#include <cstdio>

#include "args.h"
#include "backend/cpu/matmul.h"
#include "commands.h"
#include "common.h"
#include "core/settings.h"

namespace pagoda::cli {
namespace {

// --dequantize NAME --out FILE: the tensor as the loaders receive it (a compressed-tensors
// or bitsandbytes layer converted), dequantized to little-endian f32 rows, for tests against a
// reference.
int dump_tensor(const TensorSource& s, const std::string& name, const std::string& out) {
  const WeightTensor* t = s.find_tensor(std::string_view(name));
  if (t == nullptr) return fail("info", not_found("no tensor '" + name + "'"));
  std::vector<float> row(static_cast<size_t>(t->ne[0]));
  FILE* f = std::fopen(out.c_str(), "wb");
  if (f == nullptr) return fail("info", io_error("cannot write '" + out + "'"));
  const uint8_t* data = s.tensor_data(*t);
  const size_t stride = row_bytes(t->type, t->ne[0]);
  bool ok = true;
  for (int64_t r = 0; ok && r < t->n_elements() / t->ne[0]; ++r) {
    const Status st = cpu::dequantize_row(t->type, data + r * stride, row.data(), t->ne[0]);
    if (!st) {
      std::fclose(f);
      return fail("info", st);
    }
    ok = std::fwrite(row.data(), sizeof(float), row.size(), f) == row.size();
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return fail("info", io_error("cannot write '" + out + "'"));
  std::printf("%s %s [%lld, %lld] -> %s\n", name.c_str(), std::string(dtype_name(t->type)).c_str(),
              static_cast<long long>(t->ne[0]), static_cast<long long>(t->n_elements() / t->ne[0]),
              out.c_str());
  return 0;
}

// A checkpoint folder: the configuration config.json gives, and its tensors under the
// names the loaders use.
int info_folder(const std::string& path, bool tensors) {
  auto src = open_tensor_source(path);
  if (!src) return fail("info", src.status());
  const TensorSource& s = **src;
  auto c = s.model_config();
  if (!c) return fail("info", c.status());
  uint64_t total = 0;
  for (const WeightTensor& t : s.tensors()) total += t.size;
  std::printf("folder: %s (Hugging Face checkpoint, %s)\n", path.c_str(),
              std::string(s.format()).c_str());
  std::printf(
      "config: %s, %d layers, dim %d, %d heads (%d KV) of %d, ffn %d, vocab %d, context %d, "
      "rope theta %g%s, rms eps %g, %s output\n",
      c->arch.c_str(), c->n_layers, c->dim, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn_dim,
      c->n_vocab, c->context_length, c->rope_theta,
      c->rope_has_freq_factors ? " (llama3 scaling)" : "", c->rms_eps,
      c->recipe.tied_output ? "tied" : "separate");
  std::printf("tensors: %zu, %llu bytes of data\n", s.tensors().size(),
              static_cast<unsigned long long>(total));
  if (tensors) {
    for (const WeightTensor& t : s.tensors()) {
      std::printf("  %-40s %-5s [", t.file_name.c_str(), std::string(dtype_name(t.type)).c_str());
      for (int d = 0; d < t.n_dims; ++d)
        std::printf("%s%lld", d ? ", " : "", static_cast<long long>(t.ne[d]));
      std::printf("] as %s\n", t.name.c_str());
    }
  }
  return 0;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--model", "-m", true, "GGUF file or Hugging Face checkpoint folder"},
      {"--tensors", "", false, "list every tensor"},
      {"--dequantize", "", true, "write tensor NAME (as the loaders name it) as f32 to --out"},
      {"--out", "", true, "file for --dequantize"},
      {"--env", "", false, "list the PAGODA_* environment switches and the values in force"},
      {"--help", "-h", false, "show this help"},
  };
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("info", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("info", "-m FILE [--tensors] | --env", specs).c_str());
    return 0;
  }
  if (args->has("--env")) {
    std::printf("%s", describe_settings(settings()).c_str());
    return 0;
  }
  std::string path =
      args->get_or("--model", args->positional().empty() ? "" : args->positional()[0]);
  if (path.empty()) return fail("info", invalid_argument("missing -m FILE"));
  if (args->has("--dequantize")) {
    auto src = open_tensor_source(path);
    if (!src) return fail("info", src.status());
    const std::string out = args->get_or("--out", "");
    if (out.empty()) return fail("info", invalid_argument("--dequantize needs --out FILE"));
    return dump_tensor(**src, args->get_or("--dequantize", ""), out);
  }
  if (is_model_folder(path)) return info_folder(path, args->has("--tensors"));
  auto f = GgufFile::open(path);
  if (!f) return fail("info", f.status());
  const GgufFile& g = **f;
  std::printf("file: %s (GGUF v%u, %zu bytes, alignment %u)\n", path.c_str(), g.version(),
              g.file_size(), g.alignment());
  std::printf("metadata (%zu keys):\n", g.metadata().size());
  for (const auto& [k, v] : g.metadata())
    std::printf("  %s = %s\n", k.c_str(), v.to_string().c_str());
  uint64_t total = 0;
  for (const auto& t : g.tensors()) total += t.size;
  std::printf("tensors: %zu, %llu bytes of data\n", g.tensors().size(),
              static_cast<unsigned long long>(total));
  if (args->has("--tensors")) {
    for (const auto& t : g.tensors()) {
      std::printf("  %-40s %-5s [", t.name.c_str(), std::string(dtype_name(t.type)).c_str());
      for (int d = 0; d < t.n_dims; ++d)
        std::printf("%s%lld", d ? ", " : "", static_cast<long long>(t.ne[d]));
      std::printf("]\n");
    }
  }
  return 0;
}

}  // namespace pagoda::cli
