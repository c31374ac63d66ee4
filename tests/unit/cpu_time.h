// Time bounds for unit tests that check a limit stops runaway work: measured in this
// thread's CPU time (so they hold on a busy machine) and scaled for sanitized builds.
#pragma once

#include <time.h>

namespace pagoda::test {

// CPU time of the calling thread, in seconds.
inline double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// AddressSanitizer slows this code about five times (measured on the tokenizer).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr double kSlowdown = 5;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr double kSlowdown = 5;
#else
inline constexpr double kSlowdown = 1;
#endif
#else
inline constexpr double kSlowdown = 1;
#endif

}  // namespace pagoda::test
