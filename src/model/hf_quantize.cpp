#include "model/hf_quantize.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "model/hf_folder.h"
#include "model/hf_scheme_writer.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
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

Result<std::vector<std::unique_ptr<SafetensorsFile>>> open_shards(const fs::path& in,
                                                                  const HfShards& shards) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (const std::string& name : shards.names) {
    PAGODA_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open((in / name).string()));
    files.push_back(std::move(f));
  }
  return files;
}

HfInput list_input(const std::vector<std::unique_ptr<SafetensorsFile>>& files) {
  HfInput in;
  for (const auto& f : files)
    for (const SafetensorsTensor& t : f->tensors()) in.order.push_back({f.get(), &t});
  for (const HfSource& s : in.order) in.by_name[s.t->name] = s;
  return in;
}

Result<std::unique_ptr<HfSchemeWriter>> make_writer(const HfQuantizeOptions& o, const HfInput& in,
                                                    ThreadPool& pool) {
  if (o.scheme == "fp8" || o.scheme == "smoothquant")
    return make_compressed_tensors_writer(o, in, pool);
  if (o.scheme == "gptq") return make_gptq_writer(o, pool);
  if (o.scheme == "awq") return make_awq_writer(o, in, pool);
  if (o.scheme == "nf4") return make_nf4_writer(o, pool);
  return invalid_argument("unknown Hugging Face scheme '" + o.scheme + "'");
}

}  // namespace

const std::vector<std::string>& hf_quant_schemes() {
  static const std::vector<std::string> s = {"fp8", "smoothquant", "gptq", "awq", "nf4"};
  return s;
}

bool hf_scheme_calibrates(const std::string& scheme) {
  return scheme == "smoothquant" || scheme == "gptq" || scheme == "awq";
}

Status hf_quantize_check(const std::string& in_dir, const HfQuantizeOptions& o) {
  PAGODA_RETURN_IF_ERROR(read_config(in_dir).status());
  if (o.scheme != "awq") return Status::ok();
  PAGODA_ASSIGN_OR_RETURN(const HfShards shards, list_hf_shards(in_dir));
  PAGODA_ASSIGN_OR_RETURN(const auto files, open_shards(in_dir, shards));
  return check_awq_input(list_input(files), o.awq_group_size);
}

Result<HfQuantizeReport> quantize_hf_folder(
    const std::string& in_dir, const std::string& out_dir, const HfQuantizeOptions& o,
    ThreadPool& pool, const std::function<void(size_t, size_t, const std::string&)>& progress) {
  const std::vector<std::string>& known = hf_quant_schemes();
  if (std::find(known.begin(), known.end(), o.scheme) == known.end())
    return invalid_argument("unknown Hugging Face scheme '" + o.scheme + "'");
  if (o.nf4_double_quant && o.scheme != "nf4")
    return invalid_argument("double quantization applies to nf4, not to " + o.scheme);
  if (o.kv_amax != nullptr && o.scheme != "fp8" && o.scheme != "smoothquant")
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
  const HfInput input = list_input(files);
  for (const HfSource& src : input.order)
    if (is_decoder_linear(*src.t) && !is_float(*src.t))
      return unsupported("tensor '" + src.t->name + "' is " + src.t->dtype + "; " + o.scheme +
                         " quantizes F32, F16 or BF16 weights");
  PAGODA_ASSIGN_OR_RETURN(const std::unique_ptr<HfSchemeWriter> writer,
                          make_writer(o, input, pool));
  // The output's tensors, in the input's order; each remembers its source, released after
  // the last tensor made from it.
  std::vector<HfOutTensor> tensors;
  HfQuantizeReport rep;
  for (const HfSource& src : input.order) {
    rep.bytes_in += src.t->end - src.t->begin;
    const size_t first = tensors.size();
    if (is_decoder_linear(*src.t)) {
      PAGODA_RETURN_IF_ERROR(writer->add_linear(src, &tensors));
      ++rep.n_quantized;
    } else {
      PAGODA_RETURN_IF_ERROR(writer->add_other(src, &tensors));
      ++rep.n_copied;
    }
    for (size_t i = first; i < tensors.size(); ++i) tensors[i].src = &src;
  }
  PAGODA_RETURN_IF_ERROR(writer->finish(&tensors));
  std::vector<SafetensorsSpec> specs;
  std::map<const HfSource*, size_t> last;  // each source's last output tensor
  for (size_t i = 0; i < tensors.size(); ++i) {
    specs.push_back(tensors[i].spec);
    if (tensors[i].src != nullptr) last[tensors[i].src] = i;
  }

  PAGODA_RETURN_IF_ERROR(check_out_dir(out));
  Status st = write_config(config, out, writer->quantization_config(config));
  if (st.is_ok()) st = copy_side_files(in, out, shards);
  if (st.is_ok()) {
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    st = write_safetensors((out / "model.safetensors").string(), specs, meta,
                           [&](size_t i, std::vector<uint8_t>* bytes) -> Status {
                             HfOutTensor& t = tensors[i];
                             PAGODA_RETURN_IF_ERROR(t.fill(bytes));
                             // Dropping the fill frees what it shared with the tensors before it,
                             // once the last of them has run.
                             t.fill = nullptr;
                             if (t.src != nullptr && last[t.src] == i)
                               t.src->shard->release(*t.src->t);
                             rep.bytes_out += bytes->size();
                             if (progress) progress(i + 1, tensors.size(), t.spec.name);
                             return Status::ok();
                           });
  }
  if (!st.is_ok()) {
    // The folder was empty or new: what is in it now is this run's, and incomplete.
    for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) fs::remove_all(e, ec);
    return st;
  }
  rep.note = writer->note();
  return rep;
}

}  // namespace pagoda
