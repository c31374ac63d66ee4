#include "model/hf_quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "backend/cpu/quant_blocks.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "model/bnb_double_quant.h"
#include "model/hf_folder.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

bool ends_with(const std::string& s, std::string_view t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The decoder's linear layers, the ones the schemes quantize (vLLM's and transformers'
// "Linear" targets less lm_head, which stays 16-bit as llm-compressor leaves it).
bool is_decoder_linear(const SafetensorsTensor& t) {
  return t.shape.size() == 2 && t.name.rfind("model.layers.", 0) == 0 &&
         ends_with(t.name, "_proj.weight") &&
         (t.name.find(".self_attn.") != std::string::npos ||
          t.name.find(".mlp.") != std::string::npos);
}

// Row r of a 2-D F32/F16/BF16 tensor as floats.
void load_row(const SafetensorsTensor& t, const uint8_t* data, int64_t r, int64_t cols,
              float* out) {
  const DType type = *t.type;
  const uint8_t* p = data + static_cast<size_t>(r * cols) * (type == DType::kF32 ? 4 : 2);
  for (int64_t c = 0; c < cols; ++c) {
    if (type == DType::kF32) {
      std::memcpy(&out[c], p + 4 * c, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * c, 2);
      out[c] = type == DType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
    }
  }
}

enum class Scheme { kFp8, kInt8, kGptq, kNf4, kAwq };

// One scale per output channel, amax / (448 or 127) in f32 (1 for an all-zero row, as
// nothing then depends on it); each weight E4M3(w / scale), or round(w / scale) clamped
// to int8 (ties to even, as torch.round). `smooth` (may be null) multiplies column j
// first.
void quantize_rows(const SafetensorsTensor& t, const uint8_t* data, const float* smooth,
                   Scheme scheme, ThreadPool& pool, std::vector<uint8_t>* q,
                   std::vector<float>* scales) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const float qmax = scheme == Scheme::kFp8 ? kE4M3Max : 127.0f;
  q->resize(static_cast<size_t>(rows * cols));
  scales->resize(static_cast<size_t>(rows));
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      load_row(t, data, r, cols, row.data());
      if (smooth)
        for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] *= smooth[c];
      float amax = 0.0f;
      for (float v : row) amax = std::max(amax, std::fabs(v));
      const float s = amax > 0.0f ? amax / qmax : 1.0f;
      (*scales)[static_cast<size_t>(r)] = s;
      uint8_t* out = q->data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = row[static_cast<size_t>(c)] / s;
        out[c] = scheme == Scheme::kFp8 ? f32_to_e4m3(v)
                                        : static_cast<uint8_t>(static_cast<int8_t>(
                                              std::clamp(std::nearbyint(v), -128.0f, 127.0f)));
      }
    }
  });
}

// compressed-tensors' description of the scheme: weights per channel, activations per
// token at run time (the keys its QuantizationArgs serialises).
ojson quantization_config(Scheme scheme) {
  const char* type = scheme == Scheme::kFp8 ? "float" : "int";
  const char* format = scheme == Scheme::kFp8 ? "float-quantized" : "int-quantized";
  auto args = [&](const char* strategy, bool dynamic, const char* observer) {
    ojson a;
    a["num_bits"] = 8;
    a["type"] = type;
    a["symmetric"] = true;
    a["group_size"] = nullptr;
    a["strategy"] = strategy;
    a["block_structure"] = nullptr;
    a["dynamic"] = dynamic;
    a["actorder"] = nullptr;
    a["observer"] = observer ? ojson(observer) : ojson(nullptr);
    a["observer_kwargs"] = ojson::object();
    return a;
  };
  ojson group;
  group["targets"] = {"Linear"};
  group["weights"] = args("channel", false, "minmax");
  group["input_activations"] = args("token", true, nullptr);
  group["output_activations"] = nullptr;
  group["format"] = format;
  ojson qc;
  qc["quant_method"] = "compressed-tensors";
  qc["format"] = format;
  qc["quantization_status"] = "compressed";
  qc["config_groups"] = {{"group_0", group}};
  qc["ignore"] = {"lm_head"};
  qc["kv_cache_scheme"] = nullptr;
  qc["global_compression_ratio"] = nullptr;
  return qc;
}

// GPTQ's quantization_config as GPTQModel writes it (the keys transformers' GPTQConfig and
// vLLM's GPTQConfig read; v1 "gptq" checkpoint format, int32 words).
ojson gptq_config(const GptqOptions& o) {
  ojson qc;
  qc["quant_method"] = "gptq";
  qc["bits"] = o.bits;
  qc["group_size"] = o.group_size;
  qc["desc_act"] = o.act_order;
  qc["sym"] = o.sym;
  qc["lm_head"] = false;
  qc["damp_percent"] = o.damp;
  qc["static_groups"] = o.static_groups;
  qc["true_sequential"] = false;
  qc["checkpoint_format"] = "gptq";
  qc["pack_dtype"] = "int32";
  qc["meta"] = {{"quantizer", {"pagoda"}}};
  return qc;
}

