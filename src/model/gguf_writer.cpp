#include "model/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace pagoda {
namespace {

template <typename T>
void append(std::vector<uint8_t>& b, T x) {
  const size_t n = b.size();
  b.resize(n + sizeof(T));
  std::memcpy(b.data() + n, &x, sizeof(T));
}

void append_str(std::vector<uint8_t>& b, std::string_view s) {
  append<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

// Serialises the payload of `v` (without its type tag).
void append_payload(std::vector<uint8_t>& b, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kU8:
      append<uint8_t>(b, static_cast<uint8_t>(v.u));
      break;
    case GgufType::kI8:
      append<int8_t>(b, static_cast<int8_t>(v.i));
      break;
    case GgufType::kU16:
      append<uint16_t>(b, static_cast<uint16_t>(v.u));
      break;
    case GgufType::kI16:
      append<int16_t>(b, static_cast<int16_t>(v.i));
      break;
    case GgufType::kU32:
      append<uint32_t>(b, static_cast<uint32_t>(v.u));
      break;
    case GgufType::kI32:
      append<int32_t>(b, static_cast<int32_t>(v.i));
      break;
    case GgufType::kU64:
      append<uint64_t>(b, v.u);
      break;
    case GgufType::kI64:
      append<int64_t>(b, v.i);
      break;
    case GgufType::kF32:
      append<float>(b, static_cast<float>(v.f));
      break;
    case GgufType::kF64:
      append<double>(b, v.f);
      break;
    case GgufType::kBool:
      append<uint8_t>(b, v.i ? 1 : 0);
      break;
    case GgufType::kString:
      append_str(b, v.str);
      break;
    case GgufType::kArray:
      append<uint32_t>(b, static_cast<uint32_t>(v.elem_type));
      append<uint64_t>(b, v.count);
      if (v.elem_type == GgufType::kString) {
        for (std::string_view s : v.strings) append_str(b, s);
      } else if (v.elem_type == GgufType::kArray) {
        for (const GgufValue& a : v.arrays) append_payload(b, a);
      } else {
        const size_t n = static_cast<size_t>(v.count) * gguf_value_size(v.elem_type);
        b.insert(b.end(), v.array_data, v.array_data + n);
      }
      break;
  }
}

std::vector<uint8_t> tagged(GgufType t) {
  std::vector<uint8_t> b;
  append<uint32_t>(b, static_cast<uint32_t>(t));
  return b;
}

template <typename T>
std::vector<uint8_t> scalar(GgufType t, T x) {
  std::vector<uint8_t> b = tagged(t);
  append<T>(b, x);
  return b;
}

template <typename T>
std::vector<uint8_t> array(GgufType et, const std::vector<T>& v) {
  std::vector<uint8_t> b = tagged(GgufType::kArray);
  append<uint32_t>(b, static_cast<uint32_t>(et));
  append<uint64_t>(b, v.size());
  for (const T& x : v) append<T>(b, x);
  return b;
}

}  // namespace

void GgufWriter::put(std::string_view key, std::vector<uint8_t> bytes) {
  for (Entry& e : kv_) {
    if (e.key == key) {
      e.bytes = std::move(bytes);
      return;
    }
  }
  kv_.push_back({std::string(key), std::move(bytes)});
}

