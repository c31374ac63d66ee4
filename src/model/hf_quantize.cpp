#include "model/hf_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/fp8.h"
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

// FP8 per output channel: scale = amax / 448 in f32 (1 for an all-zero row, as nothing
// then depends on it), each weight E4M3(w / scale).
void fp8_channel(const SafetensorsTensor& t, const uint8_t* data, ThreadPool& pool,
                 std::vector<uint8_t>* q, std::vector<float>* scales) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  q->resize(static_cast<size_t>(rows * cols));
  scales->resize(static_cast<size_t>(rows));
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      load_row(t, data, r, cols, row.data());
      float amax = 0.0f;
      for (float v : row) amax = std::max(amax, std::fabs(v));
      const float s = amax > 0.0f ? amax / kE4M3Max : 1.0f;
      (*scales)[static_cast<size_t>(r)] = s;
      uint8_t* out = q->data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = f32_to_e4m3(row[static_cast<size_t>(c)] / s);
    }
  });
}

// compressed-tensors' description of FP8 weights per channel, activations per token at
// run time (the keys its QuantizationArgs serialises).
ojson fp8_quantization_config() {
  auto args = [](const char* strategy, bool dynamic, const char* observer) {
    ojson a;
    a["num_bits"] = 8;
    a["type"] = "float";
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
  group["format"] = "float-quantized";
  ojson qc;
  qc["quant_method"] = "compressed-tensors";
  qc["format"] = "float-quantized";
  qc["quantization_status"] = "compressed";
  qc["config_groups"] = {{"group_0", group}};
  qc["ignore"] = {"lm_head"};
  qc["kv_cache_scheme"] = nullptr;
  qc["global_compression_ratio"] = nullptr;
  return qc;
}

// What the writer emits for one output tensor.
struct Job {
  const SafetensorsFile* shard;
  const SafetensorsTensor* src;
  enum Kind { kCopy, kFp8Weight, kFp8Scale } kind;
};

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

// Everything the output folder holds, into `out` (empty).
Status write_folder(const fs::path& in, const fs::path& out, const ojson& config,
                    const HfShards& shards, const std::vector<SafetensorsSpec>& specs,
                    const std::vector<Job>& jobs, ThreadPool& pool,
                    const std::function<void(size_t, size_t, const std::string&)>& progress,
                    HfQuantizeReport* rep) {
  PAGODA_RETURN_IF_ERROR(write_config(config, out, fp8_quantization_config()));
  PAGODA_RETURN_IF_ERROR(copy_side_files(in, out, shards));
  std::vector<float> scales;  // the last weight's, written right after it
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  return write_safetensors((out / "model.safetensors").string(), specs, meta,
                           [&](size_t i, std::vector<uint8_t>* bytes) -> Status {
                             const Job& j = jobs[i];
                             const uint8_t* data = j.shard->tensor_data(*j.src);
                             if (j.kind == Job::kCopy) {
                               bytes->assign(data, data + (j.src->end - j.src->begin));
                             } else if (j.kind == Job::kFp8Weight) {
                               fp8_channel(*j.src, data, pool, bytes, &scales);
                             } else {
                               bytes->resize(scales.size() * 4);
                               std::memcpy(bytes->data(), scales.data(), bytes->size());
                             }
                             if (j.kind != Job::kFp8Weight) j.shard->release(*j.src);
                             rep->bytes_out += bytes->size();
                             if (progress) progress(i + 1, jobs.size(), specs[i].name);
                             return Status::ok();
                           });
}

}  // namespace

const std::vector<std::string>& hf_quant_schemes() {
  static const std::vector<std::string> s = {"fp8"};
  return s;
}

Result<HfQuantizeReport> quantize_hf_folder(
    const std::string& in_dir, const std::string& out_dir, const std::string& scheme,
    ThreadPool& pool, const std::function<void(size_t, size_t, const std::string&)>& progress) {
  if (scheme != "fp8") return invalid_argument("unknown Hugging Face scheme '" + scheme + "'");
  const fs::path in(in_dir), out(out_dir);
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec))
    return invalid_argument("the output folder is the input folder");
  PAGODA_ASSIGN_OR_RETURN(const ojson config, read_config(in));
  PAGODA_ASSIGN_OR_RETURN(const HfShards shards, list_hf_shards(in));
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<SafetensorsSpec> specs;
  std::vector<Job> jobs;
  HfQuantizeReport rep;
  for (const std::string& name : shards.names) {
    PAGODA_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open((in / name).string()));
    for (const SafetensorsTensor& t : f->tensors()) {
      rep.bytes_in += t.end - t.begin;
      const bool float_type =
          t.type && (*t.type == DType::kF32 || *t.type == DType::kF16 || *t.type == DType::kBF16);
      if (is_decoder_linear(t) && !float_type)
        return unsupported("tensor '" + t.name + "' is " + t.dtype +
                           "; the fp8 scheme quantizes F32, F16 or BF16 weights");
      if (!is_decoder_linear(t)) {
        specs.push_back({t.name, t.dtype, t.shape});
        jobs.push_back({f.get(), &t, Job::kCopy});
        ++rep.n_copied;
        continue;
      }
      const std::string base = t.name.substr(0, t.name.size() - 7);  // less ".weight"
      specs.push_back({t.name, "F8_E4M3", t.shape});
      jobs.push_back({f.get(), &t, Job::kFp8Weight});
      specs.push_back({base + ".weight_scale", "F32", {t.shape[0], 1}});
      jobs.push_back({f.get(), &t, Job::kFp8Scale});
      ++rep.n_quantized;
    }
    files.push_back(std::move(f));
  }
  PAGODA_RETURN_IF_ERROR(check_out_dir(out));
  const Status st = write_folder(in, out, config, shards, specs, jobs, pool, progress, &rep);
  if (!st.ok()) {
    // The folder was empty or new: what is in it now is this run's, and incomplete.
    for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) fs::remove_all(e, ec);
    return st;
  }
  return rep;
}

}  // namespace pagoda
