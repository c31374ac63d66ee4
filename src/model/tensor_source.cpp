#include "model/tensor_source.h"

#include <filesystem>

#include "model/arch/arch.h"
#include "model/hf_checkpoint.h"

namespace pagoda {
namespace {

// A GGUF file's tensors under their own names.
class GgufSource : public TensorSource {
 public:
  GgufSource(const GgufFile& f, std::unique_ptr<GgufFile> owned)
      : TensorSource(f.path()), f_(f), owned_(std::move(owned)) {}

  Status init() {
    for (const GgufTensorInfo& g : f_.tensors()) {
      WeightTensor t;
      t.name = g.name;
      t.file_name = g.name;
      t.type = g.type;
      t.n_dims = g.n_dims;
      for (int d = 0; d < 4; ++d) t.ne[d] = g.ne[d];
      t.size = g.size;
      t.data = f_.tensor_data(g);
      t.offset = f_.data_offset() + g.offset;
      PAGODA_RETURN_IF_ERROR(add_tensor(std::move(t)));
    }
    return Status::ok();
  }

  std::string_view format() const override { return "gguf"; }
  const GgufFile* gguf() const override { return &f_; }
  Result<ModelConfig> model_config() const override { return read_model_config(f_); }
  void release_tensor(const WeightTensor& t) const override {
    if (const GgufTensorInfo* g = f_.find_tensor(t.file_name)) f_.release_tensor(*g);
  }
  void release_tensor_data() const override { f_.release_tensor_data(); }

 private:
  const GgufFile& f_;
  std::unique_ptr<GgufFile> owned_;
};

Result<std::unique_ptr<TensorSource>> make_gguf_source(const GgufFile& f,
                                                       std::unique_ptr<GgufFile> owned) {
  auto s = std::make_unique<GgufSource>(f, std::move(owned));
  PAGODA_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<TensorSource>(std::move(s));
}

}  // namespace

std::string tensor_shape(const WeightTensor& t) {
  return shape_text(t.ne, t.n_dims);
}

Status TensorSource::add_tensor(WeightTensor t) {
  if (index_.count(t.name) != 0)
    return corrupt("'" + path_ + "' holds tensor '" + t.name + "' twice" +
                   (t.file_name != t.name ? " (as '" + t.file_name + "')" : ""));
  index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
  return Status::ok();
}

const WeightTensor* TensorSource::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<const WeightTensor*> TensorSource::find_tensor(const std::string& name,
                                                      const std::vector<int64_t>& shape) const {
  const WeightTensor* t = find_tensor(std::string_view(name));
  if (t == nullptr) return not_found("model file has no tensor '" + name + "'");
  const std::string as = t->file_name != t->name ? " ('" + t->file_name + "')" : "";
  PAGODA_RETURN_IF_ERROR(check_shape("tensor '" + name + "'" + as, t->ne, t->n_dims, shape));
  return t;
}

Result<std::unique_ptr<TensorSource>> gguf_tensor_source(const GgufFile& file) {
  return make_gguf_source(file, nullptr);
}

bool is_model_folder(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

Result<std::unique_ptr<TensorSource>> open_tensor_source(const std::string& path) {
  if (is_model_folder(path)) return open_hf_checkpoint(path);
  PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::open(path));
  const GgufFile& ref = *f;
  return make_gguf_source(ref, std::move(f));
}

}  // namespace pagoda
