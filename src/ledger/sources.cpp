#include "ledger/sources.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "core/text.h"
#include "model/arch/arch.h"
#include "model/model.h"
#include "model/tensor_source.h"
#include "model/weight_types.h"

namespace pagoda::ledger {
namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// GGUF type names as --dtype spells them.
std::string type_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    default:
      return ascii_lower(dtype_name(t));
  }
}

// Where a tensor named as GGUF names it lives and how it splits; bytes and type as given.
SourceTensor classify(const std::string& name, int64_t bytes, int64_t elements, int n_dims,
                      DType type) {
  SourceTensor s;
  s.name = name;
  s.bytes = bytes;
  s.elements = elements;
  s.matrix = n_dims >= 2;
  s.type = type_name(type);
  const std::string_view n = s.name;
  if (n == "token_embd.weight") {
    s.place = TensorPlace::kFirstStage;
    s.split = TensorSplit::kTensorParallel;
  } else if (starts_with(n, "output.")) {
    s.place = TensorPlace::kLastStage;
    s.split = s.matrix ? TensorSplit::kTensorParallel : TensorSplit::kReplicated;
  } else if (starts_with(n, "output_norm")) {
    s.place = TensorPlace::kLastStage;
  } else if (starts_with(n, "blk.")) {
    s.place = TensorPlace::kLayer;
    size_t i = 4;
    int64_t layer = 0;
    while (i < n.size() && std::isdigit(static_cast<unsigned char>(n[i])))
      layer = layer * 10 + (n[i++] - '0');
    s.layer = layer;
    const std::string_view rest = i + 1 <= n.size() ? n.substr(i + 1) : std::string_view();
    const bool kv = starts_with(rest, "attn_k.") || starts_with(rest, "attn_v.");
    if (!s.matrix) {
      // Norms and routing biases are replicated; q/k/v biases follow their matrices.
      s.split = starts_with(rest, "attn_q.bias")                    ? TensorSplit::kTensorParallel
                : kv && rest.find("bias") != std::string_view::npos ? TensorSplit::kKvHeads
                                                                    : TensorSplit::kReplicated;
    } else if (kv) {
      s.split = TensorSplit::kKvHeads;
    } else if (starts_with(rest, "ffn_gate_inp") || starts_with(rest, "attn_kv_a_mqa") ||
               starts_with(rest, "attn_q_a.")) {
      s.split = TensorSplit::kReplicated;  // routers and MLA down-projections
    } else {
      s.split = TensorSplit::kTensorParallel;
    }
  }  // anything else (rope_freqs, ...) is needed on every stage, whole
  return s;
}

// Reads an integer key that may be absent; a per-layer array is refused by name.
Result<int64_t> gguf_int(const GgufFile& f, const std::string& key, int64_t def) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return def;
  if (v->type == GgufType::kArray)
    return unsupported("per-layer values for '" + key + "' are not supported by the planner");
  const auto i = v->as_int();
  if (!i || *i < 0) return corrupt("metadata '" + key + "' is not a non-negative integer");
  return *i;
}