// AWQ's quantization_config as AutoAWQ writes it (the keys transformers' AwqConfig and
// vLLM's AWQConfig read).
ojson awq_config(int64_t group) {
  ojson qc;
  qc["quant_method"] = "awq";
  qc["zero_point"] = true;
  qc["group_size"] = group;
  qc["bits"] = 4;
  qc["version"] = "gemm";
  qc["modules_to_not_convert"] = nullptr;
  return qc;
}

// The input a decoder linear layer reads, and so its Hessian.
ActivationObserver::Input linear_input(const std::string& name) {
  using In = ActivationObserver::Input;
  if (name.find(".o_proj.") != std::string::npos) return In::kWo;
  if (name.find(".down_proj.") != std::string::npos) return In::kDown;
  if (name.find(".gate_proj.") != std::string::npos || name.find(".up_proj.") != std::string::npos)
    return In::kGateUp;
  return In::kQkv;
}

int layer_of(const std::string& name) {  // "model.layers.N...."
  return std::atoi(name.c_str() + std::strlen("model.layers."));
}

// One weight through GPTQ.
Result<GptqTensors> gptq_weight(const SafetensorsTensor& t, const uint8_t* data,
                                const HessianCollector& hc, const GptqOptions& o,
                                ThreadPool& pool) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int layer = layer_of(t.name);
  const ActivationObserver::Input in = linear_input(t.name);
  if (layer < 0 || layer >= hc.n_layers() || hc.cols(layer, in) != cols)
    return internal_error("the calibration run saw no input of '" + t.name + "'");
  std::vector<float> w(static_cast<size_t>(rows * cols));
  pool.parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) load_row(t, data, r, cols, w.data() + r * cols);
  });
  auto q = gptq_quantize(w, rows, cols, hc.sum_xxt(layer, in), o, pool);
  if (!q) return q.status().with_context("'" + t.name + "'");
  return q;
}

// bitsandbytes' 4-bit NF4 as transformers' BitsAndBytesConfig saves it: blocks of 64
// weights of the flattened matrix, absmax per block in f32, each weight the nearest of
// NF4's 16 code values times absmax, two codes a byte with the first in the high nibble;
// with double quantization the absmax values in turn as bytes (model/bnb_double_quant.h).
constexpr int64_t kNf4Block = 64;

struct Nf4Tensors {
  std::vector<uint8_t> packed;  // n / 2 bytes
  std::vector<float> absmax;    // one per started block
  BnbNestedAbsmax nested;       // double quantization: absmax as codes (else empty)
};

// Block b of the flattened weights w (n of them) into q's absmax and codes; a block
// holding an infinite or NaN weight gets a NaN absmax (which nf4_weight refuses).
void nf4_block(const float* w, int64_t b, int64_t n, Nf4Tensors* q) {
  const int64_t e0 = b * kNf4Block, e1 = std::min(n, e0 + kNf4Block);
  float amax = 0;
  bool finite = true;
  for (int64_t e = e0; e < e1; ++e) {
    amax = std::fmax(amax, std::fabs(w[e]));  // (fmax passes NaN over)
    finite = finite && std::isfinite(w[e]);
  }
  q->absmax[b] = finite ? amax : std::nanf("");
  if (!finite) return;
  const float inv = amax > 0 ? 1.0f / amax : 0.0f;
  for (int64_t e = e0; e < e1; ++e) {
    const float x = w[e] * inv;
    int best = 0;
    for (int c = 1; c < 16; ++c)
      if (std::fabs(x - cpu::kNf4Code[c]) < std::fabs(x - cpu::kNf4Code[best])) best = c;
    q->packed[e / 2] |= static_cast<uint8_t>((e & 1) != 0 ? best : best << 4);
  }
}

Result<Nf4Tensors> nf4_weight(const SafetensorsTensor& t, const uint8_t* data, bool double_quant,
                              ThreadPool& pool) {
  const int64_t rows = t.shape[0], cols = t.shape[1], n = rows * cols;
  std::vector<float> w(static_cast<size_t>(n));
  pool.parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) load_row(t, data, r, cols, w.data() + r * cols);
  });
  Nf4Tensors q;
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  q.absmax.resize(static_cast<size_t>(blocks));
  q.packed.assign(static_cast<size_t>(n / 2), 0);
  // Blocks start at even elements, so no byte of `packed` is shared between two of them.
  pool.parallel_for(blocks, 256, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) nf4_block(w.data(), b, n, &q);
  });
  for (size_t b = 0; b < q.absmax.size(); ++b)
    if (!std::isfinite(q.absmax[b]))
      return invalid_argument("'" + t.name +
                              "' holds an infinite or NaN weight (NF4 has no code for it)");
  if (double_quant) q.nested = bnb_double_quantize(q.absmax, pool);
  return q;
}

