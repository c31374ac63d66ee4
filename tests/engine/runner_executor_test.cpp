// The backend-neutral path (ModelRunner, RunnerExecutor, RunnerSession) over the CPU
// model gives exactly what the CPU executor and Session give: the CUDA backend plugs
// into the engine through the same adapter.
#include <gtest/gtest.h>

#include "engine/runner_executor.h"
#include "engine/runner_session.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/gguf.h"

namespace pagoda {
namespace {

const std::string kModel = std::string(PAGODA_SHARED_DIR) + "/models/stories260K.gguf";

TEST(RunnerExecutor, MatchesCpuExecutorAndSession) {
  auto file = GgufFile::open(kModel);
  ASSERT_TRUE(file) << file.status().message();
  auto model = Model::load(**file);
  ASSERT_TRUE(model) << model.status().message();
  const int V = (*model)->config().n_vocab;
  ThreadPool pool(2);
  RunnerOptions o;
  o.n_kv_blocks = 8;
  CpuExecutor cpu(**model, pool, o.n_kv_blocks, o.kv_block_size);
  RunnerExecutor run(make_cpu_runner(**model, pool, o));
  EXPECT_EQ(run.n_vocab(), V);
  const std::vector<int32_t> table = {3, 1, 7, 0};
  Batch b;
  b.tokens = {1, 403, 407, 261, 378, 5, 9};
  b.seqs.push_back({0, 7, 0, table.data()});
  b.logit_rows = {6, 2};
  std::vector<float> a(2 * static_cast<size_t>(V)), c(a.size());
  ASSERT_TRUE(cpu.execute(b, a.data()));
  ASSERT_TRUE(run.execute(b, c.data()));
  EXPECT_EQ(a, c);
  // Copy-on-write: block 3 to 5, then a step through the copy sees the same context.
  cpu.copy_blocks({{3, 5}});
  run.copy_blocks({{3, 5}});
  const std::vector<int32_t> table2 = {5, 1};
  Batch d;
  d.tokens = {42};
  d.seqs.push_back({0, 1, 7, table2.data()});
  d.logit_rows = {0};
  ASSERT_TRUE(cpu.execute(d, a.data()));
  ASSERT_TRUE(run.execute(d, c.data()));
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + V, c.begin()));
  // A bad copy is reported by the next step.
  run.copy_blocks({{3, 99}});
  EXPECT_FALSE(run.execute(d, c.data()));
  EXPECT_TRUE(run.execute(d, c.data()));

  // RunnerSession and Session: the same greedy tokens.
  Session s1(**model, pool, 64);
  RunnerSession s2(run.runner(), 64, o.kv_block_size);
  std::vector<float> l1, l2;
  ASSERT_TRUE(s1.eval({1, 403, 407}, false, &l1));
  ASSERT_TRUE(s2.eval({1, 403, 407}, false, &l2));
  EXPECT_EQ(l1, l2);
  int32_t greedy = -1;
  Batch g;
  g.tokens = {9};
  const std::vector<int32_t> t0 = {0, 1, 2, 3};
  g.seqs.push_back({0, 1, 3, t0.data()});
  g.logit_rows = {0};
  ASSERT_TRUE(run.runner().forward_greedy(g, &greedy));
  ASSERT_TRUE(s1.eval({9}, false, &l1));
  EXPECT_EQ(greedy, argmax(l1.data(), V));
}

}  // namespace
}  // namespace pagoda
