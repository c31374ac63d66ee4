#include "core/log.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace pagoda {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("PAGODA_LOG");
  if (v == nullptr) return LogLevel::kWarn;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "silent") == 0) return LogLevel::kSilent;
  return LogLevel::kWarn;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
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
