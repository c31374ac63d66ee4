#include "core/settings.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "core/log.h"

namespace pagoda {
namespace {

using Names = std::initializer_list<std::pair<const char*, unsigned>>;

Status bad(const char* name, std::string_view text, const std::string& expected) {
  return invalid_argument(str_format("%s=%.*s: expected %s", name, static_cast<int>(text.size()),
                                     text.data(), expected.c_str()));
}

}  // namespace

Result<int64_t> parse_setting(const char* name, const char* text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    return invalid_argument(str_format("%s=%s: expected an integer from %lld to %lld", name, text,
                                       static_cast<long long>(lo), static_cast<long long>(hi)));
  return static_cast<int64_t>(v);
}

namespace {

Result<int64_t> integer(const char* name, std::string_view text, int64_t lo, int64_t hi) {
  return parse_setting(name, std::string(text).c_str(), lo, hi);
}

Result<bool> flag(const char* name, std::string_view text) {
  if (text == "0") return false;
  if (text == "1") return true;
  return bad(name, text, "0 or 1");
}

Result<std::string> choice(const char* name, std::string_view text,
                           std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (text == a) return std::string(text);
    list += list.empty() ? a : std::string(", ") + a;
  }
  return bad(name, text, "one of " + list);
}

// A comma-separated list of names from `names`, or "all" / "none".
Result<unsigned> name_bits(const char* name, std::string_view text, Names names, unsigned all) {
  if (text == "all") return all;
  if (text == "none") return 0u;
  unsigned bits = 0;
  std::string list;
  for (const auto& [k, b] : names) list += list.empty() ? k : std::string(", ") + k;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view one = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    unsigned bit = 0;
    for (const auto& [k, b] : names)
      if (one == k) bit = b;
    if (bit == 0)
      return bad(name, one, "names from: " + list + " (comma-separated), or all, or none");
    bits |= bit;
  }
  return bits;
}

std::string show_bits(unsigned bits, Names names, unsigned all) {
  if (bits == all) return "all";
  if (bits == 0) return "none";
  std::string out;
  for (const auto& [k, b] : names)
    if ((bits & b) == b && (b & (b - 1)) == 0) out += (out.empty() ? "" : ",") + std::string(k);
  return out;
}

using C = CudaSwitches;
const Names kFuseNames = {{"rope", C::kFuseRope},
                          {"quant", C::kFuseQuant},
                          {"norm", C::kFuseNormAttn | C::kFuseNormFfn},
                          {"norm_attn", C::kFuseNormAttn},
                          {"norm_ffn", C::kFuseNormFfn}};
const Names kOmitNames = {
    {"norm", C::kOmitNorm},           {"qkv", C::kOmitQkv},   {"rope", C::kOmitRope},
    {"attention", C::kOmitAttention}, {"wo", C::kOmitWo},     {"gate_up", C::kOmitGateUp},
    {"silu", C::kOmitSilu},           {"down", C::kOmitDown}, {"output", C::kOmitOutput}};

std::string on_off(bool v) {
  return v ? "1" : "0";
}

// Sets `field` from a 0/1 flag.
#define PAGODA_FLAG(NAME, FIELD)                      \
  [](std::string_view t, Settings* s) -> Status {     \
    PAGODA_ASSIGN_OR_RETURN(s->FIELD, flag(NAME, t)); \
    return Status::ok();                              \
  },                                                  \
      [](const Settings& s) { return on_off(s.FIELD); }

