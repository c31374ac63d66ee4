// The step loop, scheduler and KV manager driven with the fake model: budgets, preemption,
// aborts, prefix caching, priorities, n > 1 with copy-on-write.
#include "engine/engine_core.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "fake_runner.h"

namespace pagoda {
namespace {

using testing::fake_greedy;
using testing::FakeRunner;

constexpr int32_t kVocab = 97;

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  RequestMetrics metrics;
  int finished = 0;
};

struct Harness {
  Harness(int n_blocks, int max_seqs, int budget, bool caching = true,
          sched::Policy policy = sched::Policy::kFcfs, int64_t max_len = 4096, bool async = false)
      : runner(n_blocks, 16, kVocab) {
    EngineCoreConfig c;
    c.n_blocks = n_blocks;
    c.block_size = 16;
    c.enable_prefix_caching = caching;
    c.sched.max_num_seqs = max_seqs;
    c.sched.max_num_batched_tokens = budget;
    c.sched.max_model_len = max_len;
    c.sched.policy = policy;
    c.async_scheduling = async;
    core = std::make_unique<EngineCore>(c, runner, nullptr);
  }
  Status add(const std::string& id, const std::vector<int32_t>& prompt, int max_tokens,
             int priority = 0, SamplingParams p = greedy()) {
    p.max_tokens = max_tokens;
    return core->add_request(id, prompt, p, priority, 0.0);
  }
  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0;
    return p;
  }
  void collect(const std::vector<RequestOutput>& outs) {
    for (const RequestOutput& o : outs) {
      Outcome& r = get(o.request_id, o.index);
      r.tokens.insert(r.tokens.end(), o.token_ids.begin(), o.token_ids.end());
      if (o.finished) {
        r.reason = o.finish_reason;
        r.metrics = o.metrics;
        r.finished++;
        finish_order.push_back(o.request_id);
      }
    }
  }
  // Steps until idle; checks the pool's invariants after every step.
  void run(int max_steps = 100000) {
    for (int i = 0; i < max_steps && core->has_work(); ++i) {
      std::vector<RequestOutput> outs;
      core->step(&outs);
      collect(outs);
    }
    ASSERT_FALSE(core->has_work()) << "did not finish";
  }
  Outcome& get(const std::string& id, int index) { return results[{id, index}]; }
  bool pool_whole() const { return core->kv().num_free_blocks() == core->kv().n_blocks(); }

  FakeRunner runner;
  std::unique_ptr<EngineCore> core;
  std::map<std::pair<std::string, int>, Outcome> results;
  std::vector<std::string> finish_order;
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int len) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % kVocab);
  return p;
}

// The step and model-run times: every step is counted, and the model run is part of it.
TEST(EngineCore, StatsSplitStepTimeIntoModelRunAndHost) {
  Harness h(64, 8, 64);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(h.add("r" + std::to_string(i), {1, 2, 3, 4, 5}, 6));
  h.run();
  const EngineStats s = h.core->stats();
  EXPECT_GT(s.steps, 0);
  EXPECT_GT(s.execute_s, 0.0);
  EXPECT_GE(s.step_s, s.execute_s);
}

TEST(EngineCore, TokenBudgetAndSeqLimitHoldEveryStep) {
  Harness h(/*n_blocks=*/400, /*max_seqs=*/6, /*budget=*/48);
  std::mt19937 rng(1);
  std::map<std::string, std::pair<std::vector<int32_t>, int>> want;
  for (int i = 0; i < 20; ++i) {
    const auto p = random_prompt(rng, 1 + static_cast<int>(rng() % 120));
    const int n = 1 + static_cast<int>(rng() % 30);
    const std::string id = "r" + std::to_string(i);
    ASSERT_TRUE(h.add(id, p, n));
    want[id] = {p, n};
  }
  h.run();
  ASSERT_FALSE(h.runner.step_tokens.empty());
  for (size_t i = 0; i < h.runner.step_tokens.size(); ++i) {
    EXPECT_LE(h.runner.step_tokens[i], 48) << "step " << i;
    EXPECT_LE(h.runner.step_seqs[i], 6) << "step " << i;
  }
  // Chunked prefill must have happened (prompts up to 120 tokens, budget 48).
  EXPECT_TRUE(std::count(h.runner.step_tokens.begin(), h.runner.step_tokens.end(), 48) > 0);
  for (const auto& [id, pn] : want) {
    const Outcome& r = h.get(id, 0);
    EXPECT_EQ(r.tokens, fake_greedy(pn.first, pn.second, kVocab)) << id;
    EXPECT_EQ(r.reason, FinishReason::kLength);
  }
  EXPECT_TRUE(h.pool_whole());
}