// The quant_state JSON bitsandbytes keeps beside each weight (stored as uint8 bytes).
// With double quantization its last field, nested_offset, is known only once the weight
// is quantized: this text then stops after `"nested_offset":` and nf4_state_end completes
// it in a fixed width, so that the tensor's size is known before.
std::string nf4_quant_state(const SafetensorsTensor& t, bool double_quant) {
  ojson qs;
  qs["quant_type"] = "nf4";
  qs["blocksize"] = kNf4Block;
  qs["dtype"] = t.dtype == "F32" ? "float32" : t.dtype == "F16" ? "float16" : "bfloat16";
  qs["shape"] = t.shape;
  if (!double_quant) return qs.dump();
  qs["nested_blocksize"] = kBnbNestedBlock;
  qs["nested_dtype"] = "float32";  // the absmax values' dtype (bitsandbytes keeps them f32)
  std::string text = qs.dump();
  text.pop_back();  // the closing brace
  return text + ",\"nested_offset\":";
}

// The offset as 17 significant digits (the double it widens to, exactly) and the closing
// brace: 23 characters for any finite offset >= 0, which a mean of absmax values is.
constexpr size_t kNf4StateEnd = 23;

std::string nf4_state_end(float offset) {
  return str_format("%.16e}", static_cast<double>(offset));
}

ojson nf4_config(const std::string& compute_dtype, bool double_quant) {
  ojson qc;
  qc["quant_method"] = "bitsandbytes";
  qc["load_in_4bit"] = true;
  qc["load_in_8bit"] = false;
  qc["_load_in_4bit"] = true;
  qc["_load_in_8bit"] = false;
  qc["bnb_4bit_quant_type"] = "nf4";
  qc["bnb_4bit_use_double_quant"] = double_quant;
  qc["bnb_4bit_compute_dtype"] = compute_dtype;
  qc["bnb_4bit_quant_storage"] = "uint8";
  qc["llm_int8_skip_modules"] = {"lm_head"};
  qc["llm_int8_threshold"] = 6.0;
  qc["llm_int8_has_fp16_weight"] = false;
  qc["llm_int8_enable_fp32_cpu_offload"] = false;
  return qc;
}

template <typename T>
void put(const std::vector<T>& v, std::vector<uint8_t>* bytes) {
  bytes->resize(v.size() * sizeof(T));
  std::memcpy(bytes->data(), v.data(), bytes->size());
}

// What the writer emits for one output tensor.
struct Job {
  const SafetensorsFile* shard;
  const SafetensorsTensor* src;
  enum Kind {
    kCopy,
    kWeight,
    kScale,
    kNorm,
    kQWeight,
    kQZeros,
    kGScales,
    kGIdx,
    kKvScale,
    kNf4Weight,
    kNf4Absmax,
    kNf4Map,
    kNf4NestedAbsmax,
    kNf4NestedMap,
    kNf4State,
    kAwqQWeight,
    kAwqQZeros,
    kAwqScales,
    kAwqDivided
  } kind;
  const std::vector<float>* smooth = nullptr;  // kWeight: column factors; kNorm: divisors
  float value = 0;                             // kKvScale (which has no source tensor)
  std::string text{};                          // kNf4State: the quant_state JSON (its start)
};

// compressed-tensors' FP8 KV-cache scheme: one static scale per layer for K and for V.
ojson kv_cache_scheme() {
  ojson kv;
  kv["num_bits"] = 8;
  kv["type"] = "float";
  kv["symmetric"] = true;
  kv["group_size"] = nullptr;
  kv["strategy"] = "tensor";
  kv["block_structure"] = nullptr;
  kv["dynamic"] = false;
  kv["actorder"] = nullptr;
  kv["observer"] = "minmax";
  kv["observer_kwargs"] = ojson::object();
  return kv;
}

Status check_out_dir(const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      return invalid_argument("'" + out.string() + "' is not a folder");
    if (!fs::is_empty(out, ec))
      return invalid_argument("output folder '" + out.string() + "' is not empty");
  } else if (!fs::create_directories(out, ec)) {
    return io_error("cannot create '" + out.string() + "': " + ec.message());
  }
  return Status::ok();
}

// The input's config.json, refused when it is quantized already.
Result<ojson> read_config(const fs::path& in) {
  PAGODA_ASSIGN_OR_RETURN(const std::string text, read_json_file(in / "config.json"));
  ojson config = ojson::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return corrupt("'" + (in / "config.json").string() + "' is not a JSON object");
  if (config.contains("quantization_config"))
    return invalid_argument("'" + in.string() +
                            "' is already quantized (config.json has quantization_config); "
                            "quantize from a 16-bit checkpoint");
  return config;
}

