// Hugging Face config.json -> ModelShape. The keys differ by family; each is read where
// its family writes it, and every default the file leaves open is recorded as a note.
// (JSON here is a model file format, like GGUF metadata; nlohmann stays in this file.)
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ledger/sources.h"

namespace pagoda::ledger {
namespace {

using nlohmann::json;

bool starts_with(const std::string& s, std::string_view p) {
  return s.rfind(p, 0) == 0;
}

// Typed lookups that fall back to `def` when the key is missing or of another type
// (json::value would throw on a type mismatch).
std::string str_or(const json& o, const char* key, const std::string& def) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : def;
}
int64_t int_or(const json& o, const char* key, int64_t def) {
  auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : def;
}
bool bool_or(const json& o, const char* key, bool def) {
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() ? it->get<bool>() : def;
}

// Reads keys from the text config first, then the top level (multimodal configs keep the
// language model's numbers under text_config).
class Keys {
 public:
  Keys(const json& top, const json* text) : top_(top), text_(text) {}

  const json* find(const char* key) const {
    if (text_ != nullptr) {
      auto it = text_->find(key);
      if (it != text_->end() && !it->is_null()) return &*it;
    }
    auto it = top_.find(key);
    if (it != top_.end() && !it->is_null()) return &*it;
    return nullptr;
  }
  Result<int64_t> integer(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return not_found(std::string("config.json has no '") + key + "'");
    if (!v->is_number_integer() || v->get<int64_t>() < 0)
      return corrupt(std::string("config.json '") + key + "' is not a non-negative integer");
    return v->get<int64_t>();
  }
  Result<int64_t> integer_or(const char* key, int64_t def) const {
    return find(key) == nullptr ? Result<int64_t>(def) : integer(key);
  }
  std::optional<bool> boolean(const char* key) const {
    const json* v = find(key);
    if (v == nullptr || !v->is_boolean()) return std::nullopt;
    return v->get<bool>();
  }
  std::string string(const char* key) const {
    const json* v = find(key);
    return v != nullptr && v->is_string() ? v->get<std::string>() : "";
  }

 private:
  const json& top_;
  const json* text_;
};

std::string weight_dtype(const Keys& k, std::vector<std::string>* notes) {
  if (const json* q = k.find("quantization_config"); q != nullptr && q->is_object()) {
    const std::string method = str_or(*q, "quant_method", "");
    if (method == "fp8") return "fp8";
    if ((method == "awq" || method == "gptq") && int_or(*q, "bits", 0) == 4) {
      if (int_or(*q, "group_size", 128) != 128)
        notes->push_back("the checkpoint's int4 groups are not 128 wide; counted as int4-g128");
      return "int4-g128";
    }
    if (method == "bitsandbytes" && bool_or(*q, "load_in_4bit", false)) return "nf4";
    if (method == "bitsandbytes" && bool_or(*q, "load_in_8bit", false)) return "int8";
    if (!method.empty())
      notes->push_back("quantization method '" + method +
                       "' is not modelled; weights counted in the checkpoint's torch_dtype");
  }
  std::string t = k.string("torch_dtype");
  if (t.empty()) t = k.string("dtype");
  if (t == "bfloat16") return "bf16";
  if (t == "float16") return "fp16";
  if (t == "float32") return "fp32";
  notes->push_back("config.json names no torch_dtype; weights counted as bf16");
  return "bf16";
}

Status read_sliding_window(const Keys& k, const std::string& type, ModelShape* s,
                           std::vector<std::string>* notes) {
  PAGODA_ASSIGN_OR_RETURN(const int64_t window, k.integer_or("sliding_window", 0));
  if (const json* types = k.find("layer_types"); types != nullptr && types->is_array()) {
    if (static_cast<int64_t>(types->size()) != s->n_layers)
      return corrupt("config.json layer_types does not list every layer");
    bool none = false;
    for (const json& t : *types) {
      const std::string name = t.is_string() ? t.get<std::string>() : "";
      if (name == "full_attention") {
        s->layer_attention.push_back(LayerAttention::kFull);
      } else if (name == "sliding_attention") {
        s->layer_attention.push_back(LayerAttention::kSliding);
      } else {
        s->layer_attention.push_back(LayerAttention::kNone);
        none = true;
      }
    }
    if (none)
      notes->push_back(
          "layers without attention keep no KV cache here; their mixer weights and recurrent "
          "state are not modelled (plan a checkpoint folder for exact weight bytes)");
    s->sliding_window = window;
    if (s->n_sliding_layers() > 0 && window <= 0)
      return corrupt("config.json has sliding layers but no sliding_window");
    return Status::ok();
  }
  if (window <= 0 || k.boolean("use_sliding_window") == false) return Status::ok();
  s->sliding_window = window;
  s->layer_attention.assign(static_cast<size_t>(s->n_layers), LayerAttention::kSliding);
  if (starts_with(type, "gemma3")) {
    PAGODA_ASSIGN_OR_RETURN(const int64_t pattern, k.integer_or("sliding_window_pattern", 6));
    if (pattern <= 0) return corrupt("config.json sliding_window_pattern must be positive");
    for (int64_t l = 0; l < s->n_layers; ++l)
      if ((l + 1) % pattern == 0)
        s->layer_attention[static_cast<size_t>(l)] = LayerAttention::kFull;
  } else if (starts_with(type, "gemma2")) {
    for (int64_t l = 1; l < s->n_layers; l += 2)
      s->layer_attention[static_cast<size_t>(l)] = LayerAttention::kFull;
  } else if (starts_with(type, "qwen2") || starts_with(type, "qwen3")) {
    // Qwen applies the window only from layer max_window_layers on.
    PAGODA_ASSIGN_OR_RETURN(const int64_t first, k.integer_or("max_window_layers", 0));
    for (int64_t l = 0; l < std::min(first, s->n_layers); ++l)
      s->layer_attention[static_cast<size_t>(l)] = LayerAttention::kFull;
  }
  return Status::ok();
}

}  // namespace