TEST(EngineCore, PreemptionThenResumptionGivesTheSameOutput) {
  // 20 blocks of 16 tokens for 8 requests that each grow to ~100 tokens: the pool runs
  // out while they decode, so some are preempted and recomputed.
  Harness h(/*n_blocks=*/20, /*max_seqs=*/8, /*budget=*/256, /*caching=*/false);
  std::mt19937 rng(2);
  std::map<std::string, std::pair<std::vector<int32_t>, int>> want;
  for (int i = 0; i < 8; ++i) {
    const auto p = random_prompt(rng, 20 + i * 3);
    const std::string id = "p" + std::to_string(i);
    ASSERT_TRUE(h.add(id, p, 80));
    want[id] = {p, 80};
  }
  h.run();
  EXPECT_GT(h.core->stats().preemptions, 0);
  int preempted = 0;
  for (const auto& [id, pn] : want) {
    const Outcome& r = h.get(id, 0);
    EXPECT_EQ(r.tokens, fake_greedy(pn.first, pn.second, kVocab)) << id;
    preempted += r.metrics.preemptions > 0;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_TRUE(h.pool_whole());
}

TEST(EngineCore, DeviceGreedyPathGivesTheSameTokensAndStepsAsideForSampling) {
  // The runner picks greedy tokens itself (as the CUDA runner does) when every sampled
  // row of a step is plain greedy; a sampled request or one asking for logprobs in the
  // step sends the whole step through the logits path. Outputs must not change.
  for (bool mixed : {false, true}) {
    Harness h(/*n_blocks=*/24, /*max_seqs=*/8, /*budget=*/64, /*caching=*/true);
    h.runner.greedy = true;
    std::mt19937 rng(5);
    std::map<std::string, std::pair<std::vector<int32_t>, int>> want;
    for (int i = 0; i < 8; ++i) {
      const auto p = random_prompt(rng, 10 + i * 5);
      const std::string id = "g" + std::to_string(i);
      ASSERT_TRUE(h.add(id, p, 60));
      want[id] = {p, 60};
    }
    if (mixed) {
      SamplingParams lp = Harness::greedy();
      lp.logprobs = 2;
      ASSERT_TRUE(h.add("lp", random_prompt(rng, 12), 30, 0, lp));
      SamplingParams pen = Harness::greedy();
      pen.repetition_penalty = 1.3f;
      ASSERT_TRUE(h.add("pen", random_prompt(rng, 12), 30, 0, pen));
    }
    h.run();
    for (const auto& [id, pn] : want)
      EXPECT_EQ(h.get(id, 0).tokens, fake_greedy(pn.first, pn.second, kVocab)) << id;
    EXPECT_GT(h.core->stats().preemptions, 0);  // resumption runs through the greedy path too
    EXPECT_GT(h.runner.greedy_steps, 0);
    if (mixed)  // some steps carried the logprobs/penalty requests: not all were greedy
      EXPECT_LT(static_cast<size_t>(h.runner.greedy_steps), h.runner.step_tokens.size());
    else
      EXPECT_EQ(static_cast<size_t>(h.runner.greedy_steps), h.runner.step_tokens.size());
    EXPECT_TRUE(h.pool_whole());
  }
}

TEST(EngineCore, DeviceSamplingGetsThePenaltiesAndDrawsOfTheHostSampler) {
  // Greedy requests with penalties are drawn on the "device" from the penalty list the
  // engine sends (the fake applies it as the CUDA kernel does): the tokens must be the
  // CPU sampler's, which applies its own bookkeeping to the logits.
  std::mt19937 rng(6);
  std::vector<std::pair<std::vector<int32_t>, SamplingParams>> reqs;
  for (int i = 0; i < 6; ++i) {
    SamplingParams sp = Harness::greedy();
    sp.repetition_penalty = i % 3 == 0 ? 1.0f : 1.3f;
    sp.presence_penalty = i % 2 == 0 ? 0.3f : 0.0f;
    sp.frequency_penalty = i % 3 == 2 ? 0.0f : 0.2f;
    reqs.emplace_back(random_prompt(rng, 8 + 3 * i), sp);
  }
  SamplingParams small = Harness::greedy();  // a token repeats before it is overtaken,
  small.frequency_penalty = 0.15f;           // so output counts above 1 matter
  reqs.emplace_back(random_prompt(rng, 20), small);
  const auto len = [&](size_t i) { return i + 1 == reqs.size() ? 150 : 40; };
  Harness host(/*n_blocks=*/40, /*max_seqs=*/8, /*budget=*/64, /*caching=*/false);
  Harness dev(40, 8, 64, false);
  dev.runner.sampling = true;
  for (Harness* h : {&host, &dev})
    for (size_t i = 0; i < reqs.size(); ++i)
      ASSERT_TRUE(h->add("p" + std::to_string(i), reqs[i].first, len(i), 0, reqs[i].second));
  host.run();
  dev.run();
  EXPECT_EQ(host.runner.sampling_steps, 0);
  EXPECT_EQ(static_cast<size_t>(dev.runner.sampling_steps), dev.runner.step_tokens.size());
  int penalised = 0;  // requests whose penalties changed some token (the test has teeth)
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string id = "p" + std::to_string(i);
    EXPECT_EQ(dev.get(id, 0).tokens, host.get(id, 0).tokens) << id;
    penalised += dev.get(id, 0).tokens != fake_greedy(reqs[i].first, len(i), kVocab);
  }
  EXPECT_GE(penalised, 3);

  // Temperature > 0: the engine hands over one uniform per draw from the request's own
  // generator, so a seed repeats its tokens and the draws vary along the way.
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  sp.seed = 99;
  std::vector<std::vector<int32_t>> runs;
  for (int run = 0; run < 2; ++run) {
    Harness h(40, 4, 64, false);
    h.runner.sampling = true;
    ASSERT_TRUE(h.add("s", reqs[0].first, 30, 0, sp));
    h.run();
    runs.push_back(h.get("s", 0).tokens);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_GT(std::set<int32_t>(runs[0].begin(), runs[0].end()).size(), 10u);
}

TEST(EngineCore, SeededSamplingSurvivesPreemption) {
  std::mt19937 rng(3);
  const auto p = random_prompt(rng, 30);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 1234;
  // Alone, with room to spare.
  Harness alone(100, 4, 256, false);
  ASSERT_TRUE(alone.add("x", p, 60, 0, sp));
  alone.run();
  // Squeezed by competitors so it is preempted.
  Harness tight(14, 4, 256, false);
  ASSERT_TRUE(tight.add("x", p, 60, 0, sp));
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(tight.add("y" + std::to_string(i), random_prompt(rng, 40), 60));
  tight.run();
  EXPECT_GT(tight.core->stats().preemptions, 0);
  EXPECT_EQ(tight.get("x", 0).tokens, alone.get("x", 0).tokens);
  EXPECT_TRUE(tight.pool_whole());
}

TEST(EngineCore, AbortAtAnyPointFreesEverything) {
  std::mt19937 rng(4);
  for (int abort_after = 0; abort_after < 12; ++abort_after) {
    Harness h(60, 4, 32);
    for (int i = 0; i < 6; ++i)
      ASSERT_TRUE(h.add("a" + std::to_string(i), random_prompt(rng, 50), 20));
    for (int s = 0; s < abort_after; ++s) {
      std::vector<RequestOutput> outs;
      h.core->step(&outs);
      h.collect(outs);
    }
    std::vector<RequestOutput> outs;
    for (int i = 0; i < 6; ++i) h.core->abort("a" + std::to_string(i), &outs);
    h.collect(outs);
    EXPECT_FALSE(h.core->has_work());
    EXPECT_TRUE(h.pool_whole()) << "after " << abort_after << " steps";
    EXPECT_EQ(h.core->kv().pool().num_free(), 60);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(h.get("a" + std::to_string(i), 0).finished, 1);
  }
}

TEST(EngineCore, PrefixHitsAreCountedExactly) {
  std::mt19937 rng(5);
  const auto shared = random_prompt(rng, 40);  // 2 full blocks + 8 tokens
  auto b = shared;
  b.resize(35);
  const auto tail = random_prompt(rng, 20);
  b.insert(b.end(), tail.begin(), tail.end());  // 55 tokens, first 35 shared
  for (bool caching : {true, false}) {
    Harness h(100, 4, 512, caching);
    ASSERT_TRUE(h.add("a", shared, 5));
    h.run();
    const EngineStats s1 = h.core->stats();
    EXPECT_EQ(s1.prefix_queries, 40);
    EXPECT_EQ(s1.prefix_hits, 0);
    ASSERT_TRUE(h.add("b", b, 5));
    h.run();
    const EngineStats s2 = h.core->stats();
    EXPECT_EQ(s2.prefix_queries, 40 + 55);
    // Blocks 0 and 1 (tokens 0..31) are shared and cached; block 2 differs from token 35.
    EXPECT_EQ(s2.prefix_hits, caching ? 32 : 0);
    EXPECT_EQ(s2.prompt_tokens_computed, caching ? 40 + 55 - 32 : 40 + 55);
    EXPECT_EQ(h.get("b", 0).metrics.cached_tokens, caching ? 32 : 0);
    EXPECT_EQ(h.get("b", 0).tokens, fake_greedy(b, 5, kVocab));
    // An identical prompt reuses every full block but the one holding its last token.
    ASSERT_TRUE(h.add("c", shared, 5));
    h.run();
    EXPECT_EQ(h.core->stats().prefix_hits, caching ? 32 + 32 : 0);
    EXPECT_EQ(h.get("c", 0).tokens, fake_greedy(shared, 5, kVocab));
    EXPECT_TRUE(h.pool_whole());
  }
}

TEST(EngineCore, EvictionIsLeastRecentlyUsedFirst) {
  std::mt19937 rng(6);
  // Pool of 8 blocks. Run a (3 full blocks), then b (3 full blocks): both cached, 6 of 8
  // blocks hold cached prefixes. A new 3-block request c must evict a's blocks first.
  Harness h(8, 4, 512);
  const auto a = random_prompt(rng, 49), b = random_prompt(rng, 49), c = random_prompt(rng, 49);
  ASSERT_TRUE(h.add("a", a, 1));
  h.run();
  ASSERT_TRUE(h.add("b", b, 1));
  h.run();
  ASSERT_TRUE(h.add("c", c, 1));
  h.run();
  const int64_t hits_before = h.core->stats().prefix_hits;
  ASSERT_TRUE(h.add("b2", b, 1));  // b's prefix must still be cached
  h.run();
  EXPECT_EQ(h.core->stats().prefix_hits - hits_before, 48);
  const int64_t hits_mid = h.core->stats().prefix_hits;
  ASSERT_TRUE(h.add("a2", a, 1));  // a's was evicted by c
  h.run();
  EXPECT_LT(h.core->stats().prefix_hits - hits_mid, 48);
  EXPECT_EQ(h.get("a2", 0).tokens, fake_greedy(a, 1, kVocab));
}

TEST(EngineCore, PriorityOrderHoldsAndTiesAreFirstComeFirstServed) {
  std::mt19937 rng(7);
  Harness h(100, /*max_seqs=*/1, 512, true, sched::Policy::kPriority);
  const int prios[] = {3, 1, 2, 1, 0, 3};
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(h.add("q" + std::to_string(i), random_prompt(rng, 10), 3, prios[i]));
  h.run();
  const std::vector<std::string> want = {"q4", "q1", "q3", "q2", "q0", "q5"};
  EXPECT_EQ(h.finish_order, want);
}

TEST(EngineCore, FcfsIgnoresPriority) {
  std::mt19937 rng(8);
  Harness h(100, 1, 512, true, sched::Policy::kFcfs);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(h.add("f" + std::to_string(i), random_prompt(rng, 10), 3, 10 - i));
  h.run();
  const std::vector<std::string> want = {"f0", "f1", "f2", "f3"};
  EXPECT_EQ(h.finish_order, want);
}

TEST(EngineCore, UrgentRequestPreemptsALessUrgentOne) {
  std::mt19937 rng(9);
  Harness h(100, /*max_seqs=*/1, 512, true, sched::Policy::kPriority);
  const auto lo = random_prompt(rng, 20), hi = random_prompt(rng, 20);
  ASSERT_TRUE(h.add("low", lo, 30, 5));
  for (int i = 0; i < 5; ++i) {  // low is decoding
    std::vector<RequestOutput> outs;
    h.core->step(&outs);
    h.collect(outs);
  }
  ASSERT_TRUE(h.add("high", hi, 5, 0));
  h.run();
  ASSERT_EQ(h.finish_order.size(), 2u);
  EXPECT_EQ(h.finish_order[0], "high");
  EXPECT_EQ(h.get("low", 0).metrics.preemptions, 1);
  EXPECT_EQ(h.get("low", 0).tokens, fake_greedy(lo, 30, kVocab));
  EXPECT_EQ(h.get("high", 0).tokens, fake_greedy(hi, 5, kVocab));
  EXPECT_TRUE(h.pool_whole());
}

TEST(EngineCore, RequestsThatCanNeverFitAreRejected) {
  Harness h(10, 4, 512, true, sched::Policy::kFcfs, /*max_len=*/200);
  std::vector<int32_t> p(150, 1);
  Status s = h.add("long", p, 60);  // 210 > max_model_len
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("max_model_len"), std::string::npos);
  s = h.add("big", p, 20);  // 170 tokens = 11 blocks > 10
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(h.add("ok", std::vector<int32_t>(100, 2), 50));  // 150 tokens, 10 blocks
  EXPECT_FALSE(h.add("ok", std::vector<int32_t>(10, 2), 5));   // duplicate id
  EXPECT_FALSE(h.add("badtok", std::vector<int32_t>{kVocab}, 5));
  h.run();
  EXPECT_EQ(h.get("ok", 0).tokens, fake_greedy(std::vector<int32_t>(100, 2), 50, kVocab));
  EXPECT_TRUE(h.pool_whole());
}

