// pagoda plan: what fits in device memory, and why -- weights, KV cache per token and per
// sequence, overheads, the KV pool, and what to change when it does not fit.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "ledger/plan.h"
#include "ledger/sources.h"

namespace pagoda::cli {
namespace {

using nlohmann::ordered_json;
namespace L = ledger;

std::string commas(int64_t v) {
  if (v == std::numeric_limits<int64_t>::max()) return "unlimited";
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > (s[0] == '-' ? 1 : 0); i -= 3)
    s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string human(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1099511627776.0) return str_format("%.2f TiB", b / 1099511627776.0);
  if (b >= 1073741824.0) return str_format("%.1f GiB", b / 1073741824.0);
  if (b >= 1048576.0) return str_format("%.1f MiB", b / 1048576.0);
  if (b >= 1024.0) return str_format("%.1f KiB", b / 1024.0);
  return str_format("%lld B", static_cast<long long>(bytes));
}

std::string both(int64_t bytes) {
  return commas(bytes) + " bytes (" + human(bytes) + ")";
}

// Physical memory of this machine, for planning on the CPU.
int64_t machine_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

// "80 layers x 2 (K, V) x 8 KV heads x 256 bytes (128 values in bf16)".
std::string kv_formula(const L::ModelShape& s, const L::KvRate& rate, L::LayerRange layers,
                       L::KvDtype kv, int tp) {
  int64_t full = 0, sliding = 0;
  for (int64_t l = layers.begin; l < layers.end; ++l) {
    full += s.attention(l) == L::LayerAttention::kFull;
    sliding += s.attention(l) == L::LayerAttention::kSliding;
  }
  const std::string type(L::kv_dtype_name(kv));
  std::string per_layer;
  if (s.is_mla()) {
    const int64_t n = s.kv_lora_rank + s.qk_rope_head_dim;
    per_layer = str_format("%lld bytes (latent %lld + rope %lld values in %s)",
                           static_cast<long long>(L::kv_vector_bytes(kv, n)),
                           static_cast<long long>(s.kv_lora_rank),
                           static_cast<long long>(s.qk_rope_head_dim), type.c_str());
  } else {
    const int64_t heads = L::kv_heads_per_rank(s, tp);
    per_layer = str_format("2 (K, V) x %lld KV head%s x %lld bytes (%lld values in %s)",
                           static_cast<long long>(heads), heads == 1 ? "" : "s",
                           static_cast<long long>(L::kv_vector_bytes(kv, s.head_dim)),
                           static_cast<long long>(s.head_dim), type.c_str());
  }
  std::string f;
  if (full > 0) f += str_format("%lld layers x ", static_cast<long long>(full)) + per_layer;
  if (sliding > 0) {
    f += (f.empty() ? "" : " + ") +
         str_format("%lld windowed layers (%s tokens) x ", static_cast<long long>(sliding),
                    commas(rate.window).c_str()) +
         per_layer;
  }
  return f.empty() ? "no attention layers" : f;
}

void print_list(bool json) {
  if (json) {
    ordered_json out = ordered_json::array();
    for (const L::CatalogEntry& e : L::catalog()) {
      const L::ModelShape s = e.shape();
      const L::WeightType t = *L::parse_weight_type(e.dtype);
      out.push_back({{"name", e.name},
                     {"hf_repo", e.hf_repo},
                     {"dtype", e.dtype},
                     {"params", L::weight_params(s)},
                     {"weight_bytes", L::weight_bytes(s, t)},
                     {"kv_bytes_per_token", L::kv_bytes_per_token(s, L::KvDtype::kBf16)},
                     {"max_context", s.max_context},
                     {"summary", e.summary}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%-17s %-8s %-6s %-11s %-16s %-9s %s\n", "name", "params", "dtype", "weights",
              "KV/token (bf16)", "context", "shape");
  for (const L::CatalogEntry& e : L::catalog()) {
    const L::ModelShape s = e.shape();
    const L::WeightType t = *L::parse_weight_type(e.dtype);
    std::printf("%-17s %-8s %-6s %-11s %-16s %-9s %s\n", std::string(e.name).c_str(),
                str_format("%.1fB", static_cast<double>(L::weight_params(s)) / 1e9).c_str(),
                std::string(e.dtype).c_str(), human(L::weight_bytes(s, t)).c_str(),
                commas(L::kv_bytes_per_token(s, L::KvDtype::kBf16)).c_str(),
                commas(s.max_context).c_str(), std::string(e.summary).c_str());
  }
  std::printf(
      "\nsources: the config.json of each Hugging Face repository (pagoda plan --list "
      "--json names them)\n");
}

ordered_json overheads_json(const L::Overheads& o) {
  return {{"activations_bytes", o.activations},
          {"fp8_activations_bytes", o.fp8_activations},
          {"logits_bytes", o.logits},
          {"runtime_context_bytes", o.runtime},
          {"total_bytes", o.total()}};
}

std::vector<FlagSpec> plan_flag_specs() {
  return {
      {"--model", "-m", true, "GGUF file, config.json, checkpoint folder or catalog name"},
      {"--list", "", false, "list the built-in catalog"},
      {"--dtype", "", true,
       "weight type: fp32 bf16 fp16 fp8 int8 int4-g128 nf4, or a GGUF type (q4_0 q8_0 q4_k ...); "
       "default: the model's own"},
      {"--kv-cache-dtype", "", true,
       "KV cache type: bf16 fp16 fp8 int8 int4 (default bf16; cpu fp16)"},
      {"--context", "-c", true, "tokens per sequence (default: the model's trained context)"},
      {"--concurrency", "", true, "sequences at once (default 1)"},
      {"--device", "", true,
       "cpu, cuda or cuda:N (default cuda; cpu plans for this machine's RAM)"},
      {"--device-memory", "", true,
       "memory per device: 80GiB, 141GB, bytes, or H100-80G H200-141G A100-40G A100-80G "
       "L40S-48G RTX4090-24G B200-192G (default H100-80G; cpu: this machine's RAM)"},
      {"--gpu-memory-utilization", "", true, "share of device memory to use (default 0.9)"},
      {"--kv-cache-memory", "", true, "fix the KV pool per rank (e.g. 4GiB) instead"},
      {"--tensor-parallel-size", "-tp", true, "tensor-parallel ranks (default 1)"},
      {"--pipeline-parallel-size", "-pp", true, "pipeline stages (default 1)"},
      {"--max-num-batched-tokens", "", true,
       "tokens per forward pass (default 2048, the engine's)"},
      {"--max-num-seqs", "", true, "sequences per step (default 256, the engine's)"},
      {"--block-size", "", true, "tokens per KV block (default 16)"},
      {"--json", "", false, "print JSON"},
      {"--help", "-h", false, "show this help"},
  };
}

// MODEL: -m or the one positional argument.
Result<std::string> read_model_spec(const Args& args) {
  std::string spec = args.get_or("--model", "");
  if (spec.empty() && !args.positional().empty()) spec = args.positional()[0];
  if (spec.empty()) return invalid_argument("missing MODEL (pagoda plan --list)");
  if (args.positional().size() > (args.has("--model") ? 0u : 1u))
    return invalid_argument("unexpected argument '" + args.positional().back() + "'");
  return spec;
}

// What the flags ask for: the workload and the device. The model's half of the plan's
// input comes from its source later.
struct PlanFlags {
  L::PlanInput in;
  bool gpu = true;
  bool default_device = false;         // no --device-memory on a GPU: the H100-80G
  int64_t context = 0;                 // 0: the model's trained context
  std::optional<L::WeightType> dtype;  // --dtype: weights counted from the shape in it
};

Status read_device_memory(const Args& args, PlanFlags* f) {
  if (auto mem = args.get("--device-memory")) {
    auto d = L::parse_device(*mem, f->gpu);
    if (!d) return d.status().with_context("--device-memory");
    f->in.device = *d;
  } else if (f->gpu) {
    f->in.device = *L::parse_device("H100-80G", true);
    f->default_device = true;
  } else {
    f->in.device = {"cpu (this machine)", machine_memory(), false};
    if (f->in.device.memory_bytes <= 0)
      return io_error("cannot read this machine's memory size; pass --device-memory");
  }
  return Status::ok();
}

// Every flag but MODEL, read before any file so that a typo is reported first.
Result<PlanFlags> read_plan_flags(const Args& args) {
  PlanFlags f;
  PAGODA_ASSIGN_OR_RETURN(const DeviceSpec device, read_device_flag(args, "cuda"));
  f.gpu = device.is_cuda();
  L::PlanInput& in = f.in;
  FlagReader flags(args);
  in.concurrency = flags.integer("--concurrency", 1, 1, int64_t{1} << 30);
  in.gpu_memory_utilization = flags.number("--gpu-memory-utilization", 0.9, 0.01, 1.0);
  in.tp = static_cast<int>(flags.integer("--tensor-parallel-size", 1, 1, 1024));
  in.pp = static_cast<int>(flags.integer("--pipeline-parallel-size", 1, 1, 1024));
  // Defaults are the engine's (EngineConfig), so a plan describes `pagoda generate` as is.
  in.max_num_batched_tokens = flags.integer("--max-num-batched-tokens", 2048, 1, int64_t{1} << 24);
  in.max_num_seqs = flags.integer("--max-num-seqs", 256, 1, int64_t{1} << 20);
  in.block_size = static_cast<int>(flags.integer("--block-size", 16, 1, 1 << 16));
  f.context = flags.integer("--context", 0, 1, int64_t{1} << 34);
  PAGODA_RETURN_IF_ERROR(flags.status());
  if (!f.gpu) in.kv_dtype = L::KvDtype::kFp16;  // what the CPU engine's KvStorage holds
  if (auto kv = args.get("--kv-cache-dtype")) {
    PAGODA_ASSIGN_OR_RETURN(in.kv_dtype, L::parse_kv_dtype(*kv));
  }
  if (auto d = args.get("--dtype")) {
    auto t = L::parse_weight_type(*d);
    if (!t) return t.status().with_context("--dtype");
    f.dtype = *t;
  }
  PAGODA_RETURN_IF_ERROR(read_device_memory(args, &f));
  if (auto kvm = args.get("--kv-cache-memory")) {
    auto b = L::parse_bytes(*kvm);
    if (!b) return b.status().with_context("--kv-cache-memory");
    if (*b <= 0) return invalid_argument("--kv-cache-memory must be positive");
    in.kv_cache_memory = *b;
  }
  return f;
}

// A plan with what the report says beside its numbers.
struct PlanReport {
  L::ModelSource src;
  L::PlanInput in;
  L::Plan plan;
  std::vector<std::string> notes;
  std::string weight_origin;  // where the weight bytes come from
  int64_t mha_seq = 0;        // MHA-equivalent KV bytes of one sequence
  const L::StagePlan& bottleneck() const { return plan.stages[plan.bottleneck]; }
};

// Resolves MODEL, fills the model's half of the input and plans it.
Result<PlanReport> make_report(const std::string& spec, const PlanFlags& f) {
  PlanReport r;
  PAGODA_ASSIGN_OR_RETURN(r.src, L::resolve_model(spec));
  // As the backend's loader will store the file's tensors.
  if (f.gpu)
    L::restate_for_cuda(&r.src);
  else
    L::restate_for_cpu(&r.src);
  L::PlanInput& in = r.in;
  in = f.in;
  const L::PlanInput model = L::input_from_source(r.src);
  in.shape = model.shape;
  in.tensors = model.tensors;
  in.checkpoint_bytes = model.checkpoint_bytes;
  in.weight_type = model.weight_type;
  in.exact_weights = model.exact_weights;
  in.context = f.context > 0 ? f.context : model.context;
  if (f.dtype) {
    in.weight_type = *f.dtype;
    in.exact_weights = false;
  }
  PAGODA_ASSIGN_OR_RETURN(r.plan, L::make_plan(in));
  r.notes = r.src.notes;
  r.notes.insert(r.notes.end(), r.plan.notes.begin(), r.plan.notes.end());
  if (f.default_device)
    r.notes.insert(r.notes.begin(), "device: H100-80G by default (--device-memory)");
  r.weight_origin = "counted from the shape in " + in.weight_type.name;
  if (in.exact_weights && !in.tensors.empty())
    r.weight_origin = "the file's tensors (mostly " + r.src.dtype + ")";
  else if (in.exact_weights)
    r.weight_origin = "the checkpoint's tensors (" + r.src.dtype + ")";
  r.mha_seq = r.plan.mha_equivalent_kv_bytes_per_token * in.context;
  return r;
}

ordered_json shape_json(const L::ModelShape& s) {
  return {{"arch", s.arch},
          {"layers", s.n_layers},
          {"hidden", s.hidden},
          {"heads", s.n_heads},
          {"kv_heads", s.n_kv_heads},
          {"head_dim", s.head_dim},
          {"ffn", s.ffn},
          {"vocab", s.vocab},
          {"max_context", s.max_context},
          {"tied_embeddings", s.tied_embeddings},
          {"experts", s.n_experts},
          {"active_experts", s.n_active_experts},
          {"shared_experts", s.n_shared_experts},
          {"expert_ffn", s.expert_ffn},
          {"kv_lora_rank", s.kv_lora_rank},
          {"qk_rope_head_dim", s.qk_rope_head_dim},
          {"sliding_window", s.sliding_window},
          {"sliding_layers", s.n_sliding_layers()}};
}

ordered_json stages_json(const L::Plan& p) {
  ordered_json stages = ordered_json::array();
  for (const L::StagePlan& st : p.stages)
    stages.push_back({{"layers", {st.layers.begin, st.layers.end}},
                      {"weight_bytes", st.weight_bytes},
                      {"kv_bytes_per_token", st.kv.total()},
                      {"overheads", overheads_json(st.overheads)},
                      {"kv_pool_bytes", st.kv_pool_bytes},
                      {"max_concurrent_sequences", st.max_concurrent_sequences}});
  return stages;
}

ordered_json suggestions_json(const L::Plan& p) {
  ordered_json sugg = ordered_json::array();
  for (const L::Suggestion& g : p.suggestions)
    sugg.push_back({{"flags", g.flags},
                    {"why", g.why},
                    {"max_concurrent_sequences", g.max_concurrent_sequences},
                    {"max_context_tokens", g.max_context_tokens}});
  return sugg;
}

void print_json(const PlanReport& r) {
  const L::PlanInput& in = r.in;
  const L::Plan& p = r.plan;
  ordered_json j;
  j["model"] = in.shape.name;
  j["source"] = {{"kind", r.src.kind}, {"where", r.src.where}};
  j["dtype"] = in.exact_weights ? r.src.dtype : in.weight_type.name;
  j["weights_from"] = r.weight_origin;
  j["kv_cache_dtype"] = L::kv_dtype_name(in.kv_dtype);
  j["context"] = in.context;
  j["concurrency"] = in.concurrency;
  j["tensor_parallel_size"] = in.tp;
  j["pipeline_parallel_size"] = in.pp;
  j["device"] = {{"name", in.device.name},
                 {"kind", in.device.gpu ? "cuda" : "cpu"},
                 {"memory_bytes", in.device.memory_bytes}};
  j["gpu_memory_utilization"] = in.gpu_memory_utilization;
  j["budget_bytes"] = p.budget_bytes;
  j["weight_params"] = p.weight_params;
  j["weight_bytes"] = p.weight_bytes;
  j["kv_bytes_per_token"] = p.kv_bytes_per_token;
  j["kv_bytes_per_token_full_layers"] = r.bottleneck().kv.full;
  j["kv_bytes_per_token_sliding_layers"] = r.bottleneck().kv.sliding;
  j["kv_bytes_per_sequence"] = p.kv_bytes_per_sequence;
  j["mha_equivalent_kv_bytes_per_token"] = p.mha_equivalent_kv_bytes_per_token;
  j["mha_equivalent_kv_bytes_per_sequence"] = r.mha_seq;
  j["overheads"] = overheads_json(p.overheads);
  j["overheads"]["max_num_batched_tokens"] = in.max_num_batched_tokens;
  j["overheads"]["max_num_seqs"] = in.max_num_seqs;
  j["kv_pool_bytes"] = p.kv_pool_bytes;
  j["kv_pool_blocks"] = p.kv_pool_blocks;
  j["block_size"] = in.block_size;
  j["shortfall_bytes"] = p.shortfall_bytes;
  j["max_concurrent_sequences"] = p.max_concurrent_sequences;
  j["max_context_tokens"] = p.max_context_tokens;
  j["fits"] = p.fits;
  j["shape"] = shape_json(in.shape);
  j["stages"] = stages_json(p);
  j["suggestions"] = suggestions_json(p);
  j["notes"] = r.notes;
  std::printf("%s\n", j.dump(2).c_str());
}

// "32 layers, hidden 4096, 32 query heads, 8 KV heads of 128, vocab 128256".
std::string shape_line(const L::ModelShape& s) {
  std::string line =
      str_format("%lld layers, hidden %lld, %lld query heads, ", static_cast<long long>(s.n_layers),
                 static_cast<long long>(s.hidden), static_cast<long long>(s.n_heads));
  if (s.is_mla())
    line += str_format("MLA latent %lld + rope %lld", static_cast<long long>(s.kv_lora_rank),
                       static_cast<long long>(s.qk_rope_head_dim));
  else
    line += str_format("%lld KV heads of %lld", static_cast<long long>(s.n_kv_heads),
                       static_cast<long long>(s.head_dim));
  if (s.is_moe())
    line += str_format(", %lld experts (%lld active", static_cast<long long>(s.n_experts),
                       static_cast<long long>(s.n_active_experts)) +
            (s.n_shared_experts > 0
                 ? str_format(", %lld shared)", static_cast<long long>(s.n_shared_experts))
                 : std::string(")"));
  return line + str_format(", vocab %lld", static_cast<long long>(s.vocab));
}

// The model, the device and the parallelism.
void print_setup(const PlanReport& r) {
  const L::PlanInput& in = r.in;
  const L::Plan& p = r.plan;
  const L::StagePlan& b = r.bottleneck();
  std::printf("model        %s  [%s: %s]\n", in.shape.name.c_str(), r.src.kind.c_str(),
              r.src.where.c_str());
  std::printf("             %s\n", shape_line(in.shape).c_str());
  std::printf("             %.2fB parameters, trained context %s tokens\n",
              static_cast<double>(p.weight_params) / 1e9, commas(in.shape.max_context).c_str());
  std::printf("device       %s: %s x %.2f = %s budget per rank\n", in.device.name.c_str(),
              both(in.device.memory_bytes).c_str(),
              in.kv_cache_memory > 0 ? 1.0 : in.gpu_memory_utilization,
              human(p.budget_bytes).c_str());
  std::printf("parallelism  tensor %d x pipeline %d%s\n", in.tp, in.pp,
              in.tp * in.pp > 1
                  ? str_format(" -- figures are per rank (stage %zu, layers %lld-%lld)",
                               p.bottleneck, static_cast<long long>(b.layers.begin),
                               static_cast<long long>(b.layers.end - 1))
                        .c_str()
                  : "");
}

void print_memory_row(const std::string& what, int64_t bytes) {
  std::printf("  %-34s %24s  %10s\n", what.c_str(), commas(bytes).c_str(), human(bytes).c_str());
}

void print_memory(const PlanReport& r) {
  const L::PlanInput& in = r.in;
  const L::Plan& p = r.plan;
  std::printf("\nmemory per rank\n");
  print_memory_row("weights (" + (in.exact_weights ? r.src.dtype : in.weight_type.name) + ")",
                   p.weight_bytes);
  print_memory_row(str_format("activations (%s tokens)", commas(in.max_num_batched_tokens).c_str()),
                   p.overheads.activations);
  if (p.overheads.fp8_activations > 0)
    print_memory_row(
        str_format("fp8 activations (%s tokens)", commas(in.max_num_batched_tokens).c_str()),
        p.overheads.fp8_activations);
  print_memory_row(str_format("logits (%s sequences)", commas(in.max_num_seqs).c_str()),
                   p.overheads.logits);
  print_memory_row(
      in.device.gpu ? "runtime (CUDA context, estimate)" : "runtime (process baseline)",
      p.overheads.runtime);
  print_memory_row("KV pool", p.kv_pool_bytes);
  if (p.shortfall_bytes > 0) print_memory_row("short by", p.shortfall_bytes);
}

void print_kv_cache(const PlanReport& r) {
  const L::PlanInput& in = r.in;
  const L::Plan& p = r.plan;
  const L::StagePlan& b = r.bottleneck();
  std::printf("\nKV cache (%s)\n", std::string(L::kv_dtype_name(in.kv_dtype)).c_str());
  std::printf("  per token     %s bytes = %s\n", commas(p.kv_bytes_per_token).c_str(),
              kv_formula(in.shape, b.kv, b.layers, in.kv_dtype, in.tp).c_str());
  std::printf("  per sequence  %s at %s tokens\n", both(p.kv_bytes_per_sequence).c_str(),
              commas(in.context).c_str());
  std::printf(
      "  MHA-equivalent (every query head with its own K and V, as if there were no "
      "GQA/MLA/window):\n                %s bytes/token (%s), %s at %s tokens\n",
      commas(p.mha_equivalent_kv_bytes_per_token).c_str(),
      human(p.mha_equivalent_kv_bytes_per_token).c_str(), both(r.mha_seq).c_str(),
      commas(in.context).c_str());
  std::printf("  pool          %s blocks of %d tokens%s\n", commas(p.kv_pool_blocks).c_str(),
              in.block_size,
              b.kv.sliding > 0 ? " in every layer (the sequence counts assume windowed layers "
                                 "free the blocks that leave their window)"
                               : "");
}

// Whether it fits, the notes, and what would fit instead.
void print_result(const PlanReport& r) {
  const L::PlanInput& in = r.in;
  const L::Plan& p = r.plan;
  std::printf("\nresult       %s\n", p.fits ? "fits" : "does NOT fit");
  std::printf("  sequences of %s tokens at once: %s (wanted %s)\n", commas(in.context).c_str(),
              commas(p.max_concurrent_sequences).c_str(), commas(in.concurrency).c_str());
  std::printf("  longest context for %s sequence%s at once: %s tokens\n",
              commas(in.concurrency).c_str(), in.concurrency == 1 ? "" : "s",
              commas(p.max_context_tokens).c_str());
  std::printf("  weights: %s\n", r.weight_origin.c_str());
  for (const std::string& n : r.notes) std::printf("  note: %s\n", n.c_str());
  if (!p.suggestions.empty()) {
    std::printf("\nwhat would fit:\n");
    for (const L::Suggestion& g : p.suggestions)
      std::printf("  %-40s %s\n", g.flags.c_str(), g.why.c_str());
  }
}

void print_text(const PlanReport& r) {
  print_setup(r);
  print_memory(r);
  print_kv_cache(r);
  print_result(r);
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  const std::vector<FlagSpec> specs = plan_flag_specs();
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("plan", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("plan", "MODEL [flags]  |  pagoda plan --list", specs).c_str());
    return 0;
  }
  const bool json = args->has("--json");
  if (args->has("--list")) {
    print_list(json);
    return 0;
  }
  const Result<std::string> spec = read_model_spec(*args);
  if (!spec) return fail("plan", spec.status());
  const Result<PlanFlags> flags = read_plan_flags(*args);
  if (!flags) return fail("plan", flags.status());
  const Result<PlanReport> report = make_report(*spec, *flags);
  if (!report) return fail("plan", report.status());
  if (json)
    print_json(*report);
  else
    print_text(*report);
  return 0;
}

}  // namespace pagoda::cli