Result<ModelSource> source_from_hf_config(std::string_view text, const std::string& where) {
  json top = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded() || !top.is_object())
    return corrupt("'" + where + "' is not a JSON object");
  const json* text_cfg = nullptr;
  if (auto it = top.find("text_config"); it != top.end() && it->is_object()) text_cfg = &*it;
  const Keys k(top, text_cfg);

  ModelSource src;
  src.kind = "config.json";
  src.where = where;
  ModelShape& s = src.shape;
  std::vector<std::string>& notes = src.notes;
  s.arch = k.string("model_type");
  if (text_cfg != nullptr) s.arch = str_or(*text_cfg, "model_type", s.arch);
  s.name = k.string("_name_or_path");
  if (s.name.empty()) {
    if (const json* a = k.find("architectures");
        a != nullptr && a->is_array() && !a->empty() && (*a)[0].is_string())
      s.name = (*a)[0].get<std::string>();
    else
      s.name = where;
  }
  const std::string& type = s.arch;

  PAGODA_ASSIGN_OR_RETURN(s.n_layers, k.integer("num_hidden_layers"));
  PAGODA_ASSIGN_OR_RETURN(s.hidden, k.integer("hidden_size"));
  PAGODA_ASSIGN_OR_RETURN(s.n_heads, k.integer("num_attention_heads"));
  PAGODA_ASSIGN_OR_RETURN(s.vocab, k.integer("vocab_size"));
  PAGODA_ASSIGN_OR_RETURN(s.n_kv_heads, k.integer_or("num_key_value_heads", s.n_heads));
  PAGODA_ASSIGN_OR_RETURN(s.ffn, k.integer_or("intermediate_size", 0));
  PAGODA_ASSIGN_OR_RETURN(s.max_context, k.integer_or("max_position_embeddings", 0));
  if (s.n_heads <= 0) return corrupt("config.json num_attention_heads must be positive");
  PAGODA_ASSIGN_OR_RETURN(s.head_dim, k.integer_or("head_dim", s.hidden / s.n_heads));

  if (auto tied = k.boolean("tie_word_embeddings")) {
    s.tied_embeddings = *tied;
  } else {
    s.tied_embeddings = starts_with(type, "gemma");
    notes.push_back(std::string("config.json does not say whether embeddings are tied; assumed ") +
                    (s.tied_embeddings ? "tied" : "untied"));
  }
  // Qwen2 always has q/k/v biases; elsewhere attention_bias says so.
  s.qkv_bias = k.boolean("attention_bias")
                   .value_or(type == "qwen2" || type == "qwen2_moe" || type == "qwen2_vl");
  s.qk_norm = starts_with(type, "qwen3") || starts_with(type, "gemma3") ||
              starts_with(type, "olmo2") || k.boolean("use_qk_norm").value_or(false);
  if (starts_with(type, "gemma2") || starts_with(type, "gemma3")) s.norms_per_layer = 4;

  // Mixture of experts: Mixtral (num_local_experts), Qwen MoE (num_experts), DeepSeek
  // (n_routed_experts).
  PAGODA_ASSIGN_OR_RETURN(s.n_experts, k.integer_or("num_local_experts", 0));
  for (const char* key : {"num_experts", "n_routed_experts"}) {
    if (s.n_experts == 0) {
      PAGODA_ASSIGN_OR_RETURN(s.n_experts, k.integer_or(key, 0));
    }
  }
  if (s.n_experts > 0) {
    PAGODA_ASSIGN_OR_RETURN(s.n_active_experts, k.integer("num_experts_per_tok"));
    PAGODA_ASSIGN_OR_RETURN(s.expert_ffn, k.integer_or("moe_intermediate_size", s.ffn));
    PAGODA_ASSIGN_OR_RETURN(s.n_shared_experts, k.integer_or("n_shared_experts", 0));
    PAGODA_ASSIGN_OR_RETURN(const int64_t shared_ffn,
                            k.integer_or("shared_expert_intermediate_size", 0));
    if (shared_ffn > 0) {
      s.n_shared_experts = std::max<int64_t>(s.n_shared_experts, 1);
      s.shared_expert_ffn = shared_ffn;
    }
    PAGODA_ASSIGN_OR_RETURN(s.first_dense_layers, k.integer_or("first_k_dense_replace", 0));
    s.expert_score_bias = k.string("topk_method") == "noaux_tc";
    PAGODA_ASSIGN_OR_RETURN(const int64_t step, k.integer_or("decoder_sparse_step", 1));
    const json* only_mlp = k.find("mlp_only_layers");
    if (step > 1 || (only_mlp != nullptr && only_mlp->is_array() && !only_mlp->empty())) {
      s.moe_layers.assign(static_cast<size_t>(s.n_layers), 0);
      for (int64_t l = 0; l < s.n_layers; ++l)
        s.moe_layers[static_cast<size_t>(l)] = step > 0 && (l + 1) % step == 0;
      if (only_mlp != nullptr && only_mlp->is_array())
        for (const json& l : *only_mlp)
          if (l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < s.n_layers)
            s.moe_layers[static_cast<size_t>(l.get<int64_t>())] = 0;
    }
  }

  // Multi-head latent attention.
  PAGODA_ASSIGN_OR_RETURN(s.kv_lora_rank, k.integer_or("kv_lora_rank", 0));
  if (s.is_mla()) {
    PAGODA_ASSIGN_OR_RETURN(s.q_lora_rank, k.integer_or("q_lora_rank", 0));
    PAGODA_ASSIGN_OR_RETURN(s.qk_rope_head_dim, k.integer("qk_rope_head_dim"));
    PAGODA_ASSIGN_OR_RETURN(s.qk_nope_head_dim, k.integer("qk_nope_head_dim"));
    PAGODA_ASSIGN_OR_RETURN(s.v_head_dim, k.integer("v_head_dim"));
    s.head_dim = s.qk_nope_head_dim + s.qk_rope_head_dim;
  }
  PAGODA_ASSIGN_OR_RETURN(const int64_t mtp_layers, k.integer_or("num_nextn_predict_layers", 0));
  if (mtp_layers > 0)
    notes.push_back("the multi-token-prediction layers are not counted (speculative only)");
  PAGODA_RETURN_IF_ERROR(read_sliding_window(k, type, &s, &notes));
  if (k.find("vision_config") != nullptr)
    notes.push_back("only the language model is counted, not the vision tower");
  src.dtype = weight_dtype(k, &notes);
  PAGODA_RETURN_IF_ERROR(validate(s).with_context("config.json '" + where + "'"));
  return src;
}