// The common "<arch>." hyperparameter keys, for architectures the engine does not run.
Result<ModelShape> generic_gguf_shape(const GgufFile& f, const std::string& arch) {
  const std::string p = arch + ".";
  ModelShape s;
  s.arch = arch;
  s.name = std::string(f.get_string("general.name").value_or(arch));
  PAGODA_ASSIGN_OR_RETURN(s.n_layers, gguf_int(f, p + "block_count", 0));
  PAGODA_ASSIGN_OR_RETURN(s.hidden, gguf_int(f, p + "embedding_length", 0));
  PAGODA_ASSIGN_OR_RETURN(s.ffn, gguf_int(f, p + "feed_forward_length", 0));
  PAGODA_ASSIGN_OR_RETURN(s.n_heads, gguf_int(f, p + "attention.head_count", 0));
  if (s.n_layers <= 0 || s.hidden <= 0 || s.n_heads <= 0)
    return corrupt("the GGUF metadata lacks " + p +
                   "block_count, embedding_length or "
                   "attention.head_count");
  PAGODA_ASSIGN_OR_RETURN(s.n_kv_heads, gguf_int(f, p + "attention.head_count_kv", s.n_heads));
  PAGODA_ASSIGN_OR_RETURN(s.head_dim,
                          gguf_int(f, p + "attention.key_length", s.hidden / s.n_heads));
  PAGODA_ASSIGN_OR_RETURN(s.max_context, gguf_int(f, p + "context_length", 0));
  PAGODA_ASSIGN_OR_RETURN(s.n_experts, gguf_int(f, p + "expert_count", 0));
  if (s.n_experts > 0) {
    PAGODA_ASSIGN_OR_RETURN(s.n_active_experts, gguf_int(f, p + "expert_used_count", 0));
    PAGODA_ASSIGN_OR_RETURN(s.n_shared_experts, gguf_int(f, p + "expert_shared_count", 0));
    PAGODA_ASSIGN_OR_RETURN(s.expert_ffn, gguf_int(f, p + "expert_feed_forward_length", s.ffn));
    PAGODA_ASSIGN_OR_RETURN(s.first_dense_layers, gguf_int(f, p + "leading_dense_block_count", 0));
  }
  PAGODA_ASSIGN_OR_RETURN(s.kv_lora_rank, gguf_int(f, p + "attention.kv_lora_rank", 0));
  if (s.is_mla()) {
    PAGODA_ASSIGN_OR_RETURN(s.q_lora_rank, gguf_int(f, p + "attention.q_lora_rank", 0));
    PAGODA_ASSIGN_OR_RETURN(s.qk_rope_head_dim, gguf_int(f, p + "rope.dimension_count", 0));
    // Newer converters store the absorbed sizes in key_length and the per-head ones in
    // key_length_mla.
    PAGODA_ASSIGN_OR_RETURN(int64_t k, gguf_int(f, p + "attention.key_length_mla", 0));
    if (k == 0) k = s.head_dim;
    PAGODA_ASSIGN_OR_RETURN(s.v_head_dim, gguf_int(f, p + "attention.value_length_mla", 0));
    if (s.v_head_dim == 0) {
      PAGODA_ASSIGN_OR_RETURN(s.v_head_dim, gguf_int(f, p + "attention.value_length", 0));
    }
    s.qk_nope_head_dim = k - s.qk_rope_head_dim;
    s.head_dim = k;
  }
  PAGODA_ASSIGN_OR_RETURN(s.sliding_window, gguf_int(f, p + "attention.sliding_window", 0));
  if (s.sliding_window > 0) {
    // llama.cpp's pattern: within each period the last layer is global.
    const int64_t def = arch == "gemma3" ? 6 : arch == "gemma2" ? 2 : 1;
    PAGODA_ASSIGN_OR_RETURN(const int64_t period,
                            gguf_int(f, p + "attention.sliding_window_pattern", def));
    for (int64_t l = 0; l < s.n_layers; ++l)
      s.layer_attention.push_back(period <= 1 || l % period < period - 1 ? LayerAttention::kSliding
                                                                         : LayerAttention::kFull);
  }
  return s;
}

bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

Result<std::string> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<ModelSource> source_from_folder(const std::filesystem::path& dir) {
  const auto config = dir / "config.json";
  if (!is_file(config)) return not_found("folder '" + dir.string() + "' has no config.json");
  PAGODA_ASSIGN_OR_RETURN(const std::string text, slurp(config.string()));
  PAGODA_ASSIGN_OR_RETURN(ModelSource src, source_from_hf_config(text, config.string()));
  src.kind = "checkpoint";
  src.where = dir.string();
  const auto index = dir / "model.safetensors.index.json";
  const auto single = dir / "model.safetensors";
  if (is_file(index)) {
    PAGODA_ASSIGN_OR_RETURN(src.checkpoint_bytes, safetensors_index_total(index.string()));
  } else if (is_file(single)) {
    PAGODA_ASSIGN_OR_RETURN(src.checkpoint_bytes, safetensors_data_bytes(single.string()));
  } else {
    src.notes.push_back(
        "no model.safetensors(.index.json) in the folder; weights counted from "
        "the configuration");
  }
  if (src.checkpoint_bytes > 0)
    src.notes.push_back(
        "weights are the checkpoint's tensor bytes: everything it holds "
        "(vision towers, MTP layers, scales) is counted");
  return src;
}

}  // namespace

namespace {

// A note when the CUDA backend would refuse the recipe the CPU runs (a plan that reads
// "fits" for a model `serve --device cuda` refuses would mislead).
void note_cuda_refusal(const ModelRecipe& r, ModelSource* src) {
  if (Status s = require_features(r, kCudaRecipeFeatures, "the CUDA backend"); !s)
    src->notes.push_back("Pagoda's CUDA backend does not run this model (" + s.message() + ")");
}

}  // namespace

