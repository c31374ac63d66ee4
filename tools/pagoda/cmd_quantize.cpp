// pagoda quantize: rewrite a GGUF model with its weight matrices in another type
// (dequantize each row to f32, then quantize with our reference quantizers).
#include <unistd.h>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "args.h"
#include "backend/cpu/convert_blocks.h"
#include "backend/cpu/matmul.h"
#include "commands.h"
#include "common.h"
#include "engine/perplexity.h"
#include "model/channel_max.h"
#include "model/gguf_writer.h"
#include "model/hf_quantize.h"
#include "model/imatrix.h"
#include "model/quant_mix.h"
#include "model/weight_types.h"

namespace pagoda::cli {
namespace {

// llama.cpp's general.file_type values ("mostly TYPE"), so other tools label the file right.
int file_type_for(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ8_0:
      return 7;
    case DType::kQ2_K:
      return 10;
    case DType::kQ3_K:
      return 11;  // "mostly Q3_K" is llama.cpp's Q3_K_S, as Q4_K and Q5_K are its _S
    case DType::kQ4_K:
      return 14;
    case DType::kQ5_K:
      return 16;
    case DType::kQ6_K:
      return 18;
    case DType::kBF16:
      return 32;
    default:
      return -1;
  }
}

// The type a matrix whose rows are not whole blocks of the target takes instead: a
// 32-element type of at least the target's bits (llama.cpp falls back likewise; its
// IQ4_NL for Q2_K / Q3_K has no kernel here, Q4_0 is the nearest), else F16.
DType fallback_for(DType target, int64_t row) {
  if (row % 32 != 0) return DType::kF16;
  switch (target) {
    case DType::kQ2_K:
    case DType::kQ3_K:
      return DType::kQ4_0;
    case DType::kQ4_K:
      return DType::kQ5_0;
    case DType::kQ5_K:
      return DType::kQ5_1;
    default:
      return DType::kQ8_0;
  }
}

bool is_weight_matrix(const GgufTensorInfo& t) {
  const std::string& n = t.name;
  return t.n_dims >= 2 && n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0;
}

// The tensor's rows dequantized and quantized again to `to`, each weight's rounding
// error weighed by its input column's importance (cpu::quantize_row_weighted).
Result<std::vector<uint8_t>> quantize_weighted(const GgufFile& f, const GgufTensorInfo& t, DType to,
                                               const std::vector<float>& importance,
                                               ThreadPool& pool) {
  const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
  const size_t in_row = row_bytes(t.type, cols), out_row = row_bytes(to, cols);
  std::vector<uint8_t> out(out_row * static_cast<size_t>(rows));
  std::vector<Status> errors(static_cast<size_t>(rows));
  const uint8_t* src = f.tensor_data(t);
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      Status& e = errors[static_cast<size_t>(r)];
      e = cpu::dequantize_row(t.type, src + static_cast<size_t>(r) * in_row, row.data(), cols);
      if (e)
        e = cpu::quantize_row_weighted(
            to, row.data(), out.data() + static_cast<size_t>(r) * out_row, cols, importance.data());
    }
  });
  for (const Status& e : errors)
    if (!e) return e;
  return out;
}

constexpr const char* kSynopsis =
    "IN.gguf OUT.gguf TYPE   (TYPE: F32 F16 BF16 Q8_0 Q5_0 Q5_1 Q4_0 Q4_1 Q3_K Q4_K Q5_K (every "
    "matrix in it), llama.cpp's mixes Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M "
    "Q6_K, or CPU / CUDA: each matrix in the type that backend stores it as, so it loads "
    "without converting); IN_FOLDER OUT_FOLDER fp8|smoothquant|gptq|awq|nf4   (a Hugging Face "
    "checkpoint in compressed-tensors form: fp8 per-channel E4M3 weights, or smoothquant's "
    "smoothed int8 weights, both with activations quantized per token at run time; or gptq: "
    "the GPTQ format's 4-bit weights, group 128, from a calibrated GPTQ run; or awq: the AWQ "
    "GEMM format's 4-bit weights with zero points, group 128, after a calibrated "
    "activation-aware scale and clip search; or nf4: bitsandbytes' 4-bit NF4 layout, blocks "
    "of 64, as transformers saves it; --double-quant for its double quantization)";