TEST(EngineCore, AFailedBlockCopyFailsItsStep) {
  // The runner's copy-on-write fails: the step being built fails as a failed forward
  // pass would (its requests end with the error, their blocks go back).
  std::mt19937 rng(10);
  SamplingParams sp;
  sp.temperature = 0;
  sp.n = 4;
  Harness h(100, 8, 512);
  ASSERT_TRUE(h.add("n4", random_prompt(rng, 37), 20, 0, sp));  // a shared partial block
  std::vector<RequestOutput> outs;
  h.core->step(&outs);  // the prompt
  const size_t passes = h.runner.step_tokens.size();
  h.runner.fail_copies = true;
  outs.clear();
  h.core->step(&outs);  // three completions copy the partial block
  int errors = 0;
  for (const RequestOutput& o : outs) {
    EXPECT_TRUE(o.finished);
    EXPECT_EQ(o.finish_reason, FinishReason::kError);
    EXPECT_NE(o.error.find("block copy failed"), std::string::npos) << o.error;
    ++errors;
  }
  EXPECT_EQ(errors, 4);
  EXPECT_EQ(h.runner.step_tokens.size(), passes);  // the step did not run
  EXPECT_FALSE(h.core->has_work());
  EXPECT_TRUE(h.pool_whole());
  EXPECT_EQ(h.core->stats().failed_steps, 1);
  EXPECT_TRUE(h.core->stats().last_step_failed);
}