Result<ModelSource> source_from_gguf(const GgufFile& f) {
  if (f.tensors().empty())
    return invalid_argument("the file has no tensors (a vocabulary-only file?)");
  const auto arch_name = f.get_string("general.architecture");
  if (!arch_name) return corrupt("the file has no general.architecture");
  const std::string arch(*arch_name);
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr || embd->n_dims < 2)
    return corrupt("the file has no 2-D token_embd.weight to size the vocabulary from");

  ModelSource src;
  src.kind = "gguf";
  src.where = f.path();
  // What the engine would run: the configuration every backend reads, and a recipe whose
  // features the CPU backend implements (the CUDA backend's may be fewer: noted).
  Result<ModelConfig> c = read_model_config(f);
  const Status read =
      c ? require_features(c.value().recipe, kCpuRecipeFeatures, "the CPU backend") : c.status();
  if (read.is_ok()) {
    src.shape = shape_from_config(c.value());  // the numbers the engine will use
    note_cuda_refusal(c.value().recipe, &src);
  } else {
    if (read.code() != StatusCode::kUnsupported) return read;
    src.notes.push_back("Pagoda's engine does not run this file (" + read.message() +
                        "); planned from its GGUF metadata");
    PAGODA_ASSIGN_OR_RETURN(src.shape, generic_gguf_shape(f, arch));
    src.shape.vocab = embd->ne[1];
    src.shape.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  }
  std::map<std::string, int64_t> by_type;
  for (const GgufTensorInfo& t : f.tensors()) {
    src.tensors.push_back(
        classify(t.name, static_cast<int64_t>(t.size), t.n_elements(), t.n_dims, t.type));
    const SourceTensor& s = src.tensors.back();
    if (s.place == TensorPlace::kLayer && (s.layer < 0 || s.layer >= src.shape.n_layers))
      return corrupt("tensor '" + t.name + "' names a layer outside the model");
    if (s.matrix) by_type[s.type] += s.bytes;
  }
  for (const auto& [type, bytes] : by_type)
    if (src.dtype.empty() || bytes > by_type[src.dtype]) src.dtype = type;
  PAGODA_RETURN_IF_ERROR(validate(src.shape).with_context("'" + f.path() + "'"));
  return src;
}

Result<ModelSource> source_from_tensors(const TensorSource& ts) {
  if (const GgufFile* f = ts.gguf()) return source_from_gguf(*f);
  PAGODA_ASSIGN_OR_RETURN(const ModelConfig c, ts.model_config());
  ModelSource src;
  src.kind = "checkpoint";
  src.where = ts.path();
  src.shape = shape_from_config(c);
  note_cuda_refusal(c.recipe, &src);
  std::map<std::string, int64_t> by_type;
  bool restated = false;
  for (const WeightTensor& t : ts.tensors()) {
    // Both backends keep vectors (norms, biases, RoPE factors) in f32, whatever the
    // checkpoint stores them in.
    const bool vector = t.n_dims < 2;
    restated = restated || (vector && t.type != DType::kF32);
    src.tensors.push_back(classify(t.name,
                                   vector ? t.n_elements() * 4 : static_cast<int64_t>(t.size),
                                   t.n_elements(), t.n_dims, vector ? DType::kF32 : t.type));
    const SourceTensor& s = src.tensors.back();
    if (s.place == TensorPlace::kLayer && (s.layer < 0 || s.layer >= src.shape.n_layers))
      return corrupt("tensor '" + t.file_name + "' names a layer outside the model");
    if (s.matrix) by_type[s.type] += s.bytes;
  }
  for (const auto& [type, bytes] : by_type)
    if (src.dtype.empty() || bytes > by_type[src.dtype]) src.dtype = type;
  if (restated)
    src.notes.push_back(
        "the checkpoint's vectors (norms, biases) are counted in f32, as "
        "the engine keeps them");
  PAGODA_RETURN_IF_ERROR(validate(src.shape).with_context("'" + ts.path() + "'"));
  return src;
}

namespace {

// type_name backwards.
std::optional<DType> type_from_name(const std::string& name) {
  // GGUF's ids, then the internal types the checkpoint loaders make (NF4, FP8, Q4_G...).
  for (const uint32_t base : {0u, kFirstInternalDType})
    for (uint32_t id = base; id < base + 64; ++id) {
      const DTypeInfo* info = dtype_info(id);
      if (info != nullptr && type_name(static_cast<DType>(id)) == name)
        return static_cast<DType>(id);
    }
  return std::nullopt;
}

}  // namespace