// The TYPE argument.
struct Target {
  // CPU / CUDA: every matrix in the type that backend's loader stores it as
  // (model/weight_types.h), converted as the loader would, so it finds nothing to convert.
  std::optional<WeightBackend> backend;
  // A llama.cpp mix (Q4_K_M ...): its base type, with the rules of model/quant_mix.h.
  const QuantMix* mix = nullptr;
  DType type = DType::kQ8_0;  // every matrix's, or the mix's base
};

Result<Target> parse_target(const std::string& name) {
  Target t;
  if (name == "CPU" || name == "cpu") t.backend = WeightBackend::kCpu;
  if (name == "CUDA" || name == "cuda") t.backend = WeightBackend::kCuda;
  t.mix = t.backend ? nullptr : find_quant_mix(name);
  if (t.mix) t.type = t.mix->base;
  if (!t.backend && !t.mix && (!parse_dtype(name, &t.type) || file_type_for(t.type) < 0))
    return invalid_argument("unsupported target type '" + name + "'");
  return t;
}

// --tensor-type: tensors whose name contains NAME_PART get TYPE instead of the target type.
using Overrides = std::vector<std::pair<std::string, DType>>;

Result<Overrides> parse_overrides(std::string spec) {
  Overrides overrides;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string item = spec.substr(0, comma);
    spec = comma == std::string::npos ? "" : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    DType t;
    if (eq == std::string::npos || !parse_dtype(item.substr(eq + 1), &t) || file_type_for(t) < 0)
      return invalid_argument("bad --tensor-type item '" + item + "'");
    overrides.emplace_back(item.substr(0, eq), t);
  }
  return overrides;
}

// --imatrix, checked against the model: an importance matrix of another model is refused,
// not applied to whatever shares a name.
Result<Imatrix> read_model_imatrix(const std::string& path, const GgufFile& f) {
  PAGODA_ASSIGN_OR_RETURN(Imatrix m, read_imatrix(path));
  for (const auto& [name, v] : m.values) {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (t == nullptr)
      return invalid_argument("the importance matrix has '" + name +
                              "', which this model does not (another model's?)");
    if (t->ne[0] != static_cast<int64_t>(v.size()))
      return invalid_argument(str_format(
          "the importance matrix has %zu columns for '%s', whose rows have %lld (another "
          "model's?)",
          v.size(), name.c_str(), static_cast<long long>(t->ne[0])));
  }
  return m;
}

// The input's metadata, and llama.cpp's keys for the importance matrix so that its tools
// see what the file was made with.
void copy_metadata(const GgufFile& f, const Imatrix* imatrix, const std::string& imatrix_path,
                   GgufWriter* w) {
  w->set_alignment(f.alignment());
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") w->set_value(k, v);
  if (!imatrix) return;
  w->set_string("quantize.imatrix.file", imatrix_path);
  if (!imatrix->datasets.empty())
    w->set_string("quantize.imatrix.dataset", imatrix->datasets.front());
  w->set_i32("quantize.imatrix.entries_count", static_cast<int32_t>(imatrix->values.size()));
  w->set_i32("quantize.imatrix.chunks_count", static_cast<int32_t>(imatrix->chunks));
}

// CPU / CUDA: each weight matrix's type as the backend's loader stores it; general.file_type
// is the type that holds most weights.
Result<std::map<std::string, DType>> backend_types(const GgufFile& f, WeightBackend backend,
                                                   GgufWriter* w) {
  std::vector<std::pair<std::string, DType>> matrices;
  for (const GgufTensorInfo& t : f.tensors())
    if (is_weight_matrix(t)) matrices.emplace_back(t.name, t.type);
  const std::vector<std::optional<DType>> types = stored_types(backend, matrices);
  std::map<std::string, DType> stored;
  std::map<DType, int64_t> elements;
  for (size_t i = 0; i < matrices.size(); ++i) {
    if (!types[i])
      return unsupported("'" + matrices[i].first + "' (" +
                         std::string(dtype_name(matrices[i].second)) +
                         "): the backend's loader cannot take it");
    stored[matrices[i].first] = *types[i];
    elements[*types[i]] += f.find_tensor(matrices[i].first)->n_elements();
  }
  DType most = DType::kF32;
  int64_t most_n = 0;
  for (const auto& [t, n] : elements)
    if (n > most_n) most = t, most_n = n;
  if (most_n > 0 && file_type_for(most) >= 0)
    w->set_u32("general.file_type", static_cast<uint32_t>(file_type_for(most)));
  return stored;
}