Status write_config(ojson config, const fs::path& out, const ojson& qc) {
  config["quantization_config"] = qc;
  std::ofstream f(out / "config.json");
  f << config.dump(2) << "\n";
  if (!f) return io_error("writing '" + (out / "config.json").string() + "' failed");
  return Status::ok();
}

// The folder's other files (tokenizer, generation config, chat template, ...).
Status copy_side_files(const fs::path& in, const fs::path& out, const HfShards& shards) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(in, ec)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (name == "config.json" || name == shards.index_path.filename().string() ||
        ends_with(name, ".safetensors"))
      continue;
    if (!fs::copy_file(e.path(), out / name, fs::copy_options::overwrite_existing, ec))
      return io_error("copying '" + e.path().string() + "': " + ec.message());
  }
  if (ec) return io_error("listing '" + in.string() + "': " + ec.message());
  return Status::ok();
}

// A norm weight divided by the smoothing factors, in its own dtype.
void smoothed_norm(const SafetensorsTensor& t, const uint8_t* data, const std::vector<float>& s,
                   std::vector<uint8_t>* bytes) {
  const int64_t n = t.shape[0];
  std::vector<float> v(static_cast<size_t>(n));
  load_row(t, data, 0, n, v.data());
  const DType type = *t.type;
  bytes->resize(static_cast<size_t>(n) * (type == DType::kF32 ? 4 : 2));
  for (int64_t j = 0; j < n; ++j) {
    const float x = v[static_cast<size_t>(j)] / s[static_cast<size_t>(j)];
    if (type == DType::kF32) {
      std::memcpy(bytes->data() + 4 * j, &x, 4);
    } else {
      const uint16_t h = type == DType::kF16 ? f32_to_fp16(x) : f32_to_bf16(x);
      std::memcpy(bytes->data() + 2 * j, &h, 2);
    }
  }
}

struct Source {
  const SafetensorsFile* shard;
  const SafetensorsTensor* t;
};

bool is_float(const SafetensorsTensor& t) {
  return t.type && (*t.type == DType::kF32 || *t.type == DType::kF16 || *t.type == DType::kBF16);
}

// SmoothQuant's factors per layer for the products after each norm: s_j = max|X_j|^alpha /
// max|W_j|^(1 - alpha), W_j column j of every weight of the group (1 where either max is
// 0: nothing to migrate), kept within [1e-5, 1e5]. `out` maps each weight and norm name to
// its group's factors.
Status compute_smoothing(const std::map<std::string, Source>& by_name,
                         const ChannelMaxCollector& act, float alpha, ThreadPool& pool,
                         std::map<std::string, std::vector<float>>* out) {
  struct Group {
    std::vector<const char*> weights;
    const char* norm;
    ActivationObserver::Input input;
  };
  const Group groups[] = {
      {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
       "input_layernorm",
       ActivationObserver::Input::kQkv},
      {{"mlp.gate_proj", "mlp.up_proj"},
       "post_attention_layernorm",
       ActivationObserver::Input::kGateUp},
  };
  for (int l = 0; l < act.n_layers(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const Group& g : groups) {
      const std::vector<float>& amax = act.max_abs(l, g.input);
      const auto norm = by_name.find(p + g.norm + ".weight");
      if (norm == by_name.end() || !is_float(*norm->second.t) || norm->second.t->shape.size() != 1)
        return unsupported("smoothquant needs a 16- or 32-bit '" + p + g.norm + ".weight'");
      const int64_t cols = norm->second.t->shape[0];
      if (static_cast<int64_t>(amax.size()) != cols)
        return internal_error("the calibration run saw no input of layer " + std::to_string(l));
      std::vector<float> wmax(static_cast<size_t>(cols), 0.0f);
      std::mutex mu;
      for (const char* w : g.weights) {
        const auto it = by_name.find(p + w + ".weight");
        if (it == by_name.end() || it->second.t->shape.size() != 2 ||
            it->second.t->shape[1] != cols)
          return unsupported("smoothquant needs '" + p + w + ".weight' of " + std::to_string(cols) +
                             " columns");
        const SafetensorsTensor& t = *it->second.t;
        const uint8_t* data = it->second.shard->tensor_data(t);
        pool.parallel_for(t.shape[0], 64, [&](int64_t r0, int64_t r1) {
          std::vector<float> row(static_cast<size_t>(cols)), m(static_cast<size_t>(cols), 0.0f);
          for (int64_t r = r0; r < r1; ++r) {
            load_row(t, data, r, cols, row.data());
            for (int64_t c = 0; c < cols; ++c)
              m[static_cast<size_t>(c)] =
                  std::max(m[static_cast<size_t>(c)], std::fabs(row[static_cast<size_t>(c)]));
          }
          std::lock_guard<std::mutex> lock(mu);
          for (int64_t c = 0; c < cols; ++c)
            wmax[static_cast<size_t>(c)] = std::max(wmax[static_cast<size_t>(c)], m[c]);
        });
      }
      std::vector<float> s(static_cast<size_t>(cols));
      for (size_t c = 0; c < s.size(); ++c) {
        const double a = amax[c], w = wmax[c];
        const double f = a > 0 && w > 0 ? std::pow(a, alpha) / std::pow(w, 1.0 - alpha) : 1.0;
        s[c] = static_cast<float>(std::clamp(f, 1e-5, 1e5));
      }
      for (const char* w : g.weights) (*out)[p + w + ".weight"] = s;
      (*out)[p + g.norm + ".weight"] = std::move(s);
    }
  }
  return Status::ok();
}

