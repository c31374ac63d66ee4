#include "model/compressed_tensors.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>

#include "backend/cpu/quant_blocks.h"
#include "core/fp8.h"
#include "model/fp8_checkpoint.h"
#include "model/hf_json.h"

namespace pagoda {
namespace {

using nlohmann::json;

// The keys of a group's "weights" that change what the file holds, as Pagoda reads them.
Status read_weights(const json& w, const std::string& format, CtScheme* s) {
  const std::string where = "compressed-tensors group '" + s->name + "' weights: ";
  const json* bits = find_key(w, "num_bits");
  const json* type = find_key(w, "type");
  const int nbits = bits != nullptr && bits->is_number_integer() ? bits->get<int>() : 8;
  const std::string ty = type != nullptr ? json_text(*type) : "int";
  if (const json* sym = find_key(w, "symmetric")) {
    if (!sym->is_boolean()) return corrupt(where + "symmetric is not a boolean");
    s->symmetric = sym->get<bool>();
  }
  const json* strategy = find_key(w, "strategy");
  s->strategy = strategy != nullptr ? json_text(*strategy) : "tensor";
  if (const json* g = find_key(w, "group_size")) {
    if (!g->is_number_integer() || g->get<int64_t>() <= 0 || g->get<int64_t>() > (1 << 24))
      return corrupt(where + "group_size is not a positive integer");
    s->group_size = g->get<int>();
  }
  if (const json* a = find_key(w, "actorder")) {
    // "static" reorders only while quantizing: the groups stay contiguous and no g_idx
    // is written. "group"/"weight" need the g_idx permutation.
    const std::string order = json_text(*a);
    if (order != "static" && order != "false")
      return unsupported(where + "actorder '" + order +
                         "' (activation-ordered groups, g_idx) is not supported");
  }
  if (const json* d = find_key(w, "dynamic"); d != nullptr && !(d->is_boolean() && !d->get<bool>()))
    return unsupported(where + "dynamic weight quantization (" + json_text(*d) +
                       ") is not supported");
  for (const char* key : {"block_structure", "scale_dtype", "zp_dtype"})
    if (const json* v = find_key(w, key))
      return unsupported(where + key + " " + json_text(*v) + " is not supported");
  const bool per_row_or_group =
      s->strategy == "channel" || s->strategy == "group" || s->strategy == "tensor";
  if (!per_row_or_group)
    return unsupported(where + "strategy '" + s->strategy +
                       "' is not supported (tensor, channel and group are)");
  if (s->strategy == "group" && (s->group_size == 0 || s->group_size % 32 != 0))
    return unsupported(where + str_format("group_size %d does not split into the 32-element "
                                          "blocks Pagoda converts to",
                                          s->group_size));
  if (s->strategy != "group") s->group_size = 0;
  if ((format == "int-quantized" || format == "naive-quantized") && ty == "int" && nbits == 8) {
    s->format = CtFormat::kInt8;
    if (!s->symmetric)
      return unsupported(where + "asymmetric int8 weights (zero points) are not supported");
  } else if (format == "pack-quantized" && ty == "int" && nbits == 4) {
    s->format = CtFormat::kPackedInt4;
    if (!s->symmetric && s->strategy == "tensor")
      return unsupported(where + "asymmetric per-tensor int4 weights are not supported");
  } else if ((format == "float-quantized" || format == "naive-quantized") && ty == "float" &&
             nbits == 8) {
    s->format = CtFormat::kFp8;
    if (!s->symmetric) return unsupported(where + "asymmetric fp8 weights are not supported");
  } else {
    return unsupported(where + str_format("format '%s' with %d-bit %s weights is not supported "
                                          "(int-quantized int8, pack-quantized int4 and "
                                          "float-quantized fp8 are)",
                                          format.c_str(), nbits, ty.c_str()));
  }
  return Status::ok();
}

// Activations are quantized Pagoda's own way; only their kind is checked.
Status check_activations(const json& g, const CtScheme& s) {
  const std::string where = "compressed-tensors group '" + s.name + "': ";
  if (find_key(g, "output_activations") != nullptr)
    return unsupported(where + "output_activations quantization is not supported");
  if (const json* a = find_key(g, "input_activations")) {
    const json* bits = find_key(*a, "num_bits");
    if (bits == nullptr || !bits->is_number_integer() || bits->get<int>() != 8)
      return unsupported(where + "input_activations of " +
                         (bits != nullptr ? json_text(*bits) : std::string("unstated")) +
                         " bits are not supported (8-bit are)");
    const json* strat = find_key(*a, "strategy");
    const std::string st = strat != nullptr ? json_text(*strat) : "tensor";
    if (st != "token" && st != "tensor")
      return unsupported(where + "input_activations strategy '" + st + "' is not supported");
  }
  return Status::ok();
}

// kv_cache_scheme: FP8 E4M3 keys and values with one static scale each a layer
// (model.layers.N.self_attn.k_scale / v_scale), as llm-compressor calibrates them; the
// checkpoint reader keeps the scales for an FP8 cache. Other KV schemes refused by name.
Status read_kv_cache_scheme(const json& kv, CtConfig* c) {
  const std::string where = "compressed-tensors kv_cache_scheme: ";
  if (!kv.is_object()) return corrupt(where + "is not an object");
  const json* bits = find_key(kv, "num_bits");
  const json* type = find_key(kv, "type");
  const json* strategy = find_key(kv, "strategy");
  const json* dynamic = find_key(kv, "dynamic");
  const json* symmetric = find_key(kv, "symmetric");
  const std::string desc = (bits != nullptr ? json_text(*bits) : "8") + "-bit " +
                           (type != nullptr ? json_text(*type) : "int") + ", strategy " +
                           (strategy != nullptr ? json_text(*strategy) : "tensor");
  const bool fp8 = (bits == nullptr || (bits->is_number_integer() && bits->get<int>() == 8)) &&
                   type != nullptr && json_text(*type) == "float" &&
                   (strategy == nullptr || json_text(*strategy) == "tensor");
  if (!fp8)
    return unsupported(where + desc +
                       " is not supported (8-bit float, one scale a tensor, is: Pagoda's FP8 "
                       "KV cache)");
  if (dynamic != nullptr && !(dynamic->is_boolean() && !dynamic->get<bool>()))
    return unsupported(where + "dynamic scales (" + json_text(*dynamic) + ") are not supported");
  if (symmetric != nullptr && !(symmetric->is_boolean() && symmetric->get<bool>()))
    return unsupported(where + "asymmetric FP8 is not supported");
  c->kv_cache_fp8 = true;
  return Status::ok();
}

Result<std::vector<std::string>> string_list(const json& j, const char* key,
                                             const std::string& where) {
  std::vector<std::string> out;
  const json* v = find_key(j, key);
  if (v == nullptr) return out;
  if (!v->is_array()) return corrupt(where + " " + key + " is not a list");
  for (const json& e : *v) {
    if (!e.is_string()) return corrupt(where + " " + key + " holds a non-string");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

struct CtPattern {
  std::regex re;
};

namespace {

// The config's targets or ignore list, each "re:" pattern compiled (an unreadable one is
// refused by name, here rather than at the first module it would be tried on).
Result<std::vector<CtTarget>> read_targets(const json& j, const char* key,
                                           const std::string& where) {
  PAGODA_ASSIGN_OR_RETURN(std::vector<std::string> texts, string_list(j, key, where));
  std::vector<CtTarget> out;
  for (std::string& t : texts) {
    CtTarget target{std::move(t), nullptr};
    if (target.text.rfind("re:", 0) == 0) {
      try {
        target.re = std::make_shared<const CtPattern>(CtPattern{std::regex(target.text.substr(3))});
      } catch (const std::regex_error&) {
        return unsupported(where + " " + key + " entry '" + target.text +
                           "' is not a pattern Pagoda can read");
      }
    }
    out.push_back(std::move(target));
  }
  return out;
}

// compressed-tensors' match_name: "re:" patterns match from the start of the name
// (Python's re.match), other strings the whole name; "Linear" also matches by class.
bool matches(const CtTarget& target, const std::string& module, bool linear) {
  if (target.re)
    return std::regex_search(module, target.re->re, std::regex_constants::match_continuous);
  if (target.text == "Linear") return linear;
  return target.text == module;
}

// A class-name target other than Linear (Embedding, an attention module...): Pagoda
// cannot tell which layers it means, so it refuses it rather than guess.
bool is_class_name(const std::string& t) {
  return t.rfind("re:", 0) != 0 && t.find('.') == std::string::npos && t != "Linear" &&
         t != "lm_head";
}

}  // namespace

Result<CtConfig> parse_compressed_tensors_config(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return corrupt("config.json quantization_config is not an object");
  const std::string where = "config.json quantization_config";
  if (const json* s = find_key(j, "quantization_status");
      s != nullptr && json_text(*s) != "compressed")
    return unsupported(where + " quantization_status '" + json_text(*s) +
                       "' is not supported (compressed checkpoints are)");
  CtConfig c;
  if (const json* kv = find_key(j, "kv_cache_scheme"); kv != nullptr && !kv->is_null())
    PAGODA_RETURN_IF_ERROR(read_kv_cache_scheme(*kv, &c));
  for (const char* key : {"sparsity_config", "transform_config"})
    if (const json* v = find_key(j, key); v != nullptr && !(v->is_object() && v->empty()))
      return unsupported(where + " " + key + " is not supported");
  const json* fmt = find_key(j, "format");
  const std::string top_format = fmt != nullptr ? json_text(*fmt) : "";
  const json* groups = find_key(j, "config_groups");
  const bool no_groups = groups == nullptr || (groups->is_object() && groups->empty());
  if (no_groups && !c.kv_cache_fp8) return corrupt(where + " has no config_groups");
  if (!no_groups && !groups->is_object()) return corrupt(where + " config_groups is not an object");
  PAGODA_ASSIGN_OR_RETURN(c.ignore, read_targets(j, "ignore", where));
  for (auto it = groups->begin(); !no_groups && it != groups->end(); ++it) {
    CtScheme s;
    s.name = it.key();
    const json& g = it.value();
    if (!g.is_object()) return corrupt(where + " group '" + s.name + "' is not an object");
    const json* gf = find_key(g, "format");
    const std::string format = gf != nullptr ? json_text(*gf) : top_format;
    const json* w = find_key(g, "weights");
    if (w == nullptr || !w->is_object())
      return unsupported(where + " group '" + s.name +
                         "' quantizes no weights (activation-only schemes are not supported)");
    PAGODA_RETURN_IF_ERROR(read_weights(*w, format, &s));
    PAGODA_RETURN_IF_ERROR(check_activations(g, s));
    PAGODA_ASSIGN_OR_RETURN(s.targets,
                            read_targets(g, "targets", where + " group '" + s.name + "'"));
    if (s.targets.empty()) return corrupt(where + " group '" + s.name + "' has no targets");
    for (const CtTarget& t : s.targets)
      if (is_class_name(t.text))
        return unsupported(where + " group '" + s.name + "' targets '" + t.text +
                           "': Pagoda places Linear, module names and re: patterns");
    c.schemes.push_back(std::move(s));
  }
  for (const CtTarget& t : c.ignore)
    if (is_class_name(t.text))
      return unsupported(where + " ignores '" + t.text +
                         "': Pagoda places Linear, module names and re: patterns");
  return c;
}

Result<const CtScheme*> CtConfig::scheme_for(const std::string& module, bool linear) const {
  for (const CtTarget& t : ignore)
    if (matches(t, module, linear)) return static_cast<const CtScheme*>(nullptr);
  const CtScheme* found = nullptr;
  for (const CtScheme& s : schemes)
    for (const CtTarget& t : s.targets) {
      if (!matches(t, module, linear)) continue;
      if (found != nullptr && found != &s)
        return unsupported("'" + module + "' is in compressed-tensors groups '" + found->name +
                           "' and '" + s.name + "'");
      found = &s;
    }
  // compressed-tensors quantizes Linear (and Embedding) modules only; a pattern that
  // also matches a norm leaves it alone.
  return linear ? found : nullptr;
}

DType ct_storage_type(const CtScheme& s, int64_t cols, int64_t group) {
  switch (s.format) {
    case CtFormat::kInt8:
      return DType::kQ8_0;
    case CtFormat::kPackedInt4:
      // The checkpoint's groups as they are where whole runs of 128 (64) columns share one.
      if (cols % 128 == 0 && group % 128 == 0) return DType::kQ4_G128;
      if (cols % 64 == 0 && group % 64 == 0) return DType::kQ4_G64;
      return s.symmetric ? DType::kQ4_0 : DType::kQ4_1;
    case CtFormat::kFp8:
      return DType::kBF16;
  }
  return DType::kBF16;
}

void ct_int8_to_q8_0(const int8_t* w, int64_t rows, int64_t cols, const CtScales& sc,
                     uint8_t* out) {
  auto* b = reinterpret_cast<cpu::BlockQ8_0*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += cpu::kQK, ++b) {
      b->d = f32_to_fp16(sc.at(r, c));
      std::memcpy(b->qs, w + r * cols + c, cpu::kQK);
    }
}

namespace {

// Nibble i of a row: byte i / 2 (words are little-endian), low half when i is even.
uint8_t ct_nibble(const uint8_t* packed, int64_t cols, int64_t r, int64_t i) {
  const uint8_t byte = packed[r * (cols / 2) + i / 2];
  return (i & 1) != 0 ? byte >> 4 : byte & 15;
}

}  // namespace

void ct_packed_int4_to_q4(DType type, const uint8_t* packed, int64_t rows, int64_t cols,
                          const CtScales& sc, const std::vector<uint8_t>* zero_points,
                          uint8_t* out) {
  // s (q - z) with q = nibble - 8 and z = zp - 8 (0 when symmetric): s (nibble - zp), zp 8
  // when symmetric.
  auto zp_at = [&](int64_t r, int64_t c) -> uint8_t {
    return zero_points != nullptr ? (*zero_points)[r * sc.n_groups + c / sc.group] : 8;
  };
  const int64_t block_cols = dtype_info(type).block_elems;
  const size_t block_bytes = row_bytes(type, block_cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += block_cols, out += block_bytes) {
      const float s = sc.at(r, c);
      const uint8_t zp = zp_at(r, c);
      const auto q4g = [&](auto* b) {
        b->d = f32_to_fp16(s);
        b->z = zp;
        b->pad = 0;
        return b->qs;
      };
      uint8_t* qs;
      if (type == DType::kQ4_G128) {
        qs = q4g(reinterpret_cast<cpu::BlockQ4G128*>(out));
      } else if (type == DType::kQ4_G64) {
        qs = q4g(reinterpret_cast<cpu::BlockQ4G64*>(out));
      } else if (type == DType::kQ4_0) {
        auto* b = reinterpret_cast<cpu::BlockQ4_0*>(out);
        b->d = f32_to_fp16(s);
        qs = b->qs;
      } else {
        auto* b = reinterpret_cast<cpu::BlockQ4_1*>(out);
        b->d = f32_to_fp16(s);
        b->m = f32_to_fp16(-s * static_cast<float>(zp));
        qs = b->qs;
      }
      for (int64_t j = 0; j < block_cols / 32; ++j)
        for (int l = 0; l < 16; ++l)
          qs[16 * j + l] =
              static_cast<uint8_t>(ct_nibble(packed, cols, r, c + 32 * j + l) |
                                   ct_nibble(packed, cols, r, c + 32 * j + l + 16) << 4);
    }
}

void ct_fp8_e4m3_to_bf16(const uint8_t* w, int64_t rows, int64_t cols, const CtScales& sc,
                         uint8_t* out) {
  auto* o = reinterpret_cast<uint16_t*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      o[r * cols + c] = f32_to_bf16(e4m3_to_f32(w[r * cols + c]) * sc.at(r, c));
}

void ct_fp8_e4m3_to_fp8(const uint8_t* w, int64_t rows, int64_t cols, const CtScales& sc,
                        uint8_t* out) {
  pack_fp8_blocks(
      w, rows, cols, [&](int64_t r, int64_t c) { return sc.at(r, c); },
      reinterpret_cast<cpu::BlockFP8*>(out));
}

}  // namespace pagoda

namespace pagoda {
namespace {

// The scale's expected shape for the layer: one, one per row, or one per row and group.
Status check_scale(const CtLayer& l, int64_t n_groups) {
  const SafetensorsTensor& t = *l.scale.tensor;
  const std::string what = quant_piece_name(l.module, "weight_scale");
  if (!t.type || (*t.type != DType::kF32 && *t.type != DType::kF16 && *t.type != DType::kBF16))
    return unsupported(what + " has dtype " + t.dtype + " (F32, F16 and BF16 scales load)");
  const int64_t want = l.scheme->strategy == "tensor" ? 1 : l.rows * n_groups;
  const bool rows_first = t.shape.empty() || t.shape[0] == l.rows || want == 1;
  if (t.n_elements() != want || !rows_first)
    return corrupt(what + str_format(" holds %lld values; a %s-quantized [%lld, %lld] weight "
                                     "has %lld",
                                     static_cast<long long>(t.n_elements()),
                                     l.scheme->strategy.c_str(), static_cast<long long>(l.rows),
                                     static_cast<long long>(l.cols), static_cast<long long>(want)));
  return Status::ok();
}

int64_t group_of(const CtLayer& l) {
  return l.scheme->strategy == "group" ? l.scheme->group_size : l.cols;
}

CtScales layer_scales(const CtLayer& l) {
  CtScales sc;
  sc.group = group_of(l);
  sc.n_groups = (l.cols + sc.group - 1) / sc.group;
  sc.s.resize(static_cast<size_t>(l.rows * sc.n_groups));
  const bool one = l.scheme->strategy == "tensor";
  for (int64_t i = 0; i < l.rows * sc.n_groups; ++i) sc.s[i] = quant_float_at(l.scale, one ? 0 : i);
  return sc;
}

}  // namespace

Result<std::unique_ptr<CtLayer>> make_ct_layer(const std::string& module, const CtScheme& scheme,
                                               const std::map<std::string, QuantPiece>& params) {
  auto layer = std::make_unique<CtLayer>();
  CtLayer& l = *layer;
  l.module = module;
  l.scheme = &scheme;
  const bool packed = scheme.format == CtFormat::kPackedInt4;
  const char* weight_param = packed ? "weight_packed" : "weight";
  std::optional<QuantPiece> shape;
  for (const auto& [param, piece] : params) {
    l.all.push_back(piece);
    if (param == weight_param) {
      l.weight = piece;
    } else if (param == "weight_scale") {
      l.scale = piece;
    } else if (param == "weight_zero_point" && packed && !scheme.symmetric) {
      l.zero_point = piece;
    } else if (param == "weight_shape" && packed) {
      shape = piece;
    } else if (param == "input_scale") {
      // A static activation scale: Pagoda quantizes activations its own way.
    } else {
      return unsupported("tensor " + quant_piece_name(module, param.c_str()) +
                         " has no place in compressed-tensors group '" + scheme.name +
                         "' as Pagoda loads it" +
                         (param == "weight_g_idx" ? " (activation-ordered groups)" : ""));
    }
  }
  for (const auto& [have, name] :
       {std::pair{l.weight.tensor != nullptr, weight_param},
        std::pair{l.scale.tensor != nullptr, "weight_scale"},
        std::pair{!packed || shape.has_value(), "weight_shape"},
        std::pair{!packed || scheme.symmetric || l.zero_point.has_value(), "weight_zero_point"}})
    if (!have)
      return not_found("checkpoint has no " + quant_piece_name(module, name) +
                       " (compressed-tensors " + "group '" + scheme.name + "')");
  const SafetensorsTensor& w = *l.weight.tensor;
  const std::string what = quant_piece_name(module, weight_param);
  const char* want_dtype = scheme.format == CtFormat::kInt8 ? "I8" : packed ? "I32" : "F8_E4M3";
  if (w.dtype != want_dtype || w.shape.size() != 2)
    return unsupported(what + " is " + w.dtype +
                       str_format(" with %zu dimensions", w.shape.size()) + "; group '" +
                       scheme.name + "' stores 2-D " + want_dtype);
  l.rows = w.shape[0];
  l.cols = w.shape[1];
  if (packed) {
    const SafetensorsTensor& st = *shape->tensor;
    if (!st.type || (*st.type != DType::kI64 && *st.type != DType::kI32) || st.n_elements() != 2)
      return corrupt(quant_piece_name(module, "weight_shape") + " is not two integers");
    const int64_t rows = quant_int_at(*shape, 0), cols = quant_int_at(*shape, 1);
    if (rows != l.rows || cols <= 0 || cols > (int64_t{1} << 30) || (cols + 7) / 8 != l.cols)
      return corrupt(what + str_format(" is [%lld, %lld] int32 words, which cannot hold "
                                       "weight_shape [%lld, %lld]",
                                       static_cast<long long>(l.rows),
                                       static_cast<long long>(l.cols), static_cast<long long>(rows),
                                       static_cast<long long>(cols)));
    l.cols = cols;
  }
  l.type = ct_storage_type(scheme, l.cols, group_of(l));
  if (scheme.format == CtFormat::kFp8) {
    PAGODA_RETURN_IF_ERROR(check_e4m3_finite(what, l.weight.data(), l.rows * l.cols));
    // The checkpoint's bytes and scales where every 32-column run lies under one scale;
    // otherwise the products rounded to BF16 as before.
    if (fp8_keeps_blocks(l.cols, group_of(l))) l.type = DType::kFP8;
  }
  if (l.type != DType::kBF16 && l.cols % 32 != 0)
    return unsupported(what + str_format(" rows of %lld weights are not whole 32-element blocks",
                                         static_cast<long long>(l.cols)));
  const int64_t n_groups = (l.cols + group_of(l) - 1) / group_of(l);
  PAGODA_RETURN_IF_ERROR(check_scale(l, n_groups));
  if (l.zero_point) {
    const SafetensorsTensor& z = *l.zero_point->tensor;
    const std::vector<int64_t> want = {(l.rows + 7) / 8, n_groups};
    if (z.dtype != "I32" || z.n_elements() != want[0] * want[1])
      return corrupt(quant_piece_name(module, "weight_zero_point") +
                     str_format(" is not [%lld, %lld] int32 (packed zero points)",
                                static_cast<long long>(want[0]), static_cast<long long>(want[1])));
  }
  return layer;
}

std::vector<uint8_t> CtLayer::convert() const {
  const CtLayer& l = *this;
  std::vector<uint8_t> out(row_bytes(l.type, l.cols) * static_cast<size_t>(l.rows));
  const CtScales sc = layer_scales(l);
  const uint8_t* w = l.weight.file->tensor_data(*l.weight.tensor);
  switch (l.scheme->format) {
    case CtFormat::kInt8:
      ct_int8_to_q8_0(reinterpret_cast<const int8_t*>(w), l.rows, l.cols, sc, out.data());
      break;
    case CtFormat::kPackedInt4: {
      if (!l.zero_point) {
        ct_packed_int4_to_q4(l.type, w, l.rows, l.cols, sc, nullptr, out.data());
        break;
      }
      // Eight rows' zero points to a word, row r in bits 4 (r % 8).
      std::vector<uint8_t> zp(static_cast<size_t>(l.rows * sc.n_groups));
      for (int64_t r = 0; r < l.rows; ++r)
        for (int64_t g = 0; g < sc.n_groups; ++g) {
          const int64_t word = quant_int_at(*l.zero_point, (r / 8) * sc.n_groups + g);
          zp[r * sc.n_groups + g] = static_cast<uint8_t>((word >> (4 * (r % 8))) & 15);
        }
      ct_packed_int4_to_q4(l.type, w, l.rows, l.cols, sc, &zp, out.data());
      break;
    }
    case CtFormat::kFp8:
      if (l.type == DType::kFP8)
        ct_fp8_e4m3_to_fp8(w, l.rows, l.cols, sc, out.data());
      else
        ct_fp8_e4m3_to_bf16(w, l.rows, l.cols, sc, out.data());
      break;
  }
  return out;
}

namespace {

class CompressedTensorsFormat : public HfQuantFormat {
 public:
  explicit CompressedTensorsFormat(CtConfig c) : config_(std::move(c)) {}
  std::string_view method() const override { return "compressed-tensors"; }
  bool kv_cache_scales() const override { return config_.kv_cache_fp8; }