// What a mix's rules need to know of the model.
MixModel mix_model_of(const GgufFile& f) {
  MixModel m;
  const std::string arch(f.get_string("general.architecture").value_or(""));
  m.n_layers = static_cast<int>(f.get_int(arch + ".block_count").value_or(0));
  const int64_t heads = f.get_int(arch + ".attention.head_count").value_or(1);
  const int64_t kv = f.get_int(arch + ".attention.head_count_kv").value_or(heads);
  m.n_gqa = kv > 0 ? static_cast<int>(heads / kv) : 1;
  m.tied = f.find_tensor(std::string_view("output.weight")) == nullptr;
  return m;
}

// Everything that decides each tensor's new type.
struct TypePlan {
  Target target;
  Overrides overrides;
  std::map<std::string, DType> stored;  // backend: matrix name -> type
  MixModel mix_model;
};

DType type_for(const GgufTensorInfo& t, const TypePlan& p) {
  if (!is_weight_matrix(t)) return t.type;
  if (p.target.backend) return p.stored.at(t.name);
  DType to = p.target.mix ? mix_type(*p.target.mix, p.mix_model, t.name, t.ne[0]) : p.target.type;
  for (const auto& [part, type] : p.overrides)
    if (t.name.find(part) != std::string::npos) to = type;
  if (t.ne[0] % dtype_info(to).block_elems != 0) {
    const DType wanted = to;
    to = fallback_for(to, t.ne[0]);
    std::fprintf(stderr,
                 "pagoda quantize: %s has rows of %lld, not a multiple of the %s block; using %s\n",
                 t.name.c_str(), static_cast<long long>(t.ne[0]),
                 std::string(dtype_name(wanted)).c_str(), std::string(dtype_name(to)).c_str());
  }
  return to;
}

// Adds every tensor to the writer, converted where its type changes. Returns how many were.
Result<size_t> convert_tensors(const GgufFile& f, const TypePlan& p, const Imatrix* imatrix,
                               int threads, cpu::ConversionTally* tally, GgufWriter* w) {
  ThreadPool pool(threads);
  size_t n_converted = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    const DType to = type_for(t, p);
    if (to == t.type) {
      w->add_tensor_ref(t.name, t.type, ne, f.tensor_data(t), t.size);
      continue;
    }
    // With an importance matrix entry: the weighted quantizers. Otherwise exact where
    // the target holds the values (Q4_K -> Q4_1, Q3_K -> Q6_K, Q4_0 -> Q8_0), else
    // dequantized and quantized again.
    const std::vector<float>* importance = nullptr;
    if (imatrix)
      if (auto it = imatrix->values.find(t.name); it != imatrix->values.end())
        importance = &it->second;
    const bool weighted = importance != nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    auto data = weighted ? quantize_weighted(f, t, to, *importance, pool)
                         : cpu::convert_matrix(t.type, f.tensor_data(t), t.n_elements() / t.ne[0],
                                               t.ne[0], to, pool, tally);
    if (!data) return data.status().with_context("converting '" + t.name + "'");
    if (weighted)
      tally->add(t.type, to, t.size, data->size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    w->add_tensor(t.name, to, ne, std::move(data).value());
    ++n_converted;
  }
  return n_converted;
}

bool is_hf_scheme(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string& h : hf_quant_schemes())
    if (h == s) return true;
  return false;
}

