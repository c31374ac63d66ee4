#include "core/log.h"

#include <atomic>
#include <cstdio>

namespace pagoda {
namespace {

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};  // set_log_level: PAGODA_LOG
  return level;
}

}  // namespace

LogLevel log_level() {
  return static_cast<LogLevel>(level_storage().load());
}
void set_log_level(LogLevel level) {
  level_storage().store(static_cast<int>(level));
}

void log_message(LogLevel level, const std::string& message) {
  if (level < log_level()) return;
  static const char* const kNames[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "pagoda %s: %s\n", kNames[static_cast<int>(level)], message.c_str());
}

}  // namespace pagoda