  // A layer's weight when a scheme targets the module; its companions (scales, zero
  // points, shapes, input scales) always, so that make_layer names a stray one.
  Result<bool> holds(const std::string& module, const std::string& param, bool known,
                     bool linear) const override {
    const bool companion = param.rfind("weight_", 0) == 0 || param.rfind("input_", 0) == 0 ||
                           param.rfind("output_", 0) == 0;
    if (companion) return true;
    if (param != "weight" || !known) return false;
    PAGODA_ASSIGN_OR_RETURN(const CtScheme* scheme, config_.scheme_for(module, linear));
    return scheme != nullptr;
  }

  Result<std::unique_ptr<QuantLayer>> make_layer(const std::string& module,
                                                 const std::map<std::string, QuantPiece>& params,
                                                 bool linear) const override {
    PAGODA_ASSIGN_OR_RETURN(const CtScheme* scheme, config_.scheme_for(module, linear));
    if (scheme == nullptr)
      return unsupported("'" + module +
                         "' has quantized tensors, but config.json's quantization_config leaves "
                         "it unquantized (ignore list or no target)");
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<CtLayer> l, make_ct_layer(module, *scheme, params));
    return std::unique_ptr<QuantLayer>(std::move(l));
  }

 private:
  CtConfig config_;
};

}  // namespace

Result<std::unique_ptr<HfQuantFormat>> open_compressed_tensors_format(std::string_view json_text) {
  PAGODA_ASSIGN_OR_RETURN(CtConfig c, parse_compressed_tensors_config(json_text));
  return std::unique_ptr<HfQuantFormat>(std::make_unique<CompressedTensorsFormat>(std::move(c)));
}

}  // namespace pagoda
