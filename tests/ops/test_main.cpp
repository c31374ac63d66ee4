// main() of pagoda_tests: GoogleTest's, with the timing suites (PerfOps: the op table's
// perf mode) left out unless the filter names them.
#include <gtest/gtest.h>

#include "../op_table/test_main.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  pagoda::optest::exclude_perf_unless_named();
  return RUN_ALL_TESTS();
}