const SettingSpec kTable[] = {
    {"PAGODA_LOG", "debug|info|warn|error|silent", "warn", "what the log prints to stderr",
     [](std::string_view t, Settings* s) -> Status {
       if (!log_level_named(t)) {
         std::string list;
         for (const auto& [n, level] : kLogLevelNames)
           list += (list.empty() ? "" : ", ") + std::string(n);
         return bad("PAGODA_LOG", t, "one of " + list);
       }
       s->log = std::string(t);
       return Status::ok();
     },
     [](const Settings& s) { return s.log; }},
    {"PAGODA_ISA", "generic|avx2|avx512", "(the CPU's best)",
     "caps the CPU kernels' instruction set (A/B runs, tests)",
     [](std::string_view t, Settings* s) -> Status {
       PAGODA_ASSIGN_OR_RETURN(s->isa, choice("PAGODA_ISA", t, {"generic", "avx2", "avx512"}));
       return Status::ok();
     },
     [](const Settings& s) { return s.isa.empty() ? std::string("(the CPU's best)") : s.isa; }},
    {"PAGODA_CUDA_PLUGIN", "path", "(beside the executable)", "the CUDA backend's shared library",
     [](std::string_view t, Settings* s) -> Status {
       s->cuda_plugin = std::string(t);
       return Status::ok();
     },
     [](const Settings& s) {
       return s.cuda_plugin.empty() ? std::string("(beside the executable)") : s.cuda_plugin;
     }},
    {"PAGODA_CUDA_FUSE", "names: rope,quant,norm,norm_attn,norm_ffn | all | none", "all",
     "fusions one-token CUDA steps take",
     [](std::string_view t, Settings* s) -> Status {
       PAGODA_ASSIGN_OR_RETURN(s->cuda.fuse,
                               name_bits("PAGODA_CUDA_FUSE", t, kFuseNames, C::kFuseAll));
       return Status::ok();
     },
     [](const Settings& s) { return show_bits(s.cuda.fuse, kFuseNames, C::kFuseAll); }},
    {"PAGODA_CUDA_OMIT", "names: norm,qkv,rope,attention,wo,gate_up,silu,down,output", "none",
     "CUDA ops left out of every step (timing only: outputs are wrong)",
     [](std::string_view t, Settings* s) -> Status {
       PAGODA_ASSIGN_OR_RETURN(s->cuda.omit,
                               name_bits("PAGODA_CUDA_OMIT", t, kOmitNames, C::kOmitAll));
       return Status::ok();
     },
     [](const Settings& s) { return show_bits(s.cuda.omit, kOmitNames, C::kOmitAll); }},
    {"PAGODA_CUDA_GRAPHS", "0|1", "1", "capture CUDA steps as graphs",
     PAGODA_FLAG("PAGODA_CUDA_GRAPHS", cuda.graphs)},
    {"PAGODA_CUDA_PROFILE", "0|1", "0", "time every CUDA op (eager steps; `pagoda bench`)",
     PAGODA_FLAG("PAGODA_CUDA_PROFILE", cuda.profile)},
    {"PAGODA_CUDA_PDL", "0|1", "1", "programmatic dependent launch on Hopper",
     PAGODA_FLAG("PAGODA_CUDA_PDL", cuda.pdl)},
    {"PAGODA_CUDA_SPLIT_KEYS", "integer 0..1048576", "256",
     "keys per split of CUDA decode attention (0: no split)",
     [](std::string_view t, Settings* s) -> Status {
       PAGODA_ASSIGN_OR_RETURN(const int64_t v, integer("PAGODA_CUDA_SPLIT_KEYS", t, 0, 1 << 20));
       s->cuda.split_keys = static_cast<int>(v);
       return Status::ok();
     },
     [](const Settings& s) { return std::to_string(s.cuda.split_keys); }},
    {"PAGODA_CUDA_Q8_UNROLL", "2|4", "2", "blocks per thread step in the CUDA q8 products",
     [](std::string_view t, Settings* s) -> Status {
       if (t != "2" && t != "4") return bad("PAGODA_CUDA_Q8_UNROLL", t, "2 or 4");
       s->cuda.q8_unroll = t == "4" ? 4 : 2;
       return Status::ok();
     },
     [](const Settings& s) { return std::to_string(s.cuda.q8_unroll); }},
    {"PAGODA_FP8_FAST_ACCUM", "0|1", "0", "cuBLASLt's FP8 fast accumulation",
     PAGODA_FLAG("PAGODA_FP8_FAST_ACCUM", cuda.fp8_fast_accum)},
    {"PAGODA_DEVICE_SAMPLING", "0|1", "1", "sample on the device when the backend can",
     PAGODA_FLAG("PAGODA_DEVICE_SAMPLING", device_sampling)},
    {"PAGODA_FAULT_INJECT", "forward_fail_after=N[,forward_fail_count=K]", "(none)",
     "tests: make forward passes fail",
     [](std::string_view t, Settings* s) -> Status {
       s->fault_inject = std::string(t);
       return Status::ok();
     },
     [](const Settings& s) { return s.fault_inject.empty() ? "(none)" : s.fault_inject; }},
    {"PAGODA_API_KEY", "string", "(none)", "`pagoda serve`: the key clients must present",
     [](std::string_view t, Settings* s) -> Status {
       s->api_key = std::string(t);
       return Status::ok();
     },
     [](const Settings& s) { return s.api_key.empty() ? "(none)" : std::string("(set)"); }},
};

#undef PAGODA_FLAG

}  // namespace

std::span<const SettingSpec> setting_table() {
  return kTable;
}

Result<Settings> read_settings(const std::function<const char*(const char*)>& lookup) {
  Settings s;
  for (const SettingSpec& spec : kTable) {
    const char* v = lookup ? lookup(spec.name) : std::getenv(spec.name);
    if (v == nullptr || *v == '\0') continue;
    PAGODA_RETURN_IF_ERROR(spec.set(v, &s));
  }
  return s;
}

std::string describe_settings(const Settings& s) {
  std::string out;
  for (const SettingSpec& spec : kTable)
    out += str_format("%-24s %s\n    %s (%s; default %s)\n", spec.name, spec.show(s).c_str(),
                      spec.meaning, spec.type, spec.fallback);
  return out;
}

}  // namespace pagoda
