// The safetensors reader on well-formed files and on broken ones (truncated, corrupt
// headers, offsets out of range, overlapping or mis-sized tensors, hostile lengths): each
// must give a Status naming the file and the tensor, never a crash (these tests also run
// under AddressSanitizer and UndefinedBehaviorSanitizer). The index and the checkpoint
// folder's refusals are here too; tests/model/test_hf_folder.py loads real checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/hf_checkpoint.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace pagoda {
namespace {

// A file from a header's text and `data` bytes after it.
std::vector<uint8_t> file(const std::string& header, size_t data, uint64_t len_override = 0) {
  const uint64_t n = len_override ? len_override : header.size();
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  s += header;
  for (size_t i = 0; i < data; ++i) s.push_back(static_cast<char>(i));
  return std::vector<uint8_t>(s.begin(), s.end());
}

Result<std::unique_ptr<SafetensorsFile>> parse(const std::vector<uint8_t>& b) {
  return SafetensorsFile::parse(b.data(), b.size(), "t.safetensors");
}

// The error message of parsing `b`, which must fail.
std::string error_of(const std::vector<uint8_t>& b) {
  auto f = parse(b);
  EXPECT_FALSE(f.is_ok());
  return f.is_ok() ? "" : f.status().message();
}

TEST(Safetensors, ReadsTensorsAndMetadata) {
  const std::string h = R"({"__metadata__":{"format":"pt"},)"
                        R"("w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
                        R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[12,18]},)"
                        R"("s":{"dtype":"F32","shape":[],"data_offsets":[18,22]},)"
                        R"("i":{"dtype":"I64","shape":[1],"data_offsets":[22,30]},)"
                        R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[30,30]}}  )";
  const auto b = file(h, 30);
  auto f = parse(b);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const SafetensorsFile& s = **f;
  EXPECT_EQ(s.tensors().size(), 5u);
  EXPECT_EQ(s.metadata().at("format"), "pt");
  const SafetensorsTensor* w = s.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, DType::kF16);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->n_elements(), 6);
  EXPECT_EQ(s.tensor_data(*w), b.data() + 8 + h.size());
  EXPECT_EQ(s.find("b")->type, DType::kBF16);
  EXPECT_EQ(s.find("s")->n_elements(), 1);  // a scalar
  EXPECT_EQ(s.tensor_data(*s.find("s"))[0], 18);
  EXPECT_EQ(s.find("e")->n_elements(), 0);
  EXPECT_EQ(s.find("missing"), nullptr);
}

TEST(Safetensors, RefusesShortAndHostileLengths) {
  EXPECT_NE(error_of({1, 2, 3}).find("too short"), std::string::npos);
  // A header length past the file, and one past the cap.
  EXPECT_NE(error_of(file("{}", 0, 1000)).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(file("{}", 0, uint64_t{1} << 62)).find("over the cap"), std::string::npos);
  EXPECT_NE(error_of(file("{}", 0, ~uint64_t{0})).find("over the cap"), std::string::npos);
}

TEST(Safetensors, RefusesCorruptHeaders) {
  EXPECT_NE(error_of(file("{\"w\":", 0)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(file("[1,2]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":3})", 0)).find("'w' is not described"), std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4)).find("no dtype"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4)).find("no shape"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4))
                .find("no data_offsets"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", 4))
                .find("dtype 'F7'"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4))
                .find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4))
                .find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4))
                .find("not integers"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"__metadata__":{"a":1}})", 0)).find("not a string"),
            std::string::npos);
}

TEST(Safetensors, RefusesBadOffsetsAndSizes) {
  // Past the end of the data, reversed, and sized unlike dtype x shape.
  std::string e = error_of(file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4));
  EXPECT_NE(e.find("t.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("outside the data section"), std::string::npos) << e;
  e = error_of(file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4));
  EXPECT_NE(e.find("outside the data section"), std::string::npos) << e;
  e = error_of(file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8));
  EXPECT_NE(e.find("span 4 bytes, but F32 x 2 elements are 8"), std::string::npos) << e;
  // Element and byte counts that overflow 64 bits.
  e = error_of(
      file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0));
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
  e = error_of(
      file(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", 0));
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
  e = error_of(
      file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551615,3]}})", 4));
  EXPECT_NE(e.find("outside"), std::string::npos) << e;
  // Two tensors sharing bytes.
  e = error_of(file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    12));
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
}

TEST(Safetensors, TruncatedFilesFailEverywhere) {
  // Every prefix of a good file fails cleanly (or parses when it still holds the data).
  const auto b = file(R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})", 12);
  for (size_t n = 0; n < b.size(); ++n) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(parse(cut).is_ok()) << n;
  }
  EXPECT_TRUE(parse(b).is_ok());
}

