#include "core/device.h"

#include <string>

namespace pagoda {

Result<DeviceSpec> parse_device_spec(std::string_view text) {
  if (text == "cpu") return DeviceSpec{DeviceKind::kCpu, 0};
  if (text == "cuda") return DeviceSpec{DeviceKind::kCuda, 0};
  constexpr std::string_view kPrefix = "cuda:";
  constexpr size_t kMaxDigits = 4;  // far more GPUs than one host holds, and no overflow
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = text.substr(kPrefix.size());
    bool ok = !digits.empty() && digits.size() <= kMaxDigits;
    int index = 0;
    for (char c : digits) {
      ok = ok && c >= '0' && c <= '9';
      index = index * 10 + (c - '0');
    }
    if (ok) return DeviceSpec{DeviceKind::kCuda, index};
  }
  return invalid_argument("--device must be cpu, cuda or cuda:N, not '" + std::string(text) + "'");
}

}  // namespace pagoda
