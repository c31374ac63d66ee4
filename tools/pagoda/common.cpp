#include "common.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "args.h"
#include "backend/cpu/cpu_features.h"
#include "core/log.h"
#include "core/settings.h"
#include "engine/model_tokenizer.h"
#include "model/runner.h"

namespace pagoda::cli {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<Loaded> load(const std::string& path, bool want_model, bool want_tokenizer) {
  const double t0 = now_seconds();
  Loaded l;
  PAGODA_ASSIGN_OR_RETURN(l.file, open_tensor_source(path));
  if (want_tokenizer) {
    auto tok = load_tokenizer(*l.file);
    if (!tok) return tok.status().with_context("loading the tokenizer of '" + path + "'");
    l.tokenizer = std::move(tok).value();
  }
  if (want_model) {
    auto m = Model::load(*l.file);
    if (!m) return m.status().with_context("loading the model '" + path + "'");
    l.model = std::move(m).value();
  }
  l.load_seconds = now_seconds() - t0;
  return l;
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error("error reading '" + path + "'");
  return text.str();
}

Result<ChunkFlags> parse_chunk_flags(const Args& args) {
  FlagReader flags(args);
  ChunkFlags c;
  c.chunks.n_ctx = static_cast<int>(flags.integer("--ctx-size", 512, 4, 1 << 20));
  c.chunks.n_chunks = static_cast<int>(flags.integer("--chunks", -1, -1, 1 << 30));
  c.chunks.n_batch = static_cast<int>(flags.integer("--batch-size", 512, 1, 1 << 16));
  c.threads = static_cast<int>(flags.integer("--threads", 0, 0, 1024));
  if (!flags.status()) return flags.status();
  return c;
}

Result<DeviceSpec> read_device_flag(const Args& args, const std::string& def) {
  return parse_device_spec(args.get_or("--device", def));
}

Result<std::vector<int32_t>> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',' || s[i] == '\n' || s[i] == '\t')) ++i;
    if (i >= s.size()) break;
    char* end = nullptr;
    const long v = std::strtol(s.c_str() + i, &end, 10);
    if (end == s.c_str() + i || v < 0 || v > INT32_MAX)
      return invalid_argument("bad token list near '" + s.substr(i, 16) + "'");
    out.push_back(static_cast<int32_t>(v));
    i = static_cast<size_t>(end - s.c_str());
  }
  return out;
}

int fail(const std::string& command, const Status& s) {
  std::fprintf(stderr, "pagoda %s: error: %s\n", command.c_str(), s.message().c_str());
  return 1;
}

namespace {
Settings g_settings;
}  // namespace

Status init_settings() {
  PAGODA_ASSIGN_OR_RETURN(g_settings, read_settings());
  const Settings& s = g_settings;
  if (const auto level = log_level_named(s.log)) set_log_level(*level);
  if (s.isa == "generic") cpu::set_isa_override(cpu::Isa::kGeneric);
  if (s.isa == "avx2") cpu::set_isa_override(cpu::Isa::kAvx2);
  set_cuda_plugin_path(s.cuda_plugin);
  return Status::ok();
}

const Settings& settings() {
  return g_settings;
}

}  // namespace pagoda::cli
