#include "engine/fault_injection.h"

#include <cstdlib>

namespace pagoda {

Result<FaultPlan> parse_fault_plan(const std::string& spec) {
  FaultPlan plan;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* stop = nullptr;
    const long long n = std::strtoll(value.c_str(), &stop, 10);
    if (value.empty() || *stop != '\0' || n < 0)
      return invalid_argument(std::string(kFaultInjectEnv) + ": '" + item +
                              "' needs a count >= 0, as in forward_fail_after=3");
    if (key == "forward_fail_after")
      plan.forward_fail_after = n;
    else if (key == "forward_fail_count")
      plan.forward_fail_count = n;
    else
      return invalid_argument(std::string(kFaultInjectEnv) + ": unknown fault '" + key +
                              "' (known: forward_fail_after, forward_fail_count)");
  }
  return plan;
}

Status FaultInjectingRunner::next_pass() {
  const int64_t pass = ++passes_;  // 1-based
  if (plan_.active() && pass > plan_.forward_fail_after &&
      (plan_.forward_fail_count == 0 ||
       pass <= plan_.forward_fail_after + plan_.forward_fail_count))
    return internal_error(str_format("injected fault: forward pass %lld failed (%s)",
                                     static_cast<long long>(pass), kFaultInjectEnv));
  return Status::ok();
}

Status FaultInjectingRunner::forward(const Batch& batch, const StepOutput& out) {
  PAGODA_RETURN_IF_ERROR(next_pass());
  return inner_.forward(batch, out);
}

}  // namespace pagoda
