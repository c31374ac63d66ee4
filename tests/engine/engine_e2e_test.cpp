// The whole engine on a real model (stories260K): 64 requests of mixed lengths, batched,
// chunked, prefix-cached and preempted, must give exactly the greedy tokens each request
// gives when it runs alone through the plain single-sequence path.
#include <gtest/gtest.h>

#include "../unit/shared_dir.h"

#include <random>

#include "engine/sampler.h"
#include "engine/session.h"
#include "model/gguf.h"
#include "model/model.h"
#include "pagoda/engine.h"

namespace pagoda {
namespace {

const std::string kModel = test::shared_dir() + "/models/stories260K.gguf";

std::vector<int32_t> alone(const Model& m, ThreadPool& pool, const std::vector<int32_t>& prompt,
                           int max_tokens) {
  Session s(m, pool, 512);
  std::vector<float> logits;
  EXPECT_TRUE(s.eval(prompt, false, &logits));
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    out.push_back(argmax(logits.data(), m.config().n_vocab));
    if (i + 1 < max_tokens) {
      EXPECT_TRUE(s.eval({out.back()}, false, &logits));
    }
  }
  return out;
}

struct Case {
  std::vector<int32_t> prompt;
  int max_tokens;
};

std::vector<Case> mixed_cases(int32_t n_vocab) {
  std::mt19937 rng(42);
  std::vector<Case> cases;
  std::vector<int32_t> shared(40);
  for (int32_t& t : shared) t = 3 + static_cast<int32_t>(rng() % (n_vocab - 3));
  for (int i = 0; i < 64; ++i) {
    Case c;
    const int len = 1 + static_cast<int>(rng() % 200);
    // A third of them start with the same 40 tokens, so the prefix cache is exercised.
    if (i % 3 == 0) c.prompt = shared;
    c.prompt.insert(c.prompt.begin(), 1);  // BOS
    while (static_cast<int>(c.prompt.size()) < len + (i % 3 == 0 ? 41 : 1))
      c.prompt.push_back(3 + static_cast<int32_t>(rng() % (n_vocab - 3)));
    c.max_tokens = 1 + static_cast<int>(rng() % 48);
    cases.push_back(std::move(c));
  }
  return cases;
}

void run_case_set(const EngineConfig& cfg, bool expect_preemption) {
  auto file = GgufFile::open(kModel);
  ASSERT_TRUE(file) << file.status().message();
  auto model = Model::load(**file);
  ASSERT_TRUE(model);
  ThreadPool pool(2);
  const auto cases = mixed_cases((*model)->config().n_vocab);

  auto engine = Engine::create(cfg);
  ASSERT_TRUE(engine) << engine.status().message();
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < cases.size(); ++i) {
    sp.max_tokens = cases[i].max_tokens;
    auto s = (*engine)->add_request("r" + std::to_string(i), cases[i].prompt, sp);
    ASSERT_TRUE(s) << s.status().message();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<int32_t> got;
    FinishReason why = FinishReason::kNone;
    while (auto o = streams[i]->next()) {
      got.insert(got.end(), o->token_ids.begin(), o->token_ids.end());
      if (o->finished) why = o->finish_reason;
    }
    EXPECT_EQ(why, FinishReason::kLength);
    EXPECT_EQ(got, alone(**model, pool, cases[i].prompt, cases[i].max_tokens)) << "request " << i;
  }
  const EngineStats st = (*engine)->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
  if (cfg.enable_prefix_caching) {
    EXPECT_GT(st.prefix_hits, 0);
  } else {
    EXPECT_EQ(st.prefix_hits, 0);
  }
  if (expect_preemption) {
    EXPECT_GT(st.preemptions, 0);
  }
}

TEST(EngineE2E, BatchedGreedyEqualsAloneOnStories260K) {
  EngineConfig cfg;
  cfg.model_path = kModel;
  cfg.threads = 2;
  cfg.max_num_seqs = 16;
  cfg.max_num_batched_tokens = 96;  // forces chunked prefills mixed with decodes
  cfg.kv_cache_memory = 64 << 20;
  run_case_set(cfg, false);
}

TEST(EngineE2E, UnderPreemptionWithoutPrefixCaching) {
  EngineConfig cfg;
  cfg.model_path = kModel;
  cfg.threads = 2;
  cfg.max_num_seqs = 32;
  cfg.max_num_batched_tokens = 256;
  cfg.max_model_len = 512;
  cfg.enable_prefix_caching = false;
  // stories260K: 5 layers x 4 KV heads x 8 x 2 x 2 bytes = 640 bytes per token; 40 blocks
  // of 16 hold 640 tokens, far less than 32 running requests want.
  cfg.kv_cache_memory = 40 * 16 * 640;
  run_case_set(cfg, true);
}

TEST(EngineE2E, RejectsWhatCanNeverFitAndAbortFrees) {
  EngineConfig cfg;
  cfg.model_path = kModel;
  cfg.threads = 1;
  cfg.kv_cache_memory = 64 << 20;
  auto engine = Engine::create(cfg);
  ASSERT_TRUE(engine);
  SamplingParams sp;
  sp.max_tokens = 100;
  auto r = (*engine)->add_request("long", std::vector<int32_t>(500, 5), sp);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("max_model_len"), std::string::npos);
  sp.max_tokens = 400;
  sp.ignore_eos = true;
  auto s = (*engine)->add_request("a", "Once upon a time", sp);
  ASSERT_TRUE(s);
  auto first = (*s)->next();
  ASSERT_TRUE(first);
  (*engine)->abort("a");
  FinishReason why = FinishReason::kNone;
  while (auto o = (*s)->next())
    if (o->finished) why = o->finish_reason;
  EXPECT_EQ(why, FinishReason::kAbort);
  EXPECT_EQ((*engine)->stats().kv_blocks_used, 0);
  // The id is free again once its stream has ended.
  sp.max_tokens = 4;
  auto again = (*engine)->add_request("a", "Once", sp);
  EXPECT_TRUE(again);
  while ((*again)->next()) {
  }
}

TEST(EngineE2E, MissingModelIsAClearError) {
  EngineConfig cfg;
  cfg.model_path = "/nonexistent/model.gguf";
  auto engine = Engine::create(cfg);
  ASSERT_FALSE(engine);
  EXPECT_NE(engine.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
