#include "model/hf_scheme_writer.h"

#include <cstdlib>
#include <cstring>

#include "core/dtype.h"

namespace pagoda {

Status HfSchemeWriter::add_other(const HfSource& src, std::vector<HfOutTensor>* out) {
  out->push_back(copied(src));
  return Status::ok();
}

namespace {

bool ends_with(const std::string& s, std::string_view t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

bool is_decoder_linear(const SafetensorsTensor& t) {
  return t.shape.size() == 2 && t.name.rfind("model.layers.", 0) == 0 &&
         ends_with(t.name, "_proj.weight") &&
         (t.name.find(".self_attn.") != std::string::npos ||
          t.name.find(".mlp.") != std::string::npos);
}

bool is_float(const SafetensorsTensor& t) {
  return t.type && (*t.type == DType::kF32 || *t.type == DType::kF16 || *t.type == DType::kBF16);
}

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

std::vector<float> load_matrix(const HfSource& src, ThreadPool& pool) {
  const SafetensorsTensor& t = *src.t;
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const uint8_t* data = src.data();
  std::vector<float> w(static_cast<size_t>(rows * cols));
  pool.parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) load_row(t, data, r, cols, w.data() + r * cols);
  });
  return w;
}

void divided_vector(const SafetensorsTensor& t, const uint8_t* data, const std::vector<float>& s,
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

ActivationObserver::Input linear_input(const std::string& name) {
  using In = ActivationObserver::Input;
  if (name.find(".o_proj.") != std::string::npos) return In::kWo;
  if (name.find(".down_proj.") != std::string::npos) return In::kDown;
  if (name.find(".gate_proj.") != std::string::npos || name.find(".up_proj.") != std::string::npos)
    return In::kGateUp;
  return In::kQkv;
}

int layer_of(const std::string& name) {
  return std::atoi(name.c_str() + std::strlen("model.layers."));
}

HfOutTensor copied(const HfSource& src) {
  const SafetensorsTensor* t = src.t;
  const SafetensorsFile* shard = src.shard;
  return {{t->name, t->dtype, t->shape},
          [t, shard](std::vector<uint8_t>* bytes) {
            const uint8_t* data = shard->tensor_data(*t);
            bytes->assign(data, data + (t->end - t->begin));
            return Status::ok();
          },
          nullptr};
}

}  // namespace pagoda
