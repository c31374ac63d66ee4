#include "model/gguf.h"

#include <cinttypes>
#include <cstring>
#include <limits>

namespace pagoda {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;
// Keys and tensor names are identifiers; anything longer is a corrupt length field.
constexpr uint64_t kMaxNameLength = 65535;

bool valid_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::kF64);
}

// Sequential reader over [data, data+size) that reports, rather than overruns, a short file.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T))
      return corrupt(str_format("file truncated while reading %s at offset %zu", what, pos_));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string_view* out, const char* what, uint64_t max_len) {
    uint64_t len = 0;
    PAGODA_RETURN_IF_ERROR(read(&len, what));
    if (len > max_len)
      return corrupt(
          str_format("%s length %" PRIu64 " at offset %zu is implausible", what, len, pos_ - 8));
    if (len > remaining())
      return corrupt(str_format("file truncated: %s of %" PRIu64 " bytes at offset %zu runs past "
                                "the end",
                                what, len, pos_));
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::ok();
  }

  Status skip(uint64_t n, const char* what) {
    if (n > remaining())
      return corrupt(str_format("file truncated: %s at offset %zu runs past the end", what, pos_));
    pos_ += static_cast<size_t>(n);
    return Status::ok();
  }
  const uint8_t* here() const { return data_ + pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

Status read_value(Reader& r, GgufType type, GgufValue* v, int depth, const std::string& key);

// An array value after its type: element type, count and elements (nested arrays
// through read_value, at most kMaxArrayDepth deep).
Status read_array(Reader& r, GgufValue* v, int depth, const std::string& key) {
  if (depth >= kMaxArrayDepth)
    return corrupt(
        str_format("metadata '%s': arrays nested deeper than %d", key.c_str(), kMaxArrayDepth));
  uint32_t et = 0;
  PAGODA_RETURN_IF_ERROR(r.read(&et, "array element type"));
  if (!valid_type(et))
    return corrupt(str_format("metadata '%s': unknown array element type %u", key.c_str(), et));
  v->elem_type = static_cast<GgufType>(et);
  PAGODA_RETURN_IF_ERROR(r.read(&v->count, "array length"));
  // Every element takes at least this many bytes, which bounds the count by the file.
  const size_t min_elem = v->elem_type == GgufType::kString  ? 8
                          : v->elem_type == GgufType::kArray ? 12
                                                             : gguf_value_size(v->elem_type);
  if (v->count > r.remaining() / min_elem)
    return corrupt(str_format("metadata '%s': array of %" PRIu64 " elements cannot fit in the "
                              "%zu bytes left in the file",
                              key.c_str(), v->count, r.remaining()));
  if (v->elem_type == GgufType::kString) {
    v->strings.resize(static_cast<size_t>(v->count));
    for (auto& s : v->strings)
      PAGODA_RETURN_IF_ERROR(
          r.read_string(&s, "string array element", std::numeric_limits<uint64_t>::max()));
  } else if (v->elem_type == GgufType::kArray) {
    v->arrays.resize(static_cast<size_t>(v->count));
    for (auto& a : v->arrays)
      PAGODA_RETURN_IF_ERROR(read_value(r, GgufType::kArray, &a, depth + 1, key));
  } else {
    v->array_data = r.here();
    PAGODA_RETURN_IF_ERROR(r.skip(v->count * min_elem, "array data"));
    if (v->elem_type == GgufType::kBool) {
      for (uint64_t k = 0; k < v->count; ++k)
        if (v->array_data[k] > 1)
          return corrupt(
              str_format("metadata '%s': bool array element is not 0 or 1", key.c_str()));
    }
  }
  return Status::ok();
}

Status read_value(Reader& r, GgufType type, GgufValue* v, int depth, const std::string& key) {
  v->type = type;
  switch (type) {
    case GgufType::kU8: {
      uint8_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "u8"));
      v->u = x;
      v->i = x;
      break;
    }
    case GgufType::kI8: {
      int8_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "i8"));
      v->i = x;
      break;
    }
    case GgufType::kU16: {
      uint16_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "u16"));
      v->u = x;
      v->i = x;
      break;
    }
    case GgufType::kI16: {
      int16_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "i16"));
      v->i = x;
      break;
    }
    case GgufType::kU32: {
      uint32_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "u32"));
      v->u = x;
      v->i = x;
      break;
    }
    case GgufType::kI32: {
      int32_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "i32"));
      v->i = x;
      break;
    }
    case GgufType::kU64: {
      uint64_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "u64"));
      v->u = x;
      v->i = static_cast<int64_t>(x);
      break;
    }
    case GgufType::kI64: {
      int64_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "i64"));
      v->i = x;
      break;
    }
    case GgufType::kF32: {
      float x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "f32"));
      v->f = x;
      break;
    }
    case GgufType::kF64: {
      double x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "f64"));
      v->f = x;
      break;
    }
    case GgufType::kBool: {
      uint8_t x = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&x, "bool"));
      if (x > 1)
        return corrupt(str_format("metadata '%s': bool value %u is not 0 or 1", key.c_str(), x));
      v->i = x;
      break;
    }
    case GgufType::kString:
      PAGODA_RETURN_IF_ERROR(
          r.read_string(&v->str, "string value", std::numeric_limits<uint64_t>::max()));
      break;
    case GgufType::kArray:
      return read_array(r, v, depth, key);
  }
  return Status::ok();
}