TEST(EngineCore, CompletionsShareThePromptAndCopyOnWrite) {
  std::mt19937 rng(10);
  const auto p = random_prompt(rng, 37);  // 2 full blocks + a shared partial one
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 77;
  sp.n = 4;
  Harness h(100, 8, 512);
  ASSERT_TRUE(h.add("n4", p, 20, 0, sp));
  // After the prompt step the four completions hold 3 blocks between them.
  std::vector<RequestOutput> outs;
  h.core->step(&outs);
  h.collect(outs);
  EXPECT_EQ(h.core->kv().num_used_blocks(), 3);
  h.run();
  EXPECT_EQ(h.runner.n_copies, 3);  // three of four completions copied the partial block
  EXPECT_EQ(h.core->stats().prompt_tokens_computed, 37);
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 4; ++i) {
    // Each completion equals a lone request seeded with seed + i.
    SamplingParams one = sp;
    one.n = 1;
    one.seed = 77 + i;
    Harness alone(100, 8, 512);
    ASSERT_TRUE(alone.add("x", p, 20, 0, one));
    alone.run();
    EXPECT_EQ(h.get("n4", i).tokens, alone.get("x", 0).tokens) << "completion " << i;
    distinct.insert(h.get("n4", i).tokens);
  }
  EXPECT_GT(distinct.size(), 1u);
  EXPECT_TRUE(h.pool_whole());
}

