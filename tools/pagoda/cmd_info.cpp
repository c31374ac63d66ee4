// pagoda info: what a GGUF file holds (metadata, tensors, model configuration), or with
// --env the PAGODA_* switches and the values in force.
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "core/settings.h"

namespace pagoda::cli {

int cmd_info(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--model", "-m", true, "GGUF file"},
      {"--tensors", "", false, "list every tensor"},
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
