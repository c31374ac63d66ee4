#include "model/imatrix.h"

#include <cstring>

#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace pagoda {
namespace {

constexpr int kInputs = 4;

// The GGUF weight matrices that take each input.
std::vector<std::string> matrices_of(int layer, ActivationObserver::Input which) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  switch (which) {
    case ActivationObserver::Input::kQkv:
      return {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"};
    case ActivationObserver::Input::kWo:
      return {p + "attn_output.weight"};
    case ActivationObserver::Input::kGateUp:
      return {p + "ffn_gate.weight", p + "ffn_up.weight"};
    case ActivationObserver::Input::kDown:
      return {p + "ffn_down.weight"};
  }
  return {};
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

ImatrixCollector::ImatrixCollector(int n_layers) : sums_(static_cast<size_t>(n_layers) * kInputs) {}

void ImatrixCollector::observe(int layer, Input which, const float* x, int64_t n, int64_t cols) {
  Sums& s = sums_[static_cast<size_t>(layer) * kInputs + static_cast<size_t>(which)];
  if (s.sum2.empty()) s.sum2.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      s.sum2[static_cast<size_t>(c)] += static_cast<double>(row[c]) * row[c];
  }
  s.count += n;
}

Status ImatrixCollector::write(const std::string& path, const std::vector<std::string>& datasets,
                               int chunks, int chunk_size) const {
  GgufWriter w;
  w.set_string("general.type", "imatrix");
  w.set_strings("imatrix.datasets", datasets);
  w.set_u32("imatrix.chunk_count", static_cast<uint32_t>(chunks));
  w.set_u32("imatrix.chunk_size", static_cast<uint32_t>(chunk_size));
  for (size_t i = 0; i < sums_.size(); ++i) {
    const Sums& s = sums_[i];
    if (s.count == 0) continue;
    const int layer = static_cast<int>(i / kInputs);
    const auto which = static_cast<Input>(i % kInputs);
    std::vector<float> sum2(s.sum2.begin(), s.sum2.end());
    const auto cols = static_cast<int64_t>(sum2.size());
    for (const std::string& name : matrices_of(layer, which)) {
      w.add_tensor(name + ".in_sum2", DType::kF32, {cols, 1}, f32_bytes(sum2));
      w.add_tensor(name + ".counts", DType::kF32, {1, 1}, f32_bytes({static_cast<float>(s.count)}));
    }
  }
  return w.write(path);
}

Result<Imatrix> read_imatrix(const std::string& path) {
  auto opened = GgufFile::open(path);
  if (!opened)
    return opened.status().with_context("reading the importance matrix '" + path +
                                        "' (GGUF imatrix files only)");
  const GgufFile& f = **opened;
  if (auto type = f.get_string("general.type"); !type || *type != "imatrix")
    return invalid_argument("'" + path +
                            "' is not an importance matrix (general.type is not "
                            "\"imatrix\")");
  Imatrix m;
  if (const GgufValue* d = f.find("imatrix.datasets"))
    for (std::string_view s : d->strings) m.datasets.emplace_back(s);
  m.chunks = f.get_int("imatrix.chunk_count").value_or(0);
  constexpr std::string_view kSums = ".in_sum2";
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name.size() <= kSums.size() ||
        t.name.compare(t.name.size() - kSums.size(), kSums.size(), kSums) != 0)
      continue;
    const std::string name = t.name.substr(0, t.name.size() - kSums.size());
    const GgufTensorInfo* counts = f.find_tensor(name + ".counts");
    if (counts == nullptr)
      return invalid_argument("importance matrix '" + path + "': '" + t.name +
                              "' has no counts tensor");
    if (t.type != DType::kF32 || counts->type != DType::kF32)
      return invalid_argument("importance matrix '" + path + "': '" + name +
                              "' is not stored in F32");
    // [cols, n_mat] sums and [1, n_mat] counts; n_mat > 1 for mixtures of experts, whose
    // matrices Pagoda does not run.
    const int64_t cols = t.ne[0], n_mat = t.n_elements() / std::max<int64_t>(cols, 1);
    if (cols <= 0 || n_mat != 1 || counts->n_elements() != 1)
      return unsupported("importance matrix '" + path + "': '" + name +
                         "' holds several matrices (experts), which Pagoda does not run");
    std::vector<float> sums(static_cast<size_t>(cols));
    std::memcpy(sums.data(), f.tensor_data(t), sums.size() * 4);
    float count;
    std::memcpy(&count, f.tensor_data(*counts), 4);
    // As llama.cpp's quantizer: the mean square; a matrix never reached weighs all alike.
    for (float& v : sums) v = count > 0 ? v / count : 1.0f;
    m.values[name] = std::move(sums);
  }
  if (m.values.empty())
    return invalid_argument("importance matrix '" + path + "' holds no entries");
  return m;
}

}  // namespace pagoda