TEST(EngineCore, StopTokenIdsEndARequest) {
  std::mt19937 rng(11);
  const auto p = random_prompt(rng, 12);
  const auto ref = fake_greedy(p, 20, kVocab);
  SamplingParams sp = Harness::greedy();
  sp.stop_token_ids = {ref[5]};
  Harness h(100, 4, 512);
  ASSERT_TRUE(h.add("s", p, 20, 0, sp));
  h.run();
  const auto& got = h.get("s", 0).tokens;
  const auto first = std::find(ref.begin(), ref.end(), ref[5]);
  EXPECT_EQ(got, std::vector<int32_t>(ref.begin(), first + 1));
  EXPECT_EQ(h.get("s", 0).reason, FinishReason::kStop);
}

// Pipelined steps (async_scheduling): each step is queued before the previous one's
// tokens are handled, its sequences' inputs standing in as placeholders. Greedy outputs
// must be the fake model's own continuations, whatever the steps' shapes.
TEST(EngineCore, PipelinedStepsGiveTheModelsTokens) {
  for (bool sampling_path : {false, true}) {
    SCOPED_TRACE(sampling_path ? "device sampling" : "device greedy");
    // A small pool (preemption), a small budget (chunked prefill), prefix sharing, stop
    // token ids and lengths from 1 token up.
    Harness h(/*n_blocks=*/18, /*max_seqs=*/6, /*budget=*/40, /*caching=*/true,
              sched::Policy::kFcfs, 4096, /*async=*/true);
    h.runner.greedy = !sampling_path;
    h.runner.sampling = sampling_path;
    std::mt19937 rng(21);
    const auto shared = random_prompt(rng, 40);
    std::map<std::string, std::vector<int32_t>> want;
    for (int i = 0; i < 14; ++i) {
      auto p = i % 3 == 0 ? shared : random_prompt(rng, 5 + static_cast<int>(rng() % 60));
      if (i % 3 == 0) p.push_back(static_cast<int32_t>(i));
      const int n = i == 0 ? 1 : 1 + static_cast<int>(rng() % 70);
      SamplingParams sp = Harness::greedy();
      auto ref = fake_greedy(p, n, kVocab);
      if (i % 4 == 1 && n > 6) {  // stops at the first occurrence of its 6th token
        sp.stop_token_ids = {ref[5]};
        ref.erase(std::find(ref.begin(), ref.end(), ref[5]) + 1, ref.end());
      }
      const std::string id = "q" + std::to_string(i);
      ASSERT_TRUE(h.add(id, p, n, 0, sp));
      want[id] = ref;
    }
    h.run();
    for (const auto& [id, ref] : want) {
      EXPECT_EQ(h.get(id, 0).tokens, ref) << id;
      EXPECT_EQ(h.get(id, 0).finished, 1) << id;
      EXPECT_EQ(h.get(id, 0).metrics.generation_tokens, static_cast<int64_t>(ref.size())) << id;
    }
    EXPECT_GT(h.core->stats().preemptions, 0);
    EXPECT_GT(h.core->stats().prefix_hits, 0);
    EXPECT_GT(h.runner.launches, 0);
    EXPECT_EQ(static_cast<size_t>(h.runner.launches), h.runner.step_tokens.size());
    EXPECT_EQ(h.core->stats().generation_tokens, [&] {
      int64_t n = 0;
      for (const auto& [id, ref] : want) n += static_cast<int64_t>(ref.size());
      return n;
    }());
    EXPECT_TRUE(h.pool_whole());
  }
}