// Everything the output folder holds, into `out` (empty).
Status write_folder(const fs::path& in, const fs::path& out, const ojson& config, Scheme scheme,
                    const HfQuantizeOptions& o, const HfShards& shards,
                    const std::vector<SafetensorsSpec>& specs, const std::vector<Job>& jobs,
                    AwqFolderQuantizer* awq, ThreadPool& pool,
                    const std::function<void(size_t, size_t, const std::string&)>& progress,
                    HfQuantizeReport* rep) {
  ojson qc = scheme == Scheme::kGptq ? gptq_config(o.gptq)
             : scheme == Scheme::kNf4
                 ? nf4_config(config.value("torch_dtype", "bfloat16"), o.nf4_double_quant)
             : scheme == Scheme::kAwq ? awq_config(o.awq_group_size)
                                      : quantization_config(scheme);
  if (o.kv_amax != nullptr) qc["kv_cache_scheme"] = kv_cache_scheme();
  PAGODA_RETURN_IF_ERROR(write_config(config, out, qc));
  PAGODA_RETURN_IF_ERROR(copy_side_files(in, out, shards));
  std::vector<float> scales;  // the last weight's, written right after it
  GptqTensors gq;             // likewise
  Nf4Tensors nf;              // likewise
  AwqTensors aq;              // likewise
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  return write_safetensors(
      (out / "model.safetensors").string(), specs, meta,
      [&](size_t i, std::vector<uint8_t>* bytes) -> Status {
        const Job& j = jobs[i];
        const uint8_t* data = j.src != nullptr ? j.shard->tensor_data(*j.src) : nullptr;
        switch (j.kind) {
          case Job::kCopy:
            bytes->assign(data, data + (j.src->end - j.src->begin));
            break;
          case Job::kWeight:
            quantize_rows(*j.src, data, j.smooth ? j.smooth->data() : nullptr, scheme, pool, bytes,
                          &scales);
            break;
          case Job::kScale:
            bytes->resize(scales.size() * 4);
            std::memcpy(bytes->data(), scales.data(), bytes->size());
            break;
          case Job::kNorm:
            smoothed_norm(*j.src, data, *j.smooth, bytes);
            break;
          case Job::kQWeight: {
            PAGODA_ASSIGN_OR_RETURN(gq, gptq_weight(*j.src, data, *o.hessian, o.gptq, pool));
            put(gq.qweight, bytes);
            break;
          }
          case Job::kQZeros:
            put(gq.qzeros, bytes);
            break;
          case Job::kGScales:
            put(gq.scales, bytes);
            break;
          case Job::kGIdx:
            put(gq.g_idx, bytes);
            break;
          case Job::kNf4Weight: {
            PAGODA_ASSIGN_OR_RETURN(nf, nf4_weight(*j.src, data, o.nf4_double_quant, pool));
            put(nf.packed, bytes);
            break;
          }
          case Job::kNf4Absmax:
            if (o.nf4_double_quant)
              put(nf.nested.codes, bytes);
            else
              put(nf.absmax, bytes);
            break;
          case Job::kNf4Map:
            bytes->resize(sizeof cpu::kNf4Code);
            std::memcpy(bytes->data(), cpu::kNf4Code, bytes->size());
            break;
          case Job::kNf4NestedAbsmax:
            put(nf.nested.absmax, bytes);
            break;
          case Job::kNf4NestedMap: {
            const std::array<float, 256>& map = bnb_dynamic_map();
            put(std::vector<float>(map.begin(), map.end()), bytes);
            break;
          }
          case Job::kNf4State: {
            bytes->assign(j.text.begin(), j.text.end());
            if (o.nf4_double_quant) {
              const std::string end = nf4_state_end(nf.nested.offset);
              if (end.size() != kNf4StateEnd)
                return internal_error("nested_offset '" + end + "' of '" + j.src->name +
                                      "' is not the width its quant_state was sized for");
              bytes->insert(bytes->end(), end.begin(), end.end());
            }
            break;
          }
          case Job::kAwqQWeight: {
            PAGODA_ASSIGN_OR_RETURN(aq, awq->take_linear(j.src->name));
            put(aq.qweight, bytes);
            break;
          }
          case Job::kAwqQZeros:
            put(aq.qzeros, bytes);
            break;
          case Job::kAwqScales:
            put(aq.scales, bytes);
            break;
          case Job::kAwqDivided: {
            PAGODA_ASSIGN_OR_RETURN(const std::vector<float> d, awq->take_divisors(j.src->name));
            if (d.empty())
              bytes->assign(data, data + (j.src->end - j.src->begin));
            else
              smoothed_norm(*j.src, data, d, bytes);
            break;
          }
          case Job::kKvScale:
            bytes->resize(4);
            std::memcpy(bytes->data(), &j.value, 4);
            break;
        }
        if (j.src != nullptr && j.kind != Job::kWeight && j.kind != Job::kQWeight &&
            j.kind != Job::kNf4Weight && j.kind != Job::kAwqQWeight && j.kind != Job::kAwqQZeros)
          j.shard->release(*j.src);
        rep->bytes_out += bytes->size();
        if (progress) progress(i + 1, jobs.size(), specs[i].name);
        return Status::ok();
      });
}

}  // namespace

