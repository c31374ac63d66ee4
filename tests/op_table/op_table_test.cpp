// The op table (op_table.h) as GoogleTest cases, one per (backend, case):
//   OpTable/OpTest.MatchesReference/<backend>_<case>   the backend against the reference
//   PerfOps/OpPerf.Time/<backend>_<case>              one line of timings (not in the
//                                                    default run: --gtest_filter='PerfOps*')
// A case a backend does not run is skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "op_table.h"

namespace pagoda::optest {
namespace {

struct Param {
  std::string backend;
  size_t index;
};

// Inputs and reference of a case, made once per run and shared by the backends.
const OpInputs& inputs(size_t i) {
  static std::map<size_t, OpInputs> cache;
  auto it = cache.find(i);
  if (it == cache.end()) it = cache.emplace(i, make_inputs(op_cases()[i])).first;
  return it->second;
}
const std::vector<double>& expected(size_t i) {
  static std::map<size_t, std::vector<double>> cache;
  auto it = cache.find(i);
  if (it == cache.end()) it = cache.emplace(i, reference(op_cases()[i], inputs(i))).first;
  return it->second;
}

std::vector<Param> params(bool with_reference) {
  std::vector<Param> v;
  for (const std::string& b : op_backend_names()) {
    if (b == "ref" && !with_reference) continue;  // the expected values themselves
    for (size_t i = 0; i < op_cases().size(); ++i) v.push_back({b, i});
  }
  return v;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return info.param.backend + "_" + op_cases()[info.param.index].name;
}

bool verbose() {
  static const bool v = std::getenv("PAGODA_TEST_VERBOSE") != nullptr;
  return v;
}

class OpTest : public ::testing::TestWithParam<Param> {};

TEST_P(OpTest, MatchesReference) {
  const Param& p = GetParam();
  const OpCase& c = op_cases()[p.index];
  OpBackend* b = op_backend(p.backend);
  ASSERT_NE(b, nullptr) << p.backend;
  const std::string why = b->skip_reason(c);
  if (!why.empty()) GTEST_SKIP() << p.backend << " does not run " << c.name << ": " << why;
  auto prepared = b->prepare(c, inputs(p.index));
  ASSERT_TRUE(prepared.is_ok()) << prepared.status().message();
  const Status s = (*prepared)->run();
  ASSERT_TRUE(s.is_ok()) << s.message();
  auto out = (*prepared)->output();
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const std::vector<double>& ref = expected(p.index);
  ASSERT_EQ(out->size(), ref.size());
  const double err = nmse(out->data(), ref.data(), ref.size());
  RecordProperty("nmse", std::to_string(err));
  EXPECT_LE(err, c.tol) << p.backend << " " << op_name(c.op) << " " << c.name << ": nmse " << err
                        << " > bound " << c.tol;
  if (verbose())
    std::printf("  %-12s %-44s nmse %.3g (bound %.0e)\n", p.backend.c_str(), c.name.c_str(), err,
                c.tol);
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpTest, ::testing::ValuesIn(params(false)), param_name);

// Timings: the median of PAGODA_OP_PERF_REPS calls (default 20) after two warm-ups, as
// the time of one call, the bytes of weights, activations and KV it reads and writes
// per second, and for products and attention GFLOP/s.
class OpPerf : public ::testing::TestWithParam<Param> {};

TEST_P(OpPerf, Time) {
  const Param& p = GetParam();
  const OpCase& c = op_cases()[p.index];
  OpBackend* b = op_backend(p.backend);
  ASSERT_NE(b, nullptr) << p.backend;
  const std::string why = b->skip_reason(c);
  if (!why.empty()) GTEST_SKIP() << p.backend << " does not run " << c.name << ": " << why;
  const char* env = std::getenv("PAGODA_OP_PERF_REPS");
  const int reps = env ? std::max(1, std::atoi(env)) : 20;
  auto prepared = b->prepare(c, inputs(p.index));
  ASSERT_TRUE(prepared.is_ok()) << prepared.status().message();
  const double ms = (*prepared)->median_ms(reps);
  const double flops = case_flops(c);
  std::printf("perf %-12s %-9s %-40s %11.2f us %9.2f GB/s", p.backend.c_str(), op_name(c.op),
              c.name.c_str(), ms * 1e3, case_bytes(c) / ms / 1e6);
  if (flops > 0) std::printf(" %10.1f GFLOP/s", flops / ms / 1e6);
  std::printf("\n");
}

INSTANTIATE_TEST_SUITE_P(PerfOps, OpPerf, ::testing::ValuesIn(params(true)), param_name);

}  // namespace
}  // namespace pagoda::optest