TEST(EngineCore, PipelinedSeededSamplingDrawsAsPlainSteps) {
  // One uniform per draw from each request's generator, in order: a seeded request gets
  // the same tokens from pipelined and plain steps.
  std::mt19937 rng(22);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_prompt(rng, 10 + 7 * i));
  std::map<std::string, std::vector<int32_t>> got[2];
  for (int async = 0; async < 2; ++async) {
    Harness h(24, 4, 48, true, sched::Policy::kFcfs, 4096, async == 1);
    h.runner.sampling = true;
    for (int i = 0; i < 6; ++i) {
      SamplingParams sp;
      sp.temperature = 0.9f;
      sp.seed = 100 + i;
      ASSERT_TRUE(h.add("s" + std::to_string(i), prompts[i], 40, 0, sp));
    }
    h.run();
    EXPECT_EQ(h.runner.launches > 0, async == 1);
    for (int i = 0; i < 6; ++i)
      got[async]["s" + std::to_string(i)] = h.get("s" + std::to_string(i), 0).tokens;
    EXPECT_TRUE(h.pool_whole());
  }
  EXPECT_EQ(got[0], got[1]);
}

TEST(EngineCore, PipelinedAbortAtAnyPointFreesEverything) {
  std::mt19937 rng(23);
  for (int abort_after = 0; abort_after < 14; ++abort_after) {
    Harness h(60, 4, 32, true, sched::Policy::kFcfs, 4096, /*async=*/true);
    h.runner.greedy = true;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 6; ++i) {
      prompts.push_back(random_prompt(rng, 30));
      ASSERT_TRUE(h.add("a" + std::to_string(i), prompts.back(), 20));
    }
    for (int s = 0; s < abort_after; ++s) {
      std::vector<RequestOutput> outs;
      h.core->step(&outs);
      h.collect(outs);
    }
    std::vector<RequestOutput> outs;
    for (int i = 0; i < 6; i += 2) h.core->abort("a" + std::to_string(i), &outs);
    h.collect(outs);
    std::vector<size_t> at_abort;
    for (int i = 0; i < 6; i += 2)
      at_abort.push_back(h.get("a" + std::to_string(i), 0).tokens.size());
    h.run();  // the others go on; the queued step's tokens for the aborted are dropped
    for (int i = 0; i < 6; i += 2)
      EXPECT_EQ(h.get("a" + std::to_string(i), 0).tokens.size(),
                at_abort[static_cast<size_t>(i / 2)])
          << "output after the end, a" << i << " after " << abort_after << " steps";
    EXPECT_TRUE(h.pool_whole()) << "after " << abort_after << " steps";
    for (int i = 0; i < 6; ++i) {
      const Outcome& o = h.get("a" + std::to_string(i), 0);
      EXPECT_EQ(o.finished, 1) << i;
      const auto ref = fake_greedy(prompts[static_cast<size_t>(i)], 20, kVocab);
      if (i % 2 == 1) {
        EXPECT_EQ(o.tokens, ref) << i;
      } else {  // a prefix of what it would have said, and nothing after the abort
        EXPECT_EQ(o.reason == FinishReason::kAbort || o.reason == FinishReason::kLength, true);
        EXPECT_EQ(o.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + o.tokens.size()));
      }
    }
  }
}