const std::vector<std::string>& hf_quant_schemes() {
  static const std::vector<std::string> s = {"fp8", "smoothquant", "gptq", "awq", "nf4"};
  return s;
}

bool hf_scheme_calibrates(const std::string& scheme) {
  return scheme == "smoothquant" || scheme == "gptq" || scheme == "awq";
}

namespace {

// The decoder linears' names and shapes across the shards.
Result<std::vector<std::pair<std::string, std::vector<int64_t>>>> decoder_linears(
    const std::vector<std::unique_ptr<SafetensorsFile>>& files) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& f : files)
    for (const SafetensorsTensor& t : f->tensors())
      if (is_decoder_linear(t)) out.emplace_back(t.name, t.shape);
  return out;
}

Result<std::vector<std::unique_ptr<SafetensorsFile>>> open_shards(const fs::path& in,
                                                                  const HfShards& shards) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (const std::string& name : shards.names) {
    PAGODA_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open((in / name).string()));
    files.push_back(std::move(f));
  }
  return files;
}

Status check_awq(const std::vector<std::unique_ptr<SafetensorsFile>>& files, int64_t group) {
  if (group <= 0 || group % 32 != 0)
    return invalid_argument(str_format(
        "awq group size %lld: a positive multiple of 32 (whole 32-weight blocks, which Pagoda "
        "loads exactly)",
        static_cast<long long>(group)));
  PAGODA_ASSIGN_OR_RETURN(const auto linears, decoder_linears(files));
  return awq_check_shapes(linears, group);
}

// A line on what the AWQ searches chose.
std::string awq_note(const std::vector<AwqLayerReport>& reports) {
  std::map<std::string, std::pair<double, int>> alpha;
  double err = 0, rtn = 0;
  for (const AwqLayerReport& r : reports)
    for (size_t i = 0; i < r.groups.size(); ++i) {
      alpha[r.groups[i]].first += r.alpha[i];
      ++alpha[r.groups[i]].second;
      err += r.error[i] / std::max(r.error_rtn[i], 1e-30);
      rtn += 1;
    }
  std::string s = "awq: mean alpha";
  for (const char* g : {"qkv", "o", "gate_up", "down"})
    if (const auto it = alpha.find(g); it != alpha.end())
      s += str_format(" %s %.2f", g, it->second.first / it->second.second);
  if (rtn > 0)
    s += str_format(
        "; scaled output error %.2fx round-to-nearest's (mean over products, "
        "before clipping)",
        err / rtn);
  return s;
}

}  // namespace

Status hf_quantize_check(const std::string& in_dir, const HfQuantizeOptions& o) {
  PAGODA_RETURN_IF_ERROR(read_config(in_dir).status());
  if (o.scheme != "awq") return Status::ok();
  PAGODA_ASSIGN_OR_RETURN(const HfShards shards, list_hf_shards(in_dir));
  PAGODA_ASSIGN_OR_RETURN(const auto files, open_shards(in_dir, shards));
  return check_awq(files, o.awq_group_size);
}

