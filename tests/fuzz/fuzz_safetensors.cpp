// libFuzzer target: arbitrary bytes as a .safetensors file and, split at the first NUL, as
// a model.safetensors.index.json. Any crash, sanitizer report or runaway allocation is a
// bug; errors are the expected outcome for almost every input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = pagoda::SafetensorsFile::parse(data, size, "fuzz.safetensors");
  if (file.is_ok()) {
    // Every accepted tensor lies inside the buffer: touch its first and last byte.
    volatile uint8_t sink = 0;
    for (const auto& t : (*file)->tensors()) {
      if (t.end == t.begin) continue;
      sink = sink + (*file)->tensor_data(t)[0] + (*file)->tensor_data(t)[t.end - t.begin - 1];
      (void)t.n_elements();
    }
  }
  const void* nul = std::memchr(data, 0, size);
  const size_t n = nul ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - data) : size;
  (void)pagoda::parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), n),
                                        "fuzz.index.json");
  return 0;
}