// The calibration run of smoothquant, gptq and awq: the text in chunks through the CPU
// model, each chunk from an empty cache with BOS first (as pagoda imatrix), each product's
// input shown to the observer `make(n_layers)` returns (smoothquant: the largest |x| of each
// column; gptq: sum x x^T) and to `also` (awq: the mean |x| beside gptq's sum x x^T).
template <typename Observer, typename Make>
Result<std::unique_ptr<Observer>> calibrate(const Args& args, const std::string& in,
                                            ThreadPool& pool, const Make& make,
                                            std::unique_ptr<KvAmaxCollector>* kv = nullptr,
                                            std::unique_ptr<ChannelMaxCollector>* also = nullptr) {
  const std::string path =
      args.get_or("--calibration", "../shared/testdata/text/tinyshakespeare.txt");
  PAGODA_ASSIGN_OR_RETURN(const int64_t samples, args.get_int("--samples", 128, 1, 1 << 20));
  PAGODA_ASSIGN_OR_RETURN(const int64_t seq_len, args.get_int("--seq-len", 512, 16, 1 << 16));
  PAGODA_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  PAGODA_ASSIGN_OR_RETURN(Loaded loaded, load(in, true, true));
  std::unique_ptr<Observer> collector = make(loaded.model->config().n_layers);
  // --kv-cache-scales: the same pass also records each layer's largest key and value.
  if (kv != nullptr) *kv = std::make_unique<KvAmaxCollector>(loaded.model->config().n_layers);
  if (also != nullptr)
    *also = std::make_unique<ChannelMaxCollector>(loaded.model->config().n_layers);
  ObserverFan fan({collector.get(), kv != nullptr ? kv->get() : nullptr,
                   also != nullptr ? also->get() : nullptr});
  PerplexityOptions po;
  po.n_ctx = po.n_batch = static_cast<int>(seq_len);
  po.n_chunks = static_cast<int>(samples);
  RunnerOptions o = perplexity_runner_options(po);
  o.observer =
      kv != nullptr || also != nullptr ? static_cast<ActivationObserver*>(&fan) : collector.get();
  auto runner = make_cpu_runner(*loaded.model, pool, o);
  const Tokenizer& tok = *loaded.tokenizer;
  const std::vector<int32_t> tokens = tok.encode(text, true, false);
  po.bos = tok.add_bos() ? tok.bos() : -1;
  if (static_cast<int64_t>(tokens.size()) < seq_len)
    return invalid_argument("'" + path + "' holds fewer tokens than one --seq-len chunk");
  const double t0 = now_seconds();
  const int64_t total = std::min<int64_t>(samples, static_cast<int64_t>(tokens.size()) / seq_len);
  PAGODA_ASSIGN_OR_RETURN(
      const PerplexityResult r,
      evaluate_perplexity(*runner, nullptr, tokens, po, pool, [&](const PerplexityResult& p) {
        const double el = now_seconds() - t0;
        std::fprintf(stderr, "calibration: %d/%lld chunks of %lld tokens, %.0f s left\n", p.chunks,
                     static_cast<long long>(total), static_cast<long long>(seq_len),
                     el / p.chunks * static_cast<double>(total - p.chunks));
      }));
  std::fprintf(stderr, "calibration: %lld tokens from %s (PPL %.3f), %.1f s\n",
               static_cast<long long>(collector->tokens()), path.c_str(), r.ppl(),
               now_seconds() - t0);
  return collector;
}