Result<HfQuantizeReport> quantize_hf_folder(
    const std::string& in_dir, const std::string& out_dir, const HfQuantizeOptions& o,
    ThreadPool& pool, const std::function<void(size_t, size_t, const std::string&)>& progress) {
  const std::vector<std::string>& known = hf_quant_schemes();
  if (std::find(known.begin(), known.end(), o.scheme) == known.end())
    return invalid_argument("unknown Hugging Face scheme '" + o.scheme + "'");
  const Scheme scheme = o.scheme == "fp8"    ? Scheme::kFp8
                        : o.scheme == "gptq" ? Scheme::kGptq
                        : o.scheme == "nf4"  ? Scheme::kNf4
                        : o.scheme == "awq"  ? Scheme::kAwq
                                             : Scheme::kInt8;
  if ((scheme == Scheme::kInt8 && o.act_max == nullptr) ||
      (scheme == Scheme::kGptq && o.hessian == nullptr) ||
      (scheme == Scheme::kAwq && (o.hessian == nullptr || o.act_max == nullptr)))
    return internal_error(o.scheme + " needs the calibration run's statistics");
  if (o.nf4_double_quant && scheme != Scheme::kNf4)
    return invalid_argument("double quantization applies to nf4, not to " + o.scheme);
  if (o.kv_amax != nullptr &&
      (scheme == Scheme::kGptq || scheme == Scheme::kNf4 || scheme == Scheme::kAwq))
    return invalid_argument(
        "KV-cache scales are written as compressed-tensors' kv_cache_scheme, which a " + o.scheme +
        " folder has no place for (fp8 and smoothquant have)");
  const fs::path in(in_dir), out(out_dir);
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec))
    return invalid_argument("the output folder is the input folder");
  PAGODA_ASSIGN_OR_RETURN(const ojson config, read_config(in));
  PAGODA_ASSIGN_OR_RETURN(const HfShards shards, list_hf_shards(in));
  PAGODA_ASSIGN_OR_RETURN(const std::vector<std::unique_ptr<SafetensorsFile>> files,
                          open_shards(in, shards));
  std::vector<Source> order;
  std::map<std::string, Source> by_name;
  for (const auto& f : files)
    for (const SafetensorsTensor& t : f->tensors()) {
      if (is_decoder_linear(t) && !is_float(t))
        return unsupported("tensor '" + t.name + "' is " + t.dtype + "; " + o.scheme +
                           " quantizes F32, F16 or BF16 weights");
      order.push_back({f.get(), &t});
      by_name[t.name] = order.back();
    }
  std::unique_ptr<AwqFolderQuantizer> awq;
  if (scheme == Scheme::kAwq) {
    PAGODA_RETURN_IF_ERROR(check_awq(files, o.awq_group_size));
    auto load = [&by_name, &pool](const std::string& name) -> Result<AwqMatrix> {
      const auto it = by_name.find(name);
      if (it == by_name.end() || !is_decoder_linear(*it->second.t))
        return unsupported("awq needs '" + name + "' (a Llama-family decoder layer)");
      const SafetensorsTensor& t = *it->second.t;
      const uint8_t* data = it->second.shard->tensor_data(t);
      AwqMatrix m;
      m.rows = t.shape[0];
      m.cols = t.shape[1];
      m.w.resize(static_cast<size_t>(m.rows * m.cols));
      pool.parallel_for(m.rows, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) load_row(t, data, r, m.cols, m.w.data() + r * m.cols);
      });
      return m;
    };
    awq =
        std::make_unique<AwqFolderQuantizer>(load, *o.hessian, *o.act_max, o.awq_group_size, pool);
  }
  std::map<std::string, std::vector<float>> smooth;
  if (o.act_max && scheme == Scheme::kInt8)
    PAGODA_RETURN_IF_ERROR(compute_smoothing(by_name, *o.act_max, o.alpha, pool, &smooth));
  std::vector<SafetensorsSpec> specs;
  std::vector<Job> jobs;
  HfQuantizeReport rep;
  for (const Source& src : order) {
    const SafetensorsTensor& t = *src.t;
    rep.bytes_in += t.end - t.begin;
    const auto sm = smooth.find(t.name);
    const std::vector<float>* factors = sm == smooth.end() ? nullptr : &sm->second;
    if (!is_decoder_linear(t)) {
      specs.push_back({t.name, t.dtype, t.shape});
      if (awq && AwqFolderQuantizer::may_divide(t.name)) {
        if (!is_float(t) || t.shape.size() != 1)
          return unsupported("awq folds its scales into '" + t.name +
                             "', which is not a 1-D F32, F16 or BF16 tensor");
        jobs.push_back({src.shard, &t, Job::kAwqDivided});
      } else {
        jobs.push_back({src.shard, &t, factors ? Job::kNorm : Job::kCopy, factors});
      }
      ++rep.n_copied;
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 7);  // less ".weight"
    ++rep.n_quantized;
    if (scheme == Scheme::kNf4) {
      const int64_t n = t.shape[0] * t.shape[1];
      if (n % 2 != 0)
        return unsupported("'" + t.name +
                           "' holds an odd number of weights (NF4 packs two a byte)");
      const bool dq = o.nf4_double_quant;
      const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
      specs.push_back({t.name, "U8", {n / 2, 1}});
      jobs.push_back({src.shard, &t, Job::kNf4Weight});
      specs.push_back({t.name + ".absmax", dq ? "U8" : "F32", {blocks}});
      jobs.push_back({src.shard, &t, Job::kNf4Absmax});
      specs.push_back({t.name + ".quant_map", "F32", {16}});
      jobs.push_back({src.shard, &t, Job::kNf4Map});
      if (dq) {
        specs.push_back(
            {t.name + ".nested_absmax", "F32", {(blocks + kBnbNestedBlock - 1) / kBnbNestedBlock}});
        jobs.push_back({src.shard, &t, Job::kNf4NestedAbsmax});
        specs.push_back({t.name + ".nested_quant_map", "F32", {256}});
        jobs.push_back({src.shard, &t, Job::kNf4NestedMap});
      }
      Job state{src.shard, &t, Job::kNf4State};
      state.text = nf4_quant_state(t, dq);
      const size_t size = state.text.size() + (dq ? kNf4StateEnd : 0);
      specs.push_back(
          {t.name + ".quant_state.bitsandbytes__nf4", "U8", {static_cast<int64_t>(size)}});
      jobs.push_back(std::move(state));
      continue;
    }
    if (scheme == Scheme::kAwq) {
      const int64_t rows = t.shape[0], cols = t.shape[1], g = o.awq_group_size;
      specs.push_back({base + ".qweight", "I32", {cols, rows / 8}});
      jobs.push_back({src.shard, &t, Job::kAwqQWeight});
      specs.push_back({base + ".qzeros", "I32", {cols / g, rows / 8}});
      jobs.push_back({src.shard, &t, Job::kAwqQZeros});
      specs.push_back({base + ".scales", "F16", {cols / g, rows}});
      jobs.push_back({src.shard, &t, Job::kAwqScales});
      continue;
    }
    if (scheme == Scheme::kGptq) {
      const int64_t rows = t.shape[0], cols = t.shape[1], pack = 32 / o.gptq.bits;
      const int64_t g =
          o.gptq.group_size <= 0 || o.gptq.group_size >= cols ? cols : o.gptq.group_size;
      const int64_t groups = (cols + g - 1) / g;
      if (rows % pack != 0 || cols % pack != 0)
        return unsupported("'" + t.name + "' is not whole int32 words of " +
                           std::to_string(o.gptq.bits) + "-bit weights");
      specs.push_back({base + ".qweight", "I32", {cols / pack, rows}});
      jobs.push_back({src.shard, &t, Job::kQWeight});
      specs.push_back({base + ".qzeros", "I32", {groups, rows / pack}});
      jobs.push_back({src.shard, &t, Job::kQZeros});
      specs.push_back({base + ".scales", "F16", {groups, rows}});
      jobs.push_back({src.shard, &t, Job::kGScales});
      specs.push_back({base + ".g_idx", "I32", {cols}});
      jobs.push_back({src.shard, &t, Job::kGIdx});
      continue;
    }
    specs.push_back({t.name, scheme == Scheme::kFp8 ? "F8_E4M3" : "I8", t.shape});
    jobs.push_back({src.shard, &t, Job::kWeight, factors});
    specs.push_back({base + ".weight_scale", "F32", {t.shape[0], 1}});
    jobs.push_back({src.shard, &t, Job::kScale});
  }
  if (o.kv_amax != nullptr) {
    const std::vector<float>& k = o.kv_amax->k_amax();
    const std::vector<float>& v = o.kv_amax->v_amax();
    for (size_t l = 0; l < k.size(); ++l) {
      if (!(k[l] > 0) || !(v[l] > 0) || !std::isfinite(k[l]) || !std::isfinite(v[l]))
        return internal_error("the calibration run saw no keys or values in layer " +
                              std::to_string(l));
      for (const auto& [which, amax] : {std::pair{"k_scale", k[l]}, std::pair{"v_scale", v[l]}}) {
        specs.push_back({"model.layers." + std::to_string(l) + ".self_attn." + which, "F32", {1}});
        Job j{nullptr, nullptr, Job::kKvScale};
        j.value = amax / kE4M3Max;  // the calibration's amax onto E4M3's largest
        jobs.push_back(j);
      }
    }
  }
  PAGODA_RETURN_IF_ERROR(check_out_dir(out));
  const Status st = write_folder(in, out, config, scheme, o, shards, specs, jobs, awq.get(), pool,
                                 progress, &rep);
  if (!st.is_ok()) {
    // The folder was empty or new: what is in it now is this run's, and incomplete.
    for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) fs::remove_all(e, ec);
    return st;
  }
  if (awq) rep.note = awq_note(awq->reports());
  return rep;
}

}  // namespace pagoda