TEST(EngineCore, PipelinedStepsGiveWayToRequestsThatNeedLogits) {
  // A request asking for log-probabilities needs its logits on the host: while it is
  // live every step is plain (the queued one is finished first); then pipelining resumes.
  Harness h(80, 6, 64, true, sched::Policy::kFcfs, 4096, /*async=*/true);
  h.runner.greedy = true;
  std::mt19937 rng(24);
  std::map<std::string, std::pair<std::vector<int32_t>, int>> want;
  for (int i = 0; i < 4; ++i) {
    const auto p = random_prompt(rng, 12 + i);
    ASSERT_TRUE(h.add("g" + std::to_string(i), p, 50));
    want["g" + std::to_string(i)] = {p, 50};
  }
  for (int s = 0; s < 10; ++s) {
    std::vector<RequestOutput> outs;
    h.core->step(&outs);
    h.collect(outs);
  }
  const int launched_before = h.runner.launches;
  EXPECT_GT(launched_before, 0);
  SamplingParams lp = Harness::greedy();
  lp.logprobs = 1;
  const auto p = random_prompt(rng, 9);
  ASSERT_TRUE(h.add("lp", p, 8, 0, lp));
  want["lp"] = {p, 8};
  h.run();
  for (const auto& [id, pn] : want)
    EXPECT_EQ(h.get(id, 0).tokens, fake_greedy(pn.first, pn.second, kVocab)) << id;
  EXPECT_GT(h.runner.launches, launched_before);  // resumed once "lp" had finished
  EXPECT_LT(static_cast<size_t>(h.runner.launches),
            h.runner.step_tokens.size());  // plain steps too
  EXPECT_TRUE(h.pool_whole());
}

