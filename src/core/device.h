// Which device a command or the engine runs on, spelled one way everywhere: "cpu", "cuda"
// (GPU 0) or "cuda:N".
#pragma once

#include <string_view>

#include "core/status.h"

namespace pagoda {

enum class DeviceKind { kCpu, kCuda };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // the GPU, for kCuda
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
};

// "cpu", "cuda" or "cuda:N" (N a GPU index); anything else is an error that names these.
Result<DeviceSpec> parse_device_spec(std::string_view text);

}  // namespace pagoda