// A Hugging Face folder into a scheme's folder, with a progress line on stderr.
Result<std::string> quantize_folder(const Args& args, const std::string& in, const std::string& out,
                                    std::string scheme) {
  for (const char* flag : {"--tensor-type", "--imatrix"})
    if (args.has(flag))
      return invalid_argument(std::string(flag) + " applies to GGUF outputs, not to " + scheme);
  if (!is_hf_scheme(scheme))
    return invalid_argument(
        "a Hugging Face folder quantizes to fp8, smoothquant, gptq, awq or nf4; '" + scheme +
        "' is not a scheme Pagoda writes into a folder");
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool kv_scales = args.has("--kv-cache-scales");
  if (kv_scales && (scheme == "gptq" || scheme == "nf4" || scheme == "awq"))
    return invalid_argument(
        "--kv-cache-scales writes compressed-tensors' kv_cache_scheme, which a " + scheme +
        " folder has no place for (fp8 and smoothquant have)");
  if (!hf_scheme_calibrates(scheme) && !kv_scales)
    for (const char* flag : {"--calibration", "--samples", "--seq-len"})
      if (args.has(flag))
        return invalid_argument(std::string(flag) + ": " + scheme +
                                " quantizes without calibration");
  if (scheme != "smoothquant" && args.has("--alpha"))
    return invalid_argument("--alpha applies to smoothquant, not to " + scheme);
  if (scheme == "awq") {
    // AWQ GEMM is 4-bit asymmetric with groups in input order: no other choice to make.
    if (args.has("--sym"))
      return invalid_argument("--sym: awq stores a zero point per group (asymmetric only)");
    for (const char* flag : {"--act-order", "--static-groups", "--damp"})
      if (args.has(flag))
        return invalid_argument(std::string(flag) + " applies to gptq, not to awq");
  } else if (scheme != "gptq") {
    for (const char* flag :
         {"--bits", "--group-size", "--sym", "--act-order", "--static-groups", "--damp"})
      if (args.has(flag))
        return invalid_argument(
            std::string(flag) + " applies to " +
            (std::string_view(flag) == "--bits" || std::string_view(flag) == "--group-size"
                 ? "gptq and awq"
                 : "gptq") +
            ", not to " + scheme);
  }
  if (scheme != "nf4" && args.has("--double-quant"))
    return invalid_argument("--double-quant applies to nf4, not to " + scheme);
  PAGODA_ASSIGN_OR_RETURN(const int64_t threads, args.get_int("--threads", 0, 0, 1024));
  ThreadPool pool(static_cast<int>(threads));
  HfQuantizeOptions options;
  options.scheme = scheme;
  PAGODA_ASSIGN_OR_RETURN(const double alpha, args.get_double("--alpha", 0.5, 0.0, 1.0));
  options.alpha = static_cast<float>(alpha);
  PAGODA_ASSIGN_OR_RETURN(const int64_t bits, args.get_int("--bits", 4, 1, 64));
  if (scheme == "awq" && bits != 4)
    return invalid_argument("--bits: awq writes 4 bits (the AWQ GEMM format), not " +
                            std::to_string(bits));
  if (bits != 4 && bits != 8) return invalid_argument("--bits: gptq writes 4 or 8 bits");
  options.gptq.bits = static_cast<int>(bits);
  PAGODA_ASSIGN_OR_RETURN(const int64_t group, args.get_int("--group-size", 128, -1, 1 << 20));
  if (scheme == "awq") {
    if (group <= 0 || group % 32 != 0)
      return invalid_argument("--group-size: awq takes a positive multiple of 32, not " +
                              std::to_string(group));
    options.awq_group_size = group;
  }
  if (group == 0 || (group > 0 && group % (32 / bits) != 0))
    return invalid_argument("--group-size: -1 (one group per row) or a multiple of " +
                            std::to_string(32 / bits));
  options.gptq.group_size = static_cast<int>(group);
  options.gptq.sym = args.has("--sym");
  options.gptq.act_order = args.has("--act-order");
  options.gptq.static_groups = args.has("--static-groups");
  options.nf4_double_quant = args.has("--double-quant");
  PAGODA_ASSIGN_OR_RETURN(options.gptq.damp, args.get_double("--damp", 0.01, 0.0, 1.0));
  // What the input can be refused for is refused now, not after the calibration run.
  PAGODA_RETURN_IF_ERROR(hf_quantize_check(in, options));
  std::unique_ptr<ChannelMaxCollector> act_max;
  std::unique_ptr<HessianCollector> hessian;
  std::unique_ptr<KvAmaxCollector> kv_amax;
  if (scheme == "smoothquant") {
    PAGODA_ASSIGN_OR_RETURN(
        act_max, calibrate<ChannelMaxCollector>(
                     args, in, pool, [](int n) { return std::make_unique<ChannelMaxCollector>(n); },
                     kv_scales ? &kv_amax : nullptr));
    options.act_max = act_max.get();
  } else if (scheme == "gptq" || scheme == "awq") {
    PAGODA_ASSIGN_OR_RETURN(
        hessian,
        calibrate<HessianCollector>(
            args, in, pool, [&](int n) { return std::make_unique<HessianCollector>(n, pool); },
            nullptr, scheme == "awq" ? &act_max : nullptr));
    PAGODA_RETURN_IF_ERROR(hessian->status());
    options.hessian = hessian.get();
    options.act_max = act_max.get();
  } else if (kv_scales) {
    PAGODA_ASSIGN_OR_RETURN(kv_amax, calibrate<KvAmaxCollector>(args, in, pool, [](int n) {
                              return std::make_unique<KvAmaxCollector>(n);
                            }));
  }
  options.kv_amax = kv_amax.get();
  const auto t0 = std::chrono::steady_clock::now();
  // A bar redrawn at most 5 times a second on a terminal; a line per tenth otherwise.
  const bool tty = isatty(2) != 0;
  double last = -1.0;
  auto progress = [&](size_t done, size_t total, const std::string& name) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool tenth = done * 10 / total != (done - 1) * 10 / total;
    if (done != total && (tty ? el - last < 0.2 : !tenth)) return;
    last = el;
    const double left = el / static_cast<double>(done) * static_cast<double>(total - done);
    std::fprintf(stderr, "%s[%4zu/%zu tensors] %5.0f s left  %-50.50s%s", tty ? "\r" : "", done,
                 total, left, name.c_str(), tty && done != total ? "" : "\n");
  };
  PAGODA_ASSIGN_OR_RETURN(const HfQuantizeReport r,
                          quantize_hf_folder(in, out, options, pool, progress));
  return str_format(
             "pagoda quantize: wrote %s (%s: %d linear layers quantized, %d tensors copied; "
             "%.1f MB -> %.1f MB)\n",
             out.c_str(), scheme.c_str(), r.n_quantized, r.n_copied, r.bytes_in / 1e6,
             r.bytes_out / 1e6) +
         (r.note.empty() ? "" : "pagoda quantize: " + r.note + "\n");
}