Result<int64_t> safetensors_data_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read '" + path + "'");
  uint8_t len_bytes[8] = {};
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8))
    return corrupt("'" + path + "' is too short for a safetensors header");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = len << 8 | len_bytes[i];
  if (len == 0 || len > (100u << 20)) return corrupt("'" + path + "' has a bad header length");
  std::string header(len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(len)))
    return corrupt("'" + path + "' is truncated inside its header");
  json h = json::parse(header, nullptr, false);
  if (h.is_discarded() || !h.is_object()) return corrupt("'" + path + "' has a malformed header");
  int64_t end = 0;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json* off = nullptr;
    if (it.value().is_object())
      if (auto o = it.value().find("data_offsets"); o != it.value().end()) off = &*o;
    if (off == nullptr || !off->is_array() || off->size() != 2 || !(*off)[1].is_number_unsigned())
      return corrupt("'" + path + "': tensor '" + it.key() + "' has no data_offsets");
    end = std::max(end, (*off)[1].get<int64_t>());
  }
  return end;
}

// The index of a sharded checkpoint: metadata.total_size, the bytes of all its tensors.
Result<int64_t> safetensors_index_total(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read '" + path + "'");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return corrupt("'" + path + "' is not a JSON object");
  auto meta = j.find("metadata");
  if (meta == j.end() || !meta->is_object() || !meta->contains("total_size") ||
      !(*meta)["total_size"].is_number())
    return not_found("'" + path + "' has no metadata.total_size");
  const double total = (*meta)["total_size"].get<double>();
  if (!(total > 0)) return corrupt("'" + path + "' has a non-positive total_size");
  return static_cast<int64_t>(total);
}

}  // namespace pagoda::ledger