template <typename T>
T load_le(const uint8_t* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}

}  // namespace

size_t gguf_value_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                "i32", "f32", "bool", "string", "array",
                                                "u64", "i64", "f64"};
  const auto k = static_cast<uint32_t>(t);
  return k < std::size(kNames) ? kNames[k] : "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

std::optional<int64_t> GgufValue::as_int() const {
  if (type == GgufType::kU64 && u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  if (is_integer()) return i;
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (is_float()) return f;
  if (type == GgufType::kU64) return static_cast<double>(u);
  if (is_integer()) return static_cast<double>(i);
  return std::nullopt;
}

int64_t GgufValue::array_int(uint64_t k) const {
  const uint8_t* p = array_data + k * gguf_value_size(elem_type);
  switch (elem_type) {
    case GgufType::kU8:
    case GgufType::kBool:
      return load_le<uint8_t>(p);
    case GgufType::kI8:
      return load_le<int8_t>(p);
    case GgufType::kU16:
      return load_le<uint16_t>(p);
    case GgufType::kI16:
      return load_le<int16_t>(p);
    case GgufType::kU32:
      return load_le<uint32_t>(p);
    case GgufType::kI32:
      return load_le<int32_t>(p);
    case GgufType::kU64:
      return static_cast<int64_t>(load_le<uint64_t>(p));
    case GgufType::kI64:
      return load_le<int64_t>(p);
    case GgufType::kF32:
      return static_cast<int64_t>(load_le<float>(p));
    case GgufType::kF64:
      return static_cast<int64_t>(load_le<double>(p));
    default:
      return 0;
  }
}

double GgufValue::array_float(uint64_t k) const {
  const uint8_t* p = array_data + k * gguf_value_size(elem_type);
  if (elem_type == GgufType::kF32) return load_le<float>(p);
  if (elem_type == GgufType::kF64) return load_le<double>(p);
  return static_cast<double>(array_int(k));
}

std::string GgufValue::to_string(size_t max_elems) const {
  switch (type) {
    case GgufType::kString:
      return "\"" + std::string(str.substr(0, 200)) + (str.size() > 200 ? "...\"" : "\"");
    case GgufType::kBool:
      return i ? "true" : "false";
    case GgufType::kF32:
    case GgufType::kF64:
      return str_format("%g", f);
    case GgufType::kU64:
      return str_format("%" PRIu64, u);
    case GgufType::kArray: {
      std::string s =
          str_format("[%s x %" PRIu64 "]", std::string(gguf_type_name(elem_type)).c_str(), count);
      s += " [";
      for (uint64_t k = 0; k < count && k < max_elems; ++k) {
        if (k) s += ", ";
        if (elem_type == GgufType::kString)
          s += "\"" + std::string(strings[k].substr(0, 40)) + "\"";
        else if (elem_type == GgufType::kArray)
          s += arrays[k].to_string(max_elems);
        else if (elem_type == GgufType::kF32 || elem_type == GgufType::kF64)
          s += str_format("%g", array_float(k));
        else
          s += str_format("%" PRId64, array_int(k));
      }
      if (count > max_elems) s += ", ...";
      return s + "]";
    }
    default:
      return str_format("%" PRId64, i);
  }
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  PAGODA_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->data_ = map->data();
  f->size_ = map->size();
  f->path_ = path;
  f->map_ = std::move(map);
  Status s = f->parse_all();
  if (!s.is_ok()) return s.with_context("invalid GGUF file '" + path + "'");
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->data_ = data;
  f->size_ = size;
  f->path_ = "<memory>";
  Status s = f->parse_all();
  if (!s.is_ok()) return s.with_context("invalid GGUF data");
  return f;
}

Status GgufFile::parse_all() {
  Reader r(data_, size_);
  uint32_t magic = 0;
  PAGODA_RETURN_IF_ERROR(r.read(&magic, "magic"));
  if (magic != kMagic) return corrupt("bad magic: this is not a GGUF file");
  PAGODA_RETURN_IF_ERROR(r.read(&version_, "version"));
  if (version_ == 1) return unsupported("GGUF version 1 is obsolete; convert the file to v3");
  if (version_ != 2 && version_ != 3) {
    // A big-endian file shows its version byte-swapped.
    if ((version_ & 0xffff) == 0 && version_ != 0)
      return unsupported("big-endian GGUF files are not supported");
    return unsupported(str_format("unknown GGUF version %u (supported: 2, 3)", version_));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  PAGODA_RETURN_IF_ERROR(r.read(&n_tensors, "tensor count"));
  PAGODA_RETURN_IF_ERROR(r.read(&n_kv, "metadata count"));
  // A key-value pair needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info
  // at least 8 + 4 + 4 + 8 bytes.
  if (n_kv > r.remaining() / 13)
    return corrupt(str_format("metadata count %" PRIu64
                              " cannot fit in a %zu-byte file: the file is truncated or corrupt",
                              n_kv, size_));
  if (n_tensors > r.remaining() / 24)
    return corrupt(str_format("tensor count %" PRIu64
                              " cannot fit in a %zu-byte file: the file is truncated or corrupt",
                              n_tensors, size_));

  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string_view key;
    PAGODA_RETURN_IF_ERROR(r.read_string(&key, "metadata key", kMaxNameLength));
    std::string key_s(key);
    uint32_t type = 0;
    PAGODA_RETURN_IF_ERROR(r.read(&type, "metadata type"));
    if (!valid_type(type))
      return corrupt(str_format("metadata '%s' has unknown value type %u", key_s.c_str(), type));
    GgufValue v;
    PAGODA_RETURN_IF_ERROR(read_value(r, static_cast<GgufType>(type), &v, 0, key_s));
    if (kv_index_.count(key_s)) return corrupt("duplicate metadata key '" + key_s + "'");
    kv_index_.emplace(key_s, kv_.size());
    kv_.emplace_back(std::move(key_s), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    const auto al = a->as_int();
    if (!al || *al <= 0 || *al > (1 << 30) || (*al & (*al - 1)) != 0)
      return corrupt("general.alignment must be a power of two, got " + a->to_string());
    alignment_ = static_cast<uint32_t>(*al);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    std::string_view name;
    PAGODA_RETURN_IF_ERROR(r.read_string(&name, "tensor name", kMaxNameLength));
    t.name = std::string(name);
    uint32_t n_dims = 0;
    PAGODA_RETURN_IF_ERROR(r.read(&n_dims, "tensor dimension count"));
    if (n_dims > kMaxDims)
      return corrupt(str_format("tensor '%s' has %u dimensions (at most %d)", t.name.c_str(),
                                n_dims, kMaxDims));
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&ne, "tensor dimension"));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return corrupt(str_format("tensor '%s' has a negative dimension", t.name.c_str()));
      t.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type = 0;
    PAGODA_RETURN_IF_ERROR(r.read(&type, "tensor type"));
    const DTypeInfo* info = type < kFirstInternalDType ? dtype_info(type) : nullptr;
    if (info == nullptr && unhandled_ggml_type_name(type) != nullptr)
      return unsupported(str_format("tensor '%s' has type %s: %s weights are not supported yet",
                                    t.name.c_str(), unhandled_ggml_type_name(type),
                                    unhandled_ggml_type_name(type)));
    if (info == nullptr)
      return unsupported(
          str_format("tensor '%s' has unknown or unsupported type id %u", t.name.c_str(), type));
    t.type = static_cast<DType>(type);
    PAGODA_RETURN_IF_ERROR(r.read(&t.offset, "tensor offset"));
    // Element count and byte size, refusing anything that overflows 63 bits.
    uint64_t n = 1;
    for (int d = 0; d < kMaxDims; ++d) {
      const auto ne = static_cast<uint64_t>(t.ne[d]);
      if (ne != 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne)
        return corrupt(
            str_format("tensor '%s' has an element count that overflows", t.name.c_str()));
      n *= ne;
    }
    if (t.ne[0] % info->block_elems != 0)
      return corrupt(str_format(
          "tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %u",
          t.name.c_str(), t.ne[0], std::string(info->name).c_str(), info->block_elems));
    t.size = n / info->block_elems * info->block_bytes;
    if (t.offset % alignment_ != 0)
      return corrupt(str_format("tensor '%s' offset %" PRIu64 " is not aligned to %u",
                                t.name.c_str(), t.offset, alignment_));
    if (tensor_index_.count(t.name)) return corrupt("duplicate tensor name '" + t.name + "'");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next aligned offset after the header.
  const uint64_t header_end = r.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > size_)
    return corrupt("file truncated: no data section after the tensor table");
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.size > data_size - t.offset)
      return corrupt(str_format("tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64
                                ") runs past the end of the file (data section is %" PRIu64
                                " bytes): the file is truncated or corrupt",
                                t.name.c_str(), t.size, t.offset, data_size));
  }
  return Status::ok();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_float() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufType::kBool) return std::nullopt;
  return v->i != 0;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufType::kString) return std::nullopt;
  return v->str;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string shape_text(const int64_t* ne, int n_dims) {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

std::string tensor_shape(const GgufTensorInfo& t) {
  return shape_text(t.ne, t.n_dims);
}

Status check_shape(const std::string& label, const int64_t* ne, int n_dims,
                   const std::vector<int64_t>& shape) {
  bool ok = true;
  for (int d = 0; d < 4; ++d) {
    const int64_t want = d < static_cast<int>(shape.size()) ? shape[static_cast<size_t>(d)] : 1;
    if (ne[d] != want) ok = false;
  }
  if (ok) return Status::ok();
  return corrupt(label + " has shape " + shape_text(ne, n_dims) + ", expected " +
                 shape_text(shape.data(), static_cast<int>(shape.size())));
}

Result<const GgufTensorInfo*> GgufFile::find_tensor(const std::string& name,
                                                    const std::vector<int64_t>& shape) const {
  const GgufTensorInfo* t = find_tensor(std::string_view(name));
  if (t == nullptr) return not_found("model file has no tensor '" + name + "'");
  PAGODA_RETURN_IF_ERROR(check_shape("tensor '" + name + "'", t->ne, t->n_dims, shape));
  return t;
}

}  // namespace pagoda