void GgufWriter::remove(std::string_view key) {
  for (size_t k = 0; k < kv_.size(); ++k) {
    if (kv_[k].key == key) {
      kv_.erase(kv_.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
  }
}

void GgufWriter::set_u32(std::string_view key, uint32_t v) {
  put(key, scalar(GgufType::kU32, v));
}
void GgufWriter::set_i32(std::string_view key, int32_t v) {
  put(key, scalar(GgufType::kI32, v));
}
void GgufWriter::set_u64(std::string_view key, uint64_t v) {
  put(key, scalar(GgufType::kU64, v));
}
void GgufWriter::set_f32(std::string_view key, float v) {
  put(key, scalar(GgufType::kF32, v));
}
void GgufWriter::set_bool(std::string_view key, bool v) {
  put(key, scalar<uint8_t>(GgufType::kBool, v ? 1 : 0));
}
void GgufWriter::set_string(std::string_view key, std::string_view v) {
  std::vector<uint8_t> b = tagged(GgufType::kString);
  append_str(b, v);
  put(key, std::move(b));
}
void GgufWriter::set_strings(std::string_view key, const std::vector<std::string>& v) {
  std::vector<uint8_t> b = tagged(GgufType::kArray);
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kString));
  append<uint64_t>(b, v.size());
  for (const std::string& s : v) append_str(b, s);
  put(key, std::move(b));
}
void GgufWriter::set_f32s(std::string_view key, const std::vector<float>& v) {
  put(key, array(GgufType::kF32, v));
}
void GgufWriter::set_i32s(std::string_view key, const std::vector<int32_t>& v) {
  put(key, array(GgufType::kI32, v));
}
void GgufWriter::set_value(std::string_view key, const GgufValue& v) {
  std::vector<uint8_t> b = tagged(v.type);
  append_payload(b, v);
  put(key, std::move(b));
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
  Tensor t{std::move(name), type, std::move(ne), std::move(data), nullptr, 0};
  t.data = t.owned.data();
  t.size = t.owned.size();
  tensors_.push_back(std::move(t));
}

void GgufWriter::add_tensor_ref(std::string name, DType type, std::vector<int64_t> ne,
                                const uint8_t* data, size_t size) {
  tensors_.push_back({std::move(name), type, std::move(ne), {}, data, size});
}

std::vector<uint8_t> GgufWriter::header() const {
  std::vector<uint8_t> b;
  append<uint32_t>(b, 0x46554747);
  append<uint32_t>(b, 3);
  append<uint64_t>(b, tensors_.size());
  const bool custom_alignment = alignment_ != 32;
  append<uint64_t>(b, kv_.size() + (custom_alignment ? 1 : 0));
  for (const Entry& e : kv_) {
    append_str(b, e.key);
    b.insert(b.end(), e.bytes.begin(), e.bytes.end());
  }
  if (custom_alignment) {
    append_str(b, "general.alignment");
    const std::vector<uint8_t> v = scalar(GgufType::kU32, alignment_);
    b.insert(b.end(), v.begin(), v.end());
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    append_str(b, t.name);
    append<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) append<uint64_t>(b, static_cast<uint64_t>(n));
    append<uint32_t>(b, static_cast<uint32_t>(t.type));
    append<uint64_t>(b, offset);
    offset += (t.size + alignment_ - 1) / alignment_ * alignment_;
  }
  b.resize((b.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  return b;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> b = header();
  for (const Tensor& t : tensors_) {
    b.insert(b.end(), t.data, t.data + t.size);
    b.resize((b.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  }
  return b;
}

Status GgufWriter::write(const std::string& path) const {
  // Write to a temporary name and rename, so an interrupted conversion never leaves a
  // truncated file under the final name.
  for (const Tensor& t : tensors_)
    if (is_internal_dtype(t.type))
      return unsupported("tensor '" + t.name + "' is " + std::string(dtype_name(t.type)) +
                         ", a Pagoda-internal block type with no GGUF type number; not writing '" +
                         path + "'");
  const std::string tmp = path + ".partial";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) return io_error("cannot create '" + tmp + "'");
  const std::vector<uint8_t> h = header();
  bool ok = std::fwrite(h.data(), 1, h.size(), f.get()) == h.size();
  static const uint8_t kZeros[256] = {};
  for (const Tensor& t : tensors_) {
    if (!ok) break;
    ok = t.size == 0 || std::fwrite(t.data, 1, t.size, f.get()) == t.size;
    for (size_t pad = (alignment_ - t.size % alignment_) % alignment_; ok && pad > 0;) {
      const size_t n = pad < sizeof(kZeros) ? pad : sizeof(kZeros);
      ok = std::fwrite(kZeros, 1, n, f.get()) == n;
      pad -= n;
    }
  }
  ok = std::fflush(f.get()) == 0 && ok;
  f.reset();
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return io_error("failed writing '" + path + "'");
  }
  return Status::ok();
}

}  // namespace pagoda
