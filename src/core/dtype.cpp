#include "core/dtype.h"

#include <cctype>
#include <string>

namespace pagoda {
namespace {

struct Entry {
  uint32_t id;
  DTypeInfo info;
};

constexpr Entry kTypes[] = {
    {0, {"F32", 1, 4}},           {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},        {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},        {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},     {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},     {15, {"Q8_K", 256, 292}},   {24, {"I8", 1, 1}},
    {25, {"I16", 1, 2}},          {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},          {30, {"BF16", 1, 2}},       {20, {"IQ4_NL", 32, 18}},
    {23, {"IQ4_XS", 256, 136}},   {39, {"MXFP4", 32, 17}},    {1000, {"NF4", 32, 18}},
    {1001, {"FP8_E4M3", 32, 36}}, {1002, {"Q4_G64", 64, 36}}, {1003, {"Q4_G128", 128, 68}},
};

// ggml type ids with no entry above (ggml.h's enum ggml_type).
struct Unhandled {
  uint32_t id;
  const char* name;
};
constexpr Unhandled kUnhandled[] = {
    {4, "Q4_2"},   {5, "Q4_3"},   {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"},
    {19, "IQ1_S"}, {21, "IQ3_S"}, {22, "IQ2_S"},   {29, "IQ1_M"},  {34, "TQ1_0"},
    {35, "TQ2_0"}, {40, "NVFP4"}, {41, "Q1_0"},
};

}  // namespace

const char* unhandled_ggml_type_name(uint32_t id) {
  for (const Unhandled& u : kUnhandled)
    if (u.id == id) return u.name;
  return nullptr;
}

const DTypeInfo* dtype_info(uint32_t id) {
  for (const Entry& e : kTypes)
    if (e.id == id) return &e.info;
  return nullptr;
}

bool parse_dtype(std::string_view name, DType* out) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Entry& e : kTypes) {
    if (e.info.name == upper && e.id < kFirstInternalDType) {
      *out = static_cast<DType>(e.id);
      return true;
    }
  }
  return false;
}

}  // namespace pagoda
