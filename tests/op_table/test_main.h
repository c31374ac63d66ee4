// What the test binaries' main() shares: timing suites (names starting with "Perf") run
// only when the filter names them (--gtest_filter='Perf*'), so the default run and
// ctest's discovery leave them out.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace pagoda::optest {

inline void exclude_perf_unless_named() {
#ifdef GTEST_FLAG_GET
  std::string f = GTEST_FLAG_GET(filter);
#else
  std::string f = ::testing::GTEST_FLAG(filter);
#endif
  if (f.find("Perf") != std::string::npos) return;
  f += f.find('-') == std::string::npos ? "-Perf*" : ":Perf*";
#ifdef GTEST_FLAG_SET
  GTEST_FLAG_SET(filter, f);
#else
  ::testing::GTEST_FLAG(filter) = f;
#endif
}

}  // namespace pagoda::optest