// Reads the input and the flags, writes the output; returns a line for stderr.
Result<std::string> quantize(const Args& args) {
  const std::string in = args.positional()[0], out = args.positional()[1];
  std::error_code ec;
  if (std::filesystem::is_directory(in, ec))
    return quantize_folder(args, in, out, args.positional()[2]);
  if (is_hf_scheme(args.positional()[2]))
    return invalid_argument(args.positional()[2] +
                            " writes a Hugging Face folder and reads one: IN must be a "
                            "checkpoint folder (scripts/hf_from_gguf.py makes one from a GGUF)");
  for (const char* flag :
       {"--calibration", "--samples", "--seq-len", "--alpha", "--bits", "--group-size", "--sym",
        "--act-order", "--static-groups", "--damp", "--kv-cache-scales", "--double-quant"})
    if (args.has(flag))
      return invalid_argument(std::string(flag) +
                              " applies to the folder schemes, not to GGUF types");
  TypePlan p;
  PAGODA_ASSIGN_OR_RETURN(p.target, parse_target(args.positional()[2]));
  PAGODA_ASSIGN_OR_RETURN(const int64_t threads, args.get_int("--threads", 0, 0, 1024));
  PAGODA_ASSIGN_OR_RETURN(p.overrides, parse_overrides(args.get_or("--tensor-type", "")));
  PAGODA_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file, GgufFile::open(in));
  const GgufFile& f = *file;
  std::optional<Imatrix> imatrix;
  if (args.has("--imatrix")) {
    if (p.target.backend) return invalid_argument("--imatrix takes a target type, not CPU / CUDA");
    PAGODA_ASSIGN_OR_RETURN(imatrix, read_model_imatrix(*args.get("--imatrix"), f));
  }
  GgufWriter w;
  copy_metadata(f, imatrix ? &*imatrix : nullptr, args.get_or("--imatrix", ""), &w);
  if (p.target.backend) {
    PAGODA_ASSIGN_OR_RETURN(p.stored, backend_types(f, *p.target.backend, &w));
  } else {
    w.set_u32("general.file_type",
              static_cast<uint32_t>(p.target.mix ? p.target.mix->file_type
                                                 : file_type_for(p.target.type)));
  }
  if (p.target.mix) p.mix_model = mix_model_of(f);
  cpu::ConversionTally tally;
  PAGODA_ASSIGN_OR_RETURN(
      const size_t n_converted,
      convert_tensors(f, p, imatrix ? &*imatrix : nullptr, static_cast<int>(threads), &tally, &w));
  PAGODA_RETURN_IF_ERROR(w.write(out));
  return str_format("pagoda quantize: wrote %s (%zu tensors converted to %s%s%s)\n", out.c_str(),
                    n_converted,
                    !p.target.backend ? std::string(dtype_name(p.target.type)).c_str()
                    : *p.target.backend == WeightBackend::kCuda ? "the CUDA backend's types"
                                                                : "the CPU backend's types",
                    n_converted ? ": " : "", tally.describe().c_str());
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--threads", "-t", true, "threads (default: all cores)"},
      {"--tensor-type", "", true, "per-tensor overrides: NAME_PART=TYPE[,NAME_PART=TYPE...]"},
      {"--imatrix", "", true,
       "importance matrix (pagoda imatrix, or llama-imatrix's GGUF): weigh each weight's "
       "rounding error by its input's mean square (4-, 5-bit and K types)"},
      {"--calibration", "", true,
       "smoothquant, gptq, awq, --kv-cache-scales: calibration text (default "
       "../shared/testdata/text/tinyshakespeare.txt)"},
      {"--samples", "", true, "smoothquant, gptq, awq: calibration chunks (default 128)"},
      {"--seq-len", "", true, "smoothquant, gptq, awq: tokens a calibration chunk (default 512)"},
      {"--alpha", "", true, "smoothquant: migration strength, 0 to 1 (default 0.5)"},
      {"--bits", "", true, "gptq: 4 or 8 (default 4); awq: 4 only"},
      {"--group-size", "", true,
       "gptq, awq: input columns per scale and zero (default 128; gptq -1: one per row; awq: "
       "a multiple of 32 dividing every layer's inputs)"},
      {"--sym", "", false, "gptq: symmetric (zero point 2^(bits-1)); default asymmetric"},
      {"--act-order", "", false,
       "gptq: quantize columns by descending Hessian diagonal (desc_act, g_idx)"},
      {"--static-groups", "", false,
       "gptq: each group's scale and zero from the original weights of columns [k g, (k+1) "
       "g), so act-order output keeps contiguous groups (loads as 4-bit blocks)"},
      {"--damp", "", true, "gptq: dampening, a share of the Hessian's mean diagonal (0.01)"},
      {"--double-quant", "", false,
       "nf4: also quantize each block's absmax to 8 bits, bitsandbytes' double quantization "
       "(bnb_4bit_use_double_quant): 4.127 bits a weight instead of 4.5, the quantized "
       "layers 8% smaller; costs each absmax a rounding of up to 0.7% of the largest "
       "|absmax - mean| among its 256 neighbouring blocks (SmolLM2-135M: 0.5% RMS)"},
      {"--kv-cache-scales", "", false,
       "fp8, smoothquant: also calibrate per-layer FP8 KV-cache scales (compressed-tensors "
       "kv_cache_scheme; read by --kv-cache-dtype fp8 on CUDA)"},
      {"--help", "-h", false, "show this help"},
  };
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("quantize", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("quantize", kSynopsis, specs).c_str());
    return 0;
  }
  if (args->positional().size() != 3)
    return fail("quantize", invalid_argument(std::string("expected ") + kSynopsis));
  const Result<std::string> done = quantize(*args);
  if (!done) return fail("quantize", done.status());
  std::fputs(done->c_str(), stderr);
  return 0;
}

}  // namespace pagoda::cli