// The writer: a file the reader takes back; and when a tensor's bytes cannot be made, the
// producer's error and no file left behind.
TEST(SafetensorsWriter, WritesOrLeavesNothing) {
  const std::string path = ::testing::TempDir() + "/writer.safetensors";
  const std::vector<SafetensorsSpec> specs = {{"a", "F32", {2}}, {"b", "U8", {3}}};
  auto produce = [](size_t i, std::vector<uint8_t>* bytes) -> Status {
    bytes->assign(i == 0 ? 8 : 3, static_cast<uint8_t>(i + 1));
    return Status::ok();
  };
  ASSERT_TRUE(write_safetensors(path, specs, {{"format", "pt"}}, produce).is_ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ((*f)->tensors().size(), 2u);
  f = Result<std::unique_ptr<SafetensorsFile>>(internal_error("closed"));
  const Status st =
      write_safetensors(path, specs, {}, [](size_t i, std::vector<uint8_t>* bytes) -> Status {
        if (i == 1) return invalid_argument("tensor b cannot be made");
        bytes->assign(8, 0);
        return Status::ok();
      });
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(st.message(), "tensor b cannot be made");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Safetensors, Index) {
  auto i = parse_safetensors_index(
      R"({"metadata":{"total_size":10},"weight_map":{"a":"s2.safetensors","b":"s1.safetensors",)"
      R"("c":"s2.safetensors"}})",
      "idx.json");
  ASSERT_TRUE(i.is_ok()) << i.status().message();
  EXPECT_EQ(i->shards, (std::vector<std::string>{"s1.safetensors", "s2.safetensors"}));
  EXPECT_EQ(i->weight_map.at("a"), "s2.safetensors");
  EXPECT_EQ(i->total_size, 10);
  for (const char* bad : {R"({"weight_map":{"a":"../x.safetensors"}})",
                          R"({"weight_map":{"a":"/etc/passwd"}})", R"({"weight_map":{"a":".."}})",
                          R"({"weight_map":{"a":1}})", R"({"weight_map":{}})", "nope"}) {
    auto r = parse_safetensors_index(bad, "idx.json");
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("idx.json"), std::string::npos);
    }
  }
}

