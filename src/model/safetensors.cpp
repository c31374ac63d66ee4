#include "model/safetensors.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace pagoda {
namespace {

using nlohmann::json;

constexpr size_t kMaxDims = 16;
// More than any checkpoint holds; a header listing more is refused before it is stored.
constexpr size_t kMaxTensors = 1 << 20;

struct DtypeDesc {
  std::string_view name;
  uint32_t bytes;
  std::optional<DType> type;
};
// The safetensors dtypes of whole bytes (the sub-byte F4/F6 types are refused by name).
constexpr DtypeDesc kDtypes[] = {
    {"BOOL", 1, std::nullopt},    {"U8", 1, std::nullopt},      {"I8", 1, DType::kI8},
    {"F8_E5M2", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E8M0", 1, std::nullopt},
    {"I16", 2, DType::kI16},      {"U16", 2, std::nullopt},     {"F16", 2, DType::kF16},
    {"BF16", 2, DType::kBF16},    {"I32", 4, DType::kI32},      {"U32", 4, std::nullopt},
    {"F32", 4, DType::kF32},      {"F64", 8, DType::kF64},      {"I64", 8, DType::kI64},
    {"U64", 8, std::nullopt},
};

const DtypeDesc* find_dtype(std::string_view name) {
  for (const DtypeDesc& d : kDtypes)
    if (d.name == name) return &d;
  return nullptr;
}

// a * b, or nullopt past 2^63 - 1.
std::optional<uint64_t> mul_checked(uint64_t a, uint64_t b) {
  if (a != 0 && b > static_cast<uint64_t>(INT64_MAX) / a) return std::nullopt;
  return a * b;
}

}  // namespace

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked at parse
  return n;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  PAGODA_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->data_ = map->data();
  f->size_ = map->size();
  f->map_ = std::move(map);
  f->path_ = path;
  PAGODA_RETURN_IF_ERROR(f->parse_header());
  return f;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                                const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->data_ = data;
  f->size_ = size;
  f->path_ = name;
  PAGODA_RETURN_IF_ERROR(f->parse_header());
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::parse_header() {
  const std::string where = "'" + path_ + "'";
  if (size_ < 8)
    return corrupt(where + " is too short for a safetensors header (" + std::to_string(size_) +
                   " bytes)");
  uint64_t n = 0;
  std::memcpy(&n, data_, 8);  // little-endian, as x86 and the format are
  if (n > kSafetensorsMaxHeader)
    return corrupt(str_format("%s: a safetensors header of %" PRIu64
                              " bytes is over the cap of %" PRIu64,
                              where.c_str(), n, kSafetensorsMaxHeader));
  if (n > size_ - 8)
    return corrupt(str_format("%s is truncated: its header of %" PRIu64
                              " bytes runs past the end of the file (%zu bytes)",
                              where.c_str(), n, size_));
  data_offset_ = 8 + n;
  const uint64_t data_size = size_ - data_offset_;
  const char* text = reinterpret_cast<const char*>(data_ + 8);
  const json h = json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return corrupt(where + ": the safetensors header is not valid JSON");
  if (!h.is_object()) return corrupt(where + ": the safetensors header is not a JSON object");
  if (h.size() > kMaxTensors) return corrupt(where + ": the header lists too many tensors");

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return corrupt(where + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return corrupt(where + ": __metadata__ entry '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = where + ": tensor '" + name + "'";
    if (!v.is_object()) return corrupt(what + " is not described by an object");
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return corrupt(what + " has no dtype string");
    if (sh == v.end() || !sh->is_array()) return corrupt(what + " has no shape array");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      return corrupt(what + " has no data_offsets pair");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = dt->get<std::string>();
    const DtypeDesc* d = find_dtype(t.dtype);
    if (d == nullptr) return unsupported(what + " has dtype '" + t.dtype + "', unknown to Pagoda");
    t.type = d->type;
    if (sh->size() > kMaxDims) return corrupt(what + " has more than 16 dimensions");
    uint64_t elems = 1;
    for (const json& e : *sh) {
      if (!e.is_number_unsigned() || e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return corrupt(what + " has a shape entry that is not a non-negative integer");
      const uint64_t dim = e.get<uint64_t>();
      const auto m = mul_checked(elems, dim);
      if (!m) return corrupt(what + " has a shape whose element count overflows");
      elems = *m;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto bytes = mul_checked(elems, d->bytes);
    if (!bytes) return corrupt(what + " has a shape whose byte count overflows");
    for (const json& e : *off)
      if (!e.is_number_unsigned()) return corrupt(what + " has data_offsets that are not integers");
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      return corrupt(str_format("%s: data_offsets [%" PRIu64 ", %" PRIu64
                                ") lie outside the data section of %" PRIu64 " bytes",
                                what.c_str(), t.begin, t.end, data_size));
    if (t.end - t.begin != *bytes)
      return corrupt(str_format("%s: data_offsets span %" PRIu64 " bytes, but %s x %" PRIu64
                                " elements are %" PRIu64 " bytes",
                                what.c_str(), t.end - t.begin, t.dtype.c_str(), elems, *bytes));
    index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // No two tensors may share a byte: a file that aliases them is malformed.
  std::vector<const SafetensorsTensor*> order;
  for (const SafetensorsTensor& t : tensors_)
    if (t.end > t.begin) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    return a->begin < b->begin;
  });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      return corrupt(where + ": tensors '" + order[i - 1]->name + "' and '" + order[i]->name +
                     "' overlap");
  return Status::ok();
}

Result<SafetensorsIndex> parse_safetensors_index(std::string_view text, const std::string& where) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt("'" + where + "' is not a JSON object");
  const auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty())
    return corrupt("'" + where + "' has no weight_map");
  SafetensorsIndex idx;
  std::set<std::string> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      return corrupt("'" + where + "': the shard of '" + it.key() + "' is not a string");
    const std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == ".." ||
        shard.find('\0') != std::string::npos)
      return corrupt("'" + where + "': the shard of '" + it.key() + "' ('" + shard +
                     "') is not a plain file name in the folder");
    idx.weight_map[it.key()] = shard;
    shards.insert(shard);
  }
  idx.shards.assign(shards.begin(), shards.end());
  if (const auto md = j.find("metadata"); md != j.end() && md->is_object()) {
    if (const auto ts = md->find("total_size");
        ts != md->end() && ts->is_number_unsigned() && ts->get<uint64_t>() <= INT64_MAX)
      idx.total_size = static_cast<int64_t>(ts->get<uint64_t>());
  }
  return idx;
}

int safetensors_dtype_bytes(std::string_view dtype) {
  const DtypeDesc* d = find_dtype(dtype);
  return d ? static_cast<int>(d->bytes) : 0;
}

}  // namespace pagoda
