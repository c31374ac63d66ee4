// Minimal leveled logging to stderr. PAGODA_LOG=debug|info|warn|error|silent sets the level.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace pagoda {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kSilent = 4 };

// The levels by name, as PAGODA_LOG takes them.
inline constexpr std::pair<const char*, LogLevel> kLogLevelNames[] = {
    {"debug", LogLevel::kDebug},
    {"info", LogLevel::kInfo},
    {"warn", LogLevel::kWarn},
    {"error", LogLevel::kError},
    {"silent", LogLevel::kSilent}};
inline std::optional<LogLevel> log_level_named(std::string_view name) {
  for (const auto& [n, level] : kLogLevelNames)
    if (name == n) return level;
  return std::nullopt;
}

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, const std::string& message);

inline void log_debug(const std::string& m) {
  log_message(LogLevel::kDebug, m);
}
inline void log_info(const std::string& m) {
  log_message(LogLevel::kInfo, m);
}
inline void log_warn(const std::string& m) {
  log_message(LogLevel::kWarn, m);
}
inline void log_error(const std::string& m) {
  log_message(LogLevel::kError, m);
}

}  // namespace pagoda
