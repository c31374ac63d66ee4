#include "model/hf_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "model/arch/arch.h"
#include "model/hf_folder.h"
#include "model/hf_quant_format.h"
#include "model/safetensors.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// WeightTensor::part of the tensors the checkpoint computes itself (RoPE factors).
constexpr uint32_t kOwnedPart = UINT32_MAX;
// WeightTensor::part of a quantized layer converted on demand; its offset is the layer's
// index in layers_.
constexpr uint32_t kConvertedPart = UINT32_MAX - 1;

// The GGUF matrices that are nn.Linear layers in transformers (the targets "Linear" means).
bool is_linear(const std::string& gguf_name) {
  if (gguf_name == kOutputTensor) return true;
  for (const char* m : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                        "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
    const std::string_view n(gguf_name), suffix(m);
    if (n.size() > suffix.size() && n.substr(n.size() - suffix.size()) == suffix &&
        n[n.size() - suffix.size() - 1] == '.')
      return true;
  }
  return false;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

class HfCheckpoint : public TensorSource {
 public:
  explicit HfCheckpoint(const std::string& dir) : TensorSource(dir) {}

  std::string_view format() const override { return "safetensors"; }
  Result<ModelConfig> model_config() const override { return config_; }
  void release_tensor(const WeightTensor& t) const override {
    if (t.part < shards_.size()) shards_[t.part]->release_range(t.offset, t.size);
    if (t.part != kConvertedPart) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      converted_.erase(t.offset);
    }
    for (const QuantPiece& p : layers_[t.offset]->all) p.file->release(*p.tensor);
  }
  void release_tensor_data() const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      converted_.clear();
    }
    for (const auto& s : shards_) s->release_all();
  }

 protected:
  const uint8_t* materialize(const WeightTensor& t) const override {
    if (t.part != kConvertedPart) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = converted_.find(t.offset);
    if (it == converted_.end())
      it = converted_.emplace(t.offset, layers_[t.offset]->convert()).first;
    return it->second.data();
  }

 public:
  Status open() {
    const fs::path dir(path());
    const fs::path config_path = dir / "config.json";
    if (!is_file(config_path))
      return not_found("folder '" + path() +
                       "' has no config.json (a Hugging Face checkpoint "
                       "folder holds config.json and model.safetensors)");
    PAGODA_ASSIGN_OR_RETURN(const std::string text, read_json_file(config_path));
    PAGODA_ASSIGN_OR_RETURN(HfModelConfig hc, read_hf_model_config(text, config_path.string()));
    config_ = std::move(hc.config);
    if (!hc.quantization_config.empty()) {
      auto q = open_hf_quant_format(hc.quantization_config);
      if (!q) return q.status().with_context("'" + config_path.string() + "'");
      quant_ = std::move(q).value();
    }
    const fs::path norm = dir.lexically_normal();
    config_.name = (norm.has_filename() ? norm.filename() : norm.parent_path().filename()).string();
    PAGODA_RETURN_IF_ERROR(open_shards(dir));
    PAGODA_RETURN_IF_ERROR(add_quantized_layers());
    PAGODA_RETURN_IF_ERROR(check_kv_scales());
    if (!hc.rope_freq_factors.empty()) {
      rope_factors_ = std::move(hc.rope_freq_factors);
      WeightTensor t;
      t.name = kRopeFreqsTensor;
      t.file_name = "rope_freqs (from config.json rope_scaling)";
      t.type = DType::kF32;
      t.n_dims = 1;
      t.ne[0] = static_cast<int64_t>(rope_factors_.size());
      t.size = rope_factors_.size() * sizeof(float);
      t.data = reinterpret_cast<const uint8_t*>(rope_factors_.data());
      t.part = kOwnedPart;
      PAGODA_RETURN_IF_ERROR(add_tensor(std::move(t)));
    }
    return check_tensors();
  }

 private:
  Status open_shards(const fs::path& dir) {
    PAGODA_ASSIGN_OR_RETURN(HfShards hs, list_hf_shards(dir));
    const std::optional<SafetensorsIndex>& index = hs.index;
    const fs::path& index_path = hs.index_path;
    for (const std::string& name : hs.names) {
      const fs::path p = dir / name;
      PAGODA_ASSIGN_OR_RETURN(auto shard, SafetensorsFile::open(p.string()));
      const uint32_t part = static_cast<uint32_t>(shards_.size());
      for (const SafetensorsTensor& st : shard->tensors()) {
        if (index) {
          const auto it = index->weight_map.find(st.name);
          if (it == index->weight_map.end() || it->second != name)
            return corrupt("shard '" + p.string() + "' holds '" + st.name +
                           "', which the index does not place there");
        }
        PAGODA_RETURN_IF_ERROR(add(*shard, st, part));
      }
      shards_.push_back(std::move(shard));
    }
    if (index) {
      for (const auto& [tensor, shard] : index->weight_map)
        if (seen_.count(tensor) == 0)
          return not_found("'" + index_path.string() + "' places '" + tensor + "' in '" + shard +
                           "', which lacks it");
    }
    return Status::ok();
  }

  // One checkpoint tensor under the loaders' name.
  Status add(const SafetensorsFile& f, const SafetensorsTensor& st, uint32_t part) {
    seen_.insert(st.name);
    const std::string what = "tensor '" + st.name + "' in '" + f.path() + "'";
    if (hf_tensor_ignored(st.name)) return Status::ok();
    if (quant_ && quant_->kv_cache_scales()) {
      PAGODA_ASSIGN_OR_RETURN(const bool kv, read_kv_scale(f, st));
      if (kv) return Status::ok();
    }
    if (quant_) {
      PAGODA_ASSIGN_OR_RETURN(const bool held, hold_quantized(f, st, part));
      if (held) return Status::ok();
    }
    const std::optional<std::string> name = hf_to_gguf_tensor_name(st.name);
    if (!name)
      return unsupported(what + " is not one Pagoda knows for a " + config_.arch +
                         " checkpoint; refusing to run without it");
    // Tied embeddings: transformers uses the embedding whatever the file also holds.
    if (*name == kOutputTensor && config_.recipe.tied_output) return Status::ok();
    if (!st.type ||
        (*st.type != DType::kF32 && *st.type != DType::kF16 && *st.type != DType::kBF16))
      return unsupported(what + " has dtype " + st.dtype +
                         "; Pagoda loads F32, F16 and BF16 checkpoints");
    if (st.shape.empty() || st.shape.size() > 4)
      return unsupported(what + str_format(" has %zu dimensions", st.shape.size()));
    WeightTensor t;
    t.name = *name;
    t.file_name = st.name;
    t.type = *st.type;
    t.n_dims = static_cast<int>(st.shape.size());
    // Outermost first in the file, row length first here: the same bytes.
    for (int d = 0; d < t.n_dims; ++d) t.ne[d] = st.shape[st.shape.size() - 1 - d];
    t.size = st.end - st.begin;
    t.data = f.tensor_data(st);
    t.part = part;
    t.offset = f.data_offset() + st.begin;
    return add_tensor(std::move(t));
  }

  // model.layers.N.self_attn.k_scale or v_scale, one positive float, into kv_scales_:
  // true when `st` is one.
  Result<bool> read_kv_scale(const SafetensorsFile& f, const SafetensorsTensor& st) {
    constexpr std::string_view kPrefix = "model.layers.", kMid = ".self_attn.";
    const std::string_view name(st.name);
    if (name.substr(0, kPrefix.size()) != kPrefix) return false;
    const size_t mid = name.find(kMid, kPrefix.size());
    if (mid == std::string_view::npos) return false;
    const std::string_view param = name.substr(mid + kMid.size());
    if (param != "k_scale" && param != "v_scale") return false;
    const std::string what = "tensor '" + st.name + "' in '" + f.path() + "'";
    int layer = -1;
    const std::string_view digits = name.substr(kPrefix.size(), mid - kPrefix.size());
    if (digits.empty() || digits.size() > 6 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos ||
        (layer = std::stoi(std::string(digits))) >= config_.n_layers)
      return corrupt(what +
                     str_format(" names no layer of the %d config.json has", config_.n_layers));
    if (!st.type ||
        (*st.type != DType::kF32 && *st.type != DType::kF16 && *st.type != DType::kBF16) ||
        st.n_elements() != 1)
      return corrupt(what + " is not one float (a KV-cache scale; dtype " + st.dtype + ")");
    const float v = quant_float_at(QuantPiece{&f, &st, 0}, 0);
    if (!(v > 0) || !std::isfinite(v))
      return corrupt(what + str_format(" is %g; a KV-cache scale is positive and finite", v));
    KvCacheScales& kv = kv_scales_;
    if (kv.k.empty()) {
      kv.k.assign(static_cast<size_t>(config_.n_layers), 0.0f);
      kv.v.assign(static_cast<size_t>(config_.n_layers), 0.0f);
    }
    (param == "k_scale" ? kv.k : kv.v)[static_cast<size_t>(layer)] = v;
    return true;
  }

  // config.json's kv_cache_scheme promises a K and a V scale for every layer.
  Status check_kv_scales() const {
    if (!quant_ || !quant_->kv_cache_scales()) return Status::ok();
    for (int l = 0; l < config_.n_layers; ++l)
      for (const char* which : {"k_scale", "v_scale"}) {
        const std::vector<float>& s = which[0] == 'k' ? kv_scales_.k : kv_scales_.v;
        if (s.empty() || s[static_cast<size_t>(l)] == 0.0f)
          return not_found("checkpoint '" + path() +
                           str_format("' has no model.layers.%d.self_attn.%s, which "
                                      "config.json's kv_cache_scheme calls for",
                                      l, which));
      }
    return Status::ok();
  }

  // A tensor of a layer the quantization_config quantizes (its packed weight, scales,
  // zero points...), kept for add_quantized_layers: true when held.
  Result<bool> hold_quantized(const SafetensorsFile& f, const SafetensorsTensor& st,
                              uint32_t part) {
    auto [module, param] = quant_->split(st.name);
    if (param.empty()) return false;
    const std::optional<std::string> gguf = hf_to_gguf_tensor_name(module + ".weight");
    PAGODA_ASSIGN_OR_RETURN(
        const bool held, quant_->holds(module, param, gguf.has_value(), gguf && is_linear(*gguf)));
    if (held) held_[module][param] = QuantPiece{&f, &st, part};
    return held;
  }

  // Each held layer checked by the format and added as the type it converts to, without
  // data (materialize converts it when a loader asks).
  Status add_quantized_layers() {
    for (const auto& [module, params] : held_) {
      const std::optional<std::string> gguf = hf_to_gguf_tensor_name(module + ".weight");
      if (!gguf)
        return unsupported("tensor '" + module + "." + params.begin()->first + "' in '" + path() +
                           "' belongs to no layer Pagoda knows for a " + config_.arch +
                           " checkpoint");
      if (*gguf == kOutputTensor && config_.recipe.tied_output) continue;
      auto made = quant_->make_layer(module, params, is_linear(*gguf));
      if (!made)
        return made.status().with_context("'" + path() + "' (" + std::string(quant_->method()) +
                                          ")");
      std::unique_ptr<QuantLayer> layer = std::move(made).value();
      WeightTensor t;
      t.name = *gguf;
      t.file_name = module + ".weight";
      t.type = layer->type;
      t.n_dims = 2;
      t.ne[0] = layer->cols;
      t.ne[1] = layer->rows;
      t.size = row_bytes(layer->type, layer->cols) * static_cast<uint64_t>(layer->rows);
      t.part = kConvertedPart;
      t.offset = layers_.size();
      layers_.push_back(std::move(layer));
      PAGODA_RETURN_IF_ERROR(add_tensor(std::move(t)));
    }
    return Status::ok();
  }

  // Every tensor the recipe reads is there, and nothing it would not read (a bias the
  // recipe has no place for) is.
  Status check_tensors() const {
    const std::vector<std::string> want = model_tensor_names(config_);
    const std::set<std::string> wanted(want.begin(), want.end());
    for (const WeightTensor& t : tensors())
      if (wanted.count(t.name) == 0)
        return unsupported("tensor '" + t.file_name + "' in '" + path() + "' has no place in the " +
                           config_.arch +
                           " recipe config.json describes; refusing to run "
                           "without it");
    for (const std::string& n : want)
      if (find_tensor(n) == nullptr)
        return not_found("checkpoint '" + path() + "' has no tensor '" + gguf_to_hf_tensor_name(n) +
                         "'");
    const WeightTensor* embd = find_tensor(kTokEmbdTensor);
    if (embd->n_dims != 2 || embd->ne[0] != config_.dim || embd->ne[1] != config_.n_vocab)
      return corrupt("'" + embd->file_name + "' has shape " + tensor_shape(*embd) +
                     str_format(" (row length first), but config.json says hidden_size %d and "
                                "vocab_size %d",
                                config_.dim, config_.n_vocab));
    return Status::ok();
  }

  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<float> rope_factors_;
  std::set<std::string> seen_;            // checkpoint names met in the shards
  std::unique_ptr<HfQuantFormat> quant_;  // config.json's quantization_config, if any
  std::map<std::string, std::map<std::string, QuantPiece>> held_;  // module -> param -> tensor
  std::vector<std::unique_ptr<QuantLayer>> layers_;                // converted on demand
  mutable std::mutex mu_;
  mutable std::map<uint64_t, std::vector<uint8_t>> converted_;  // layers_ index -> bytes
};

}  // namespace

Result<std::unique_ptr<TensorSource>> open_hf_checkpoint(const std::string& dir) {
  auto c = std::make_unique<HfCheckpoint>(dir);
  PAGODA_RETURN_IF_ERROR(c->open());
  return std::unique_ptr<TensorSource>(std::move(c));
}

}  // namespace pagoda