namespace {

// Recounts the matrices of a GGUF source in the types `backend` stores them as
// (model/weight_types.h) and notes what changed; tensors its loader refuses keep the
// file's bytes (the load will say why).
int restate(ModelSource* src, WeightBackend backend) {
  if (src->tensors.empty()) return 0;  // no tensors to restate: counted from the shape
  std::vector<size_t> index;           // into src->tensors
  std::vector<std::pair<std::string, DType>> matrices;
  for (size_t i = 0; i < src->tensors.size(); ++i) {
    const SourceTensor& t = src->tensors[i];
    const std::optional<DType> type = type_from_name(t.type);
    if (!t.matrix || !type) continue;
    index.push_back(i);
    matrices.emplace_back(t.name, *type);
  }
  const std::vector<std::optional<DType>> to = stored_types(backend, matrices);
  std::map<std::string, int> changes;  // "q4_k -> q4_1" -> tensors
  int64_t growth = 0, repack_growth = 0;
  for (size_t k = 0; k < matrices.size(); ++k) {
    if (!to[k]) continue;
    SourceTensor& t = src->tensors[index[k]];
    if (t.elements == 0) {
      const DTypeInfo& from = dtype_info(matrices[k].second);
      t.elements = t.bytes / static_cast<int64_t>(from.block_bytes) * from.block_elems;
    }
    const int64_t elements = t.elements;
    const int64_t bytes = stored_bytes(backend, *to[k], elements);
    if (*to[k] == matrices[k].second) {
      repack_growth += bytes - t.bytes;  // the same type in the backend's own layout
    } else {
      growth += bytes - t.bytes;
      ++changes[t.type + " -> " + type_name(*to[k])];
      t.type = type_name(*to[k]);
    }
    t.bytes = bytes;
  }
  const char* who = backend == WeightBackend::kCuda ? "CUDA" : "CPU";
  if (repack_growth != 0)
    src->notes.push_back(str_format(
        "the %s backend repacks the weights' scales for its kernels: weights %+.1f MiB against "
        "the file",
        who, static_cast<double>(repack_growth) / 1048576.0));
  if (changes.empty()) return 0;
  std::string list;
  int restated = 0;
  for (const auto& [what, n] : changes) {
    list += (list.empty() ? "" : ", ") + what + " (" + std::to_string(n) + " tensors)";
    restated += n;
  }
  src->notes.push_back(
      str_format("the %s backend converts at load what its kernels do not multiply: %s; weights "
                 "%+.1f MiB against the file",
                 who, list.c_str(), static_cast<double>(growth) / 1048576.0));
  return restated;
}

}  // namespace

int restate_for_cuda(ModelSource* src) {
  return restate(src, WeightBackend::kCuda);
}

int restate_for_cpu(ModelSource* src) {
  return restate(src, WeightBackend::kCpu);
}

Result<ModelSource> resolve_model(const std::string& spec) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(spec);
  if (fs::is_directory(p, ec)) {
    // A checkpoint the engine runs is counted tensor by tensor, as its loaders store it;
    // any other folder (an architecture Pagoda plans but does not run, a config.json
    // without weights, a checkpoint it refuses) from its configuration and checkpoint
    // size, with a note saying why.
    auto ts = open_tensor_source(spec);
    Result<ModelSource> engine = ts ? source_from_tensors(**ts) : Result<ModelSource>(ts.status());
    if (engine) return engine;
    PAGODA_ASSIGN_OR_RETURN(ModelSource src, source_from_folder(p));
    src.notes.push_back("Pagoda's engine cannot load this folder (" + engine.status().message() +
                        "); planned from its config.json");
    return src;
  }
  if (fs::exists(p, ec)) {
    if (!fs::is_regular_file(p, ec))
      return invalid_argument("'" + spec + "' is not a regular file");
    if (ascii_lower(p.extension().string()) == ".json") {
      PAGODA_ASSIGN_OR_RETURN(const std::string text, slurp(spec));
      return source_from_hf_config(text, spec);
    }
    auto file = GgufFile::open(spec);
    if (!file) return file.status().with_context("'" + spec + "'");
    return source_from_gguf(**file);
  }
  if (const CatalogEntry* e = find_in_catalog(spec)) return source_from_catalog(*e);
  return not_found("unknown model '" + spec +
                   "': no such file or folder, and not in the catalog (did you mean '" +
                   std::string(closest_catalog_name(spec)) + "'? pagoda plan --list shows all)");
}

}  // namespace pagoda::ledger