// Pipelined and plain steps over random workloads: pool sizes that preempt, budgets that
// chunk prefills, prefix sharing, priorities, requests arriving mid-run, and a mix of
// greedy, seeded sampling and requests that force plain steps (penalties, logprobs,
// n = 2), some aborted. Scheduling may differ between the two (a pipelined step is
// scheduled before the previous one's tokens are known, so blocks free a step later), but
// no request's tokens, finish reason or admission may. The fake device draws as the host
// sampler does (host_draws), so a token does not depend on which path its step took.
TEST(EngineCore, PipelinedAndPlainStepsAgreeOnRandomWorkloads) {
  int pipelined_total = 0, fallback_seeds = 0;
  int64_t preemptions = 0, prefix_hits = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(1000 + seed);
    auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
    const int n_blocks = pick(10, 80), max_seqs = pick(1, 8), budget = pick(16, 128);
    const bool caching = rng() % 2 == 0;
    const sched::Policy policy = rng() % 3 == 0 ? sched::Policy::kPriority : sched::Policy::kFcfs;
    struct Req {
      std::string id;
      std::vector<int32_t> prompt;
      int max_tokens, priority, arrive_step, abort_step = -1;
      SamplingParams params;
    };
    std::vector<Req> reqs;
    const auto shared = random_prompt(rng, pick(16, 40));
    const int n_reqs = pick(4, 16);
    bool forces_plain = false;
    for (int i = 0; i < n_reqs; ++i) {
      Req r;
      r.id = "r" + std::to_string(i);
      r.prompt = rng() % 3 == 0 ? shared : random_prompt(rng, pick(1, 60));
      if (r.prompt == shared) r.prompt.push_back(static_cast<int32_t>(pick(0, kVocab - 1)));
      r.max_tokens = pick(1, 50);
      r.priority = pick(0, 3);
      r.arrive_step = rng() % 2 == 0 ? 0 : pick(1, 30);
      r.params = Harness::greedy();
      const int kind = pick(0, 9);
      if (kind >= 5 && kind <= 7) {  // seeded sampling, pipelinable
        r.params.temperature = 0.9f;
        r.params.seed = 7 * seed + static_cast<uint64_t>(i);
      } else if (kind == 8) {  // needs the host's sampler or logits: plain steps
        r.params.temperature = 0.8f;
        r.params.seed = 11 * seed + static_cast<uint64_t>(i);
        if (rng() % 2 == 0)
          r.params.presence_penalty = 0.5f;
        else
          r.params.n = 2;
        forces_plain = true;
      } else if (kind == 9) {
        r.params.logprobs = 2;
        forces_plain = true;
      }
      if (rng() % 4 == 0) r.params.stop_token_ids = {pick(0, kVocab - 1)};
      if (rng() % 6 == 0) r.abort_step = r.arrive_step + pick(0, 40);
      reqs.push_back(std::move(r));
    }
    fallback_seeds += forces_plain;
    std::map<std::pair<std::string, int>, Outcome> results[2];
    std::vector<bool> admitted[2];
    for (int async = 0; async < 2; ++async) {
      Harness h(n_blocks, max_seqs, budget, caching, policy, 4096, async == 1);
      h.runner.greedy = true;
      h.runner.sampling = true;
      h.runner.host_draws = true;
      auto arrive = [&](int step) {
        for (const Req& r : reqs)
          if (r.arrive_step == step)
            admitted[async].push_back(
                h.add(r.id, r.prompt, r.max_tokens, r.priority, r.params).is_ok());
      };
      std::map<std::pair<std::string, int>, size_t> at_abort;
      int step = 0;
      for (; step <= 30 || h.core->has_work(); ++step) {
        ASSERT_LT(step, 100000) << "did not finish";
        arrive(step);
        std::vector<RequestOutput> outs;
        for (const Req& r : reqs)
          if (r.abort_step == step) h.core->abort(r.id, &outs);
        h.collect(outs);
        for (const Req& r : reqs)
          if (r.abort_step == step)
            for (int c = 0; c < r.params.n; ++c)
              if (auto it = h.results.find({r.id, c}); it != h.results.end())
                at_abort[it->first] = it->second.tokens.size();
        outs.clear();
        h.core->step(&outs);
        h.collect(outs);
      }
      for (const auto& [key, o] : h.results)
        EXPECT_EQ(o.finished, 1) << key.first << "/" << key.second;
      EXPECT_TRUE(h.pool_whole());
      for (const auto& [key, n] : at_abort)
        EXPECT_EQ(h.results[key].tokens.size(), n) << key.first << ": output after its abort";
      if (async == 1) {
        pipelined_total += h.runner.launches;
        preemptions += h.core->stats().preemptions;
        prefix_hits += h.core->stats().prefix_hits;
      }
      results[async] = h.results;
    }
    EXPECT_EQ(admitted[0], admitted[1]);
    ASSERT_EQ(results[0].size(), results[1].size());
    std::set<std::string> aborted;
    for (const Req& r : reqs)
      if (r.abort_step >= 0) aborted.insert(r.id);
    for (const auto& [key, plain] : results[0]) {
      const Outcome& piped = results[1][key];
      if (aborted.count(key.first)) {
        // Cut where the abort found it, which the modes may place a step apart: one
        // output must be the start of the other, and nothing may follow an abort.
        const auto& a = piped.tokens.size() < plain.tokens.size() ? piped.tokens : plain.tokens;
        const auto& b = piped.tokens.size() < plain.tokens.size() ? plain.tokens : piped.tokens;
        EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << key.first << "/" << key.second;
        continue;
      }
      EXPECT_EQ(piped.tokens, plain.tokens) << key.first << "/" << key.second;
      EXPECT_EQ(piped.reason, plain.reason) << key.first << "/" << key.second;
    }
  }
  // The workloads exercised both modes of the pipelined engine, preemption and prefix hits.
  EXPECT_GT(pipelined_total, 0);
  EXPECT_GT(fallback_seeds, 0);
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(prefix_hits, 0);
}

}  // namespace
}  // namespace pagoda