// A checkpoint folder in a fresh temporary directory.
struct Folder {
  std::filesystem::path dir;
  Folder() {
    dir = std::filesystem::temp_directory_path() /
          ("pagoda_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Folder() { std::filesystem::remove_all(dir); }
  void write(const std::string& name, const std::vector<uint8_t>& b) const {
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  void write(const std::string& name, const std::string& s) const {
    write(name, std::vector<uint8_t>(s.begin(), s.end()));
  }
};

// The config of a one-layer Llama of width 8 (2 heads of 4), vocabulary 4, tied output.
std::string tiny_config(const std::string& extra = "") {
  return R"({"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":16,)"
         R"("num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,)"
         R"("vocab_size":4,"tie_word_embeddings":true)" +
         extra + "}";
}

// Its tensors ([out, in] shapes) in F32, plus `extra` entries.
std::vector<uint8_t> tiny_weights(const std::string& extra_name = "", int extra_len = 0) {
  const std::vector<std::pair<std::string, std::vector<int>>> ts = {
      {"model.embed_tokens.weight", {4, 8}},
      {"model.norm.weight", {8}},
      {"model.layers.0.input_layernorm.weight", {8}},
      {"model.layers.0.post_attention_layernorm.weight", {8}},
      {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
      {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
      {"model.layers.0.self_attn.v_proj.weight", {4, 8}},
      {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
      {"model.layers.0.mlp.gate_proj.weight", {16, 8}},
      {"model.layers.0.mlp.up_proj.weight", {16, 8}},
      {"model.layers.0.mlp.down_proj.weight", {8, 16}},
  };
  std::string h = "{";
  size_t off = 0;
  auto add = [&](const std::string& name, const std::vector<int>& shape) {
    size_t n = 1;
    std::string s;
    for (int d : shape) {
      n *= static_cast<size_t>(d);
      s += (s.empty() ? "" : ",") + std::to_string(d);
    }
    h += (h.size() > 1 ? "," : "") +
         ("\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + s + "],\"data_offsets\":[" +
          std::to_string(off) + "," + std::to_string(off + n * 4) + "]}");
    off += n * 4;
  };
  for (const auto& [name, shape] : ts) add(name, shape);
  if (!extra_name.empty()) add(extra_name, {extra_len});
  return file(h + "}", off);
}

// The message of opening the folder, which must fail.
std::string open_error(const Folder& f) {
  auto s = open_hf_checkpoint(f.dir.string());
  EXPECT_FALSE(s.is_ok());
  return s.is_ok() ? "" : s.status().message();
}

TEST(HfCheckpoint, OpensAndMapsNames) {
  Folder f;
  f.write("config.json", tiny_config());
  f.write("model.safetensors", tiny_weights("model.layers.0.self_attn.rotary_emb.inv_freq", 2));
  auto s = open_hf_checkpoint(f.dir.string());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto c = (*s)->model_config();
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->arch, "llama");
  EXPECT_EQ(c->recipe.rope_style, RopeStyle::kNeox);  // HF Q/K rows are not permuted
  EXPECT_TRUE(c->recipe.tied_output);
  EXPECT_EQ(c->head_dim, 4);
  const WeightTensor* k = (*s)->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->file_name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k->ne[0], 8);  // row length first: [out, in] reversed
  EXPECT_EQ(k->ne[1], 4);
  EXPECT_EQ((*s)->find_tensor("blk.0.attn_k.weight", {8, 4}).is_ok(), true);
  EXPECT_EQ((*s)->tensors().size(), 11u);  // inv_freq ignored
}

TEST(HfCheckpoint, RefusesWhatItCannotRun) {
  {
    Folder f;
    EXPECT_NE(open_error(f).find("no config.json"), std::string::npos);
    f.write("config.json", tiny_config());
    EXPECT_NE(open_error(f).find("neither model.safetensors"), std::string::npos);
  }
  {
    Folder f;
    f.write("config.json", R"({"architectures":["MambaForCausalLM"]})");
    f.write("model.safetensors", tiny_weights());
    const std::string e = open_error(f);
    EXPECT_NE(e.find("'MambaForCausalLM'"), std::string::npos) << e;
    EXPECT_NE(e.find("LlamaForCausalLM"), std::string::npos) << e;
  }
  for (const std::string extra :
       {R"(,"attention_bias":true)", R"(,"hidden_act":"gelu")",
        R"(,"rope_scaling":{"rope_type":"yarn","factor":4})",
        R"(,"layer_types":["sliding_attention"])", R"(,"quantization_config":{"bits":4})"}) {
    Folder f;
    f.write("config.json", tiny_config(extra));
    f.write("model.safetensors", tiny_weights());
    const std::string e = open_error(f);
    EXPECT_NE(e.find("not supported"), std::string::npos) << extra << ": " << e;
  }
  {
    // A bias the recipe has no place for, and a tensor no Llama has.
    Folder f;
    f.write("config.json", tiny_config());
    f.write("model.safetensors", tiny_weights("model.layers.0.self_attn.o_proj.bias", 8));
    EXPECT_NE(open_error(f).find("'model.layers.0.self_attn.o_proj.bias'"), std::string::npos);
    f.write("model.safetensors", tiny_weights("model.layers.0.mystery.weight", 8));
    EXPECT_NE(open_error(f).find("'model.layers.0.mystery.weight'"), std::string::npos);
  }
  {
    // An untied output without lm_head, and a vocabulary unlike the embedding's.
    Folder f;
    f.write("config.json",
            R"({"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":16,)"
            R"("num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,)"
            R"("vocab_size":4,"tie_word_embeddings":false})");
    f.write("model.safetensors", tiny_weights());
    EXPECT_NE(open_error(f).find("no tensor 'lm_head.weight'"), std::string::npos);
    f.write(
        "config.json",
        tiny_config(R"(,"vocab_size":5)").replace(tiny_config().find("\"vocab_size\":4,"), 15, ""));
    EXPECT_NE(open_error(f).find("vocab_size 5"), std::string::npos) << open_error(f);
  }
  {
    // A corrupt shard names its file.
    Folder f;
    f.write("config.json", tiny_config());
    auto w = tiny_weights();
    w.resize(w.size() - 1);
    f.write("model.safetensors", w);
    const std::string e = open_error(f);
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("outside the data section"), std::string::npos) << e;
  }
}

TEST(HfCheckpoint, ShardsFollowTheIndex) {
  Folder f;
  f.write("config.json", tiny_config());
  f.write("a.safetensors", tiny_weights());
  f.write("model.safetensors.index.json",
          R"({"weight_map":{"model.embed_tokens.weight":"b.safetensors"}})");
  EXPECT_NE(open_error(f).find("names shard 'b.safetensors'"), std::string::npos);
  f.write("model.safetensors.index.json",
          R"({"weight_map":{"model.embed_tokens.weight":"a.safetensors"}})");
  EXPECT_NE(open_error(f).find("does not place there"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
