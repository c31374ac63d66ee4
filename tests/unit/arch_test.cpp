// Architecture recipes: what each architecture file states, the shared configuration
// reader, and a backend's refusal of a recipe feature it does not run.
#include <gtest/gtest.h>

#include <algorithm>

#include "shared_dir.h"

#include <string>

#include "ledger/sources.h"
#include "model/arch/arch.h"
#include "model/gguf_writer.h"
#include "model/model.h"

namespace pagoda {
namespace {

const std::string kStories = test::shared_dir() + "/models/stories260K.gguf";

TEST(Recipe, EachFieldIsItsOwnFeature) {
  const ModelRecipe plain;
  EXPECT_EQ(recipe_features(plain), 0u);
  const auto with = [](auto set) {
    ModelRecipe r;
    set(r);
    return recipe_features(r);
  };
  EXPECT_EQ(with([](ModelRecipe& r) { r.qkv_bias = true; }), kFeatQkvBias);
  EXPECT_EQ(with([](ModelRecipe& r) { r.qk_norm = true; }), kFeatQkNorm);
  EXPECT_EQ(with([](ModelRecipe& r) { r.attn_softcap = 50; }), kFeatAttnSoftcap);
  EXPECT_EQ(with([](ModelRecipe& r) { r.sliding_window = 4096; }), kFeatSlidingWindow);
  EXPECT_EQ(with([](ModelRecipe& r) { r.norm = NormKind::kLayer; }), kFeatLayerNorm);
  EXPECT_EQ(with([](ModelRecipe& r) { r.post_norms = true; }), kFeatPostNorms);
  EXPECT_EQ(with([](ModelRecipe& r) { r.ffn_act = GatedAct::kGelu; }), kFeatGelu);
  EXPECT_EQ(with([](ModelRecipe& r) { r.n_experts = 8; }), kFeatExperts);
  EXPECT_EQ(with([](ModelRecipe& r) { r.embed_scale = 48; }), kFeatEmbedScale);
  EXPECT_EQ(with([](ModelRecipe& r) { r.final_softcap = 30; }), kFeatFinalSoftcap);
  EXPECT_EQ(with([](ModelRecipe& r) { r.rope_style = RopeStyle::kNeox; }), kFeatNeoxRope);
  // tied_output is a file's choice every backend handles, not a feature.
  EXPECT_EQ(with([](ModelRecipe& r) { r.tied_output = true; }), 0u);
}

TEST(Recipe, RefusalNamesTheFeatureAndTheBackend) {
  ModelRecipe r;
  r.qkv_bias = true;
  r.sliding_window = 4096;
  r.n_experts = 8;
  EXPECT_TRUE(require_features(r, kFeatQkvBias | kFeatSlidingWindow | kFeatExperts, "x").is_ok());
  const Status s = require_features(r, kFeatQkvBias, "the CUDA backend");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_EQ(s.message(), "sliding-window attention is not supported by the CUDA backend yet");
}

TEST(Recipe, SlidingLayersFollowThePattern) {
  ModelRecipe r;
  EXPECT_FALSE(r.layer_slides(0));
  r.sliding_window = 1024;
  EXPECT_TRUE(r.layer_slides(0));
  EXPECT_TRUE(r.layer_slides(5));
  r.global_every = 6;  // Gemma 3: five local layers, then a global one
  for (int l = 0; l < 12; ++l) EXPECT_EQ(r.layer_slides(l), l != 5 && l != 11) << l;
}

TEST(Arch, LlamaFileGivesThePlainRecipe) {
  auto f = GgufFile::open(kStories);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto c = read_model_config(**f);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->arch, "llama");
  EXPECT_EQ(recipe_features(c->recipe), 0u);
  EXPECT_EQ(c->recipe.rope_style, RopeStyle::kNormal);
  EXPECT_EQ(c->n_vocab, (*f)->find_tensor("token_embd.weight")->ne[1]);
  EXPECT_EQ(c->recipe.tied_output, (*f)->find_tensor("output.weight") == nullptr);
  // The CPU model loads the same configuration.
  auto m = Model::load(**f);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ((*m)->config().n_vocab, c->n_vocab);
  EXPECT_EQ((*m)->config().n_layers, c->n_layers);
  EXPECT_EQ((*m)->config().recipe.tied_output, c->recipe.tied_output);
}

TEST(Arch, LayerTensorsNameEveryPartOnce) {
  ModelConfig c;
  c.dim = 64;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 96;
  LayerTensors t = layer_tensors(c, 3);
  EXPECT_EQ(t.attn_norm, "blk.3.attn_norm.weight");
  ASSERT_EQ(t.qkv.names.size(), 3u);
  EXPECT_EQ(t.qkv.names[1], "blk.3.attn_k.weight");
  EXPECT_EQ(t.qkv.rows, (std::vector<int64_t>{64, 16, 16}));
  EXPECT_EQ(t.qkv.cols, 64);
  EXPECT_EQ(t.wo.rows, 64);
  EXPECT_EQ(t.wo.cols, 64);
  EXPECT_EQ(t.down.cols, 96);
  EXPECT_TRUE(t.qkv_bias.empty());
  c.recipe.qkv_bias = true;
  t = layer_tensors(c, 0);
  EXPECT_EQ(t.qkv_bias, (std::vector<std::string>{"blk.0.attn_q.bias", "blk.0.attn_k.bias",
                                                  "blk.0.attn_v.bias"}));
  EXPECT_TRUE(t.q_norm.empty() && t.k_norm.empty());
  c.recipe.qk_norm = true;  // Qwen3
  t = layer_tensors(c, 2);
  EXPECT_EQ(t.q_norm, "blk.2.attn_q_norm.weight");
  EXPECT_EQ(t.k_norm, "blk.2.attn_k_norm.weight");
  c.n_layers = 2;
  const std::vector<std::string> all = model_tensor_names(c);
  EXPECT_EQ(std::count(all.begin(), all.end(), "blk.0.attn_k_norm.weight"), 1);
  EXPECT_EQ(hf_to_gguf_tensor_name("model.layers.7.self_attn.q_norm.weight"),
            "blk.7.attn_q_norm.weight");
}

// The shared model with `key` = `value` added to its metadata.
std::vector<uint8_t> stories_with(const GgufFile& f, const std::string& key, int32_t value) {
  GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") w.set_value(k, v);
  w.set_i32(key, value);
  for (const GgufTensorInfo& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor_ref(t.name, t.type, ne, f.tensor_data(t), t.size);
  }
  return w.to_bytes();
}

TEST(Arch, BackendRefusesARecipeFeatureByName) {
  auto f = GgufFile::open(kStories);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const std::vector<uint8_t> bytes = stories_with(**f, "llama.attention.sliding_window", 32);
  auto g = GgufFile::parse(bytes.data(), bytes.size());
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto c = read_model_config(**g);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->recipe.sliding_window, 32);
  auto m = Model::load(**g);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(m.status().message(),
            "sliding-window attention is not supported by the CPU backend yet");
  // The ledger plans it from the metadata and says the engine does not run it.
  auto src = ledger::source_from_gguf(**g);
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  bool noted = false;
  for (const std::string& n : src->notes)
    noted =
        noted || n.find("does not run this file (sliding-window attention") != std::string::npos;
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace pagoda
