// The whole forward pass: a small random model (llama and qwen2 layouts, every weight
// type) run by the CPU Model and by the CUDA runner over the same batches (prefill
// chunks through both attention kernels, then batched decode steps of two sequences);
// logits compared by normalised error.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "backend/cpu/matmul.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "harness.h"
#include "model/cuda/cuda_model.h"
#include "model/gguf_writer.h"
#include "model/runner.h"

namespace pagoda::cuda::testing {
namespace {

class CudaModel : public CudaTest {};

struct ModelSpec {
  const char* arch;
  DType type;
  int dim, heads, kv_heads, ffn, layers, vocab;
  bool tied, freq_factors;
};

std::string write_model(const ModelSpec& s, std::mt19937& rng) {
  GgufWriter w;
  const std::string a = s.arch;
  w.set_string("general.architecture", a);
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.layers));
  w.set_u32(a + ".context_length", 4096);
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.dim));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.ffn));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.heads));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(a + ".rope.freq_base", 500000.0f);
  const int hd = s.dim / s.heads, q = s.dim, kv = s.kv_heads * hd;
  auto add = [&](const std::string& name, int64_t cols, int64_t rows, float sd, float mean,
                 DType type) {
    std::normal_distribution<float> dist(mean, sd);
    const size_t rb = row_bytes(type, cols);
    std::vector<uint8_t> data(rb * static_cast<size_t>(rows));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (float& x : row) x = dist(rng);
      if (!cpu::quantize_row(type, row.data(), data.data() + rb * r, cols))
        ADD_FAILURE() << "quantize";
    }
    std::vector<int64_t> ne = {cols};
    if (rows > 1) ne.push_back(rows);
    w.add_tensor(name, type, ne, std::move(data));
  };
  // Embeddings wider than the 0.02 of the matrices so logits have a clear order.
  add("token_embd.weight", s.dim, s.vocab, 1.0f, 0, s.type);
  add("output_norm.weight", s.dim, 1, 0.1f, 1.0f, DType::kF32);
  if (!s.tied) add("output.weight", s.dim, s.vocab, 0.05f, 0, s.type);
  if (s.freq_factors) add("rope_freqs.weight", hd / 2, 1, 0.5f, 2.0f, DType::kF32);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", s.dim, 1, 0.1f, 1.0f, DType::kF32);
    add(p + "attn_q.weight", s.dim, q, 0.05f, 0, s.type);
    add(p + "attn_k.weight", s.dim, kv, 0.05f, 0, s.type);
    add(p + "attn_v.weight", s.dim, kv, 0.05f, 0, s.type);
    if (a == "qwen2") {
      add(p + "attn_q.bias", q, 1, 0.2f, 0, DType::kF32);
      add(p + "attn_k.bias", kv, 1, 0.2f, 0, DType::kF32);
      add(p + "attn_v.bias", kv, 1, 0.2f, 0, DType::kF32);
    }
    add(p + "attn_output.weight", q, s.dim, 0.05f, 0, s.type);
    add(p + "ffn_norm.weight", s.dim, 1, 0.1f, 1.0f, DType::kF32);
    add(p + "ffn_gate.weight", s.dim, s.ffn, 0.05f, 0, s.type);
    add(p + "ffn_up.weight", s.dim, s.ffn, 0.05f, 0, s.type);
    add(p + "ffn_down.weight", s.ffn, s.dim, 0.05f, 0, s.type);
  }
  const std::string path = str_format("/tmp/pagoda_cuda_test_%d_%s_%s.gguf", getpid(), s.arch,
                                      std::string(dtype_name(s.type)).c_str());
  if (!w.write(path)) ADD_FAILURE() << "writing " + path;
  return path;
}

// Two sequences: A's prompt goes through the tensor-core kernel in two chunks, B's short
// prompt through the row kernel; then both decode together.
void compare_backends(const ModelSpec& s, double bound, std::mt19937& rng, int n_decode = 3,
                      int split_keys = CudaSwitches{}.split_keys) {
  const std::string path = write_model(s, rng);
  auto file = open_tensor_source(path);
  if (!file) FAIL() << file.status().message();
  auto cpu_model = Model::load(**file);
  if (!cpu_model) FAIL() << cpu_model.status().message();
  RunnerOptions o;
  o.cuda.split_keys = split_keys;
  o.n_kv_blocks = 64;
  o.max_batch_tokens = 160;
  ThreadPool pool(4);
  auto cpu = make_cpu_runner(**cpu_model, pool, o);
  auto gpu = cuda::make_runner(**file, o);
  std::remove(path.c_str());
  if (!gpu) FAIL() << gpu.status().message();
  const int V = s.vocab;
  std::vector<int32_t> table_a(32), table_b(32);
  for (int i = 0; i < 32; ++i) {
    table_a[static_cast<size_t>(i)] = 2 * i + 1;  // interleaved blocks
    table_b[static_cast<size_t>(i)] = 2 * i;
  }
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  auto step = [&](const std::vector<std::pair<int, int>>& parts, const std::string& what) {
    // parts: (sequence, n_q) with positions continuing from each sequence's past.
    static int past[2];
    if (what == "reset") {
      past[0] = past[1] = 0;
      return;
    }
    Batch b;
    for (auto [seq, n_q] : parts) {
      BatchSeq a;
      a.q_row = static_cast<int>(b.tokens.size());
      a.n_q = n_q;
      a.pos0 = past[seq];
      a.blocks = seq == 0 ? table_a.data() : table_b.data();
      for (int i = 0; i < n_q; ++i) {
        b.tokens.push_back(tok(rng));
        b.logit_rows.push_back(a.q_row + i);
      }
      b.seqs.push_back(a);
      past[seq] += n_q;
    }
    std::vector<float> lc(b.logit_rows.size() * static_cast<size_t>(V)), lg(lc.size(), NAN);
    EXPECT_OK(cpu->forward(b, StepOutput::Logits(lc.data())));
    EXPECT_OK((*gpu)->forward(b, StepOutput::Logits(lg.data())));
    EXPECT_NMSE(
        str_format("%s %s %s", s.arch, std::string(dtype_name(s.type)).c_str(), what.c_str()),
        lg.data(), lc.data(), lc.size(), bound);
  };
  step({}, "reset");
  step({{0, 100}, {1, 3}}, "prefill 100 + 3");
  step({{0, 50}}, "prefill chunk 50 at 100");
  for (int i = 0; i < n_decode; ++i)
    step({{0, 1}, {1, 1}}, str_format("decode step %d (2 seqs)", i));
  step({{1, 70}, {0, 1}}, "chunk 70 at 5 + decode");
  // Copy-on-write: A's first block (positions 0-15) copied to an unused block, then a
  // new sequence continues from it at position 16.
  EXPECT_OK(cpu->copy_block(table_a[0], 61));
  EXPECT_OK((*gpu)->copy_block(table_a[0], 61));
  const std::vector<int32_t> table_c = {61, 59};
  Batch b;
  b.tokens = {tok(rng)};
  b.seqs.push_back({0, 1, 16, table_c.data()});
  b.logit_rows = {0};
  std::vector<float> lc(static_cast<size_t>(V)), lg(lc.size(), NAN);
  EXPECT_OK(cpu->forward(b, StepOutput::Logits(lc.data())));
  EXPECT_OK((*gpu)->forward(b, StepOutput::Logits(lg.data())));
  EXPECT_NMSE(str_format("%s %s copied block", s.arch, std::string(dtype_name(s.type)).c_str()),
              lg.data(), lc.data(), lc.size(), bound);
}

TEST_F(CudaModel, model_forward_matches_cpu) {
  std::mt19937 rng(20);
  // Float weights: both sides multiply the same rounded operands; the differences are
  // summation order and attention's fp16 softmax weights. Quantized weights: the CPU
  // quantizes activations to 8 bits, the GPU keeps them in fp16.
  const double kFloat = 1e-5, kBf16 = 1e-4, kQuant = 1e-3;
  compare_backends({"llama", DType::kF32, 256, 4, 2, 512, 2, 1000, false, true}, kFloat, rng);
  compare_backends({"llama", DType::kF16, 256, 4, 2, 512, 2, 1000, true, false}, kFloat, rng);
  compare_backends({"llama", DType::kBF16, 512, 4, 1, 768, 2, 1000, false, false}, kBf16, rng);
  compare_backends({"qwen2", DType::kF16, 256, 4, 2, 512, 2, 1000, false, false}, kFloat, rng);
  compare_backends({"llama", DType::kQ8_0, 256, 4, 2, 512, 2, 1000, false, false}, kQuant, rng);
  compare_backends({"qwen2", DType::kQ4_0, 256, 4, 2, 512, 2, 1000, true, false}, kQuant, rng);
  compare_backends({"llama", DType::kQ4_1, 256, 4, 2, 512, 2, 1000, false, false}, kQuant, rng);
  // The K types in their own device layout (no conversion at load).
  compare_backends({"llama", DType::kQ4_K, 256, 4, 2, 512, 2, 1000, false, false}, kQuant, rng);
  compare_backends({"qwen2", DType::kQ5_K, 256, 4, 2, 512, 2, 1000, true, false}, kQuant, rng);
  compare_backends({"llama", DType::kQ6_K, 256, 4, 2, 512, 2, 1000, false, false}, kQuant, rng);
}

// Decode KV splits from the context (CudaSwitches::split_keys, PAGODA_CUDA_SPLIT_KEYS; 0 is the
// batch-only rule, 256 the default that the other tests run): with 10 keys a split, A's decode rows
// (context 151 on) run 16 splits until context 161, then 32, each count eager once, then captured,
// then replayed from its graph; B's (4 on) run 1. Every step's logits must still be the CPU's.
TEST_F(CudaModel, decode_split_keys_match_cpu) {
  std::mt19937 rng(23);
  for (const int keys : {0, 10, 64}) {
    std::printf("split_keys %d\n", keys);
    compare_backends({"llama", DType::kF16, 256, 4, 2, 512, 2, 1000, false, false}, 1e-5, rng, 14,
                     keys);
    compare_backends({"llama", DType::kQ4_0, 256, 4, 2, 512, 2, 1000, false, false}, 1e-3, rng, 14,
                     keys);
  }
}

// Pipelined steps (launch / collect): each decode step is queued before the previous
// step's picks are collected, its inputs given as placeholders for those picks. The
// tokens must be a plain runner's, step for step, greedy and sampled (the same uniforms),
// through the decode graphs; bad placeholders and a third queued step are refused.
void compare_pipeline(const ModelSpec& spec, bool sampled, std::mt19937& rng) {
  const std::string path = write_model(spec, rng);
  auto file = open_tensor_source(path);
  if (!file) FAIL() << file.status().message();
  RunnerOptions o;
  o.n_kv_blocks = 64;
  o.max_batch_tokens = 160;
  o.max_logit_rows = 8;
  auto plain = cuda::make_runner(**file, o);
  auto piped = cuda::make_runner(**file, o);
  std::remove(path.c_str());
  if (!plain || !piped) FAIL() << "loading the runners";
  const std::string what = str_format("pipeline %s %s", std::string(dtype_name(spec.type)).c_str(),
                                      sampled ? "sampled" : "greedy");
  std::vector<int32_t> table_a(32), table_b(32);
  for (int i = 0; i < 32; ++i) {
    table_a[static_cast<size_t>(i)] = 2 * i + 1;
    table_b[static_cast<size_t>(i)] = 2 * i;
  }
  std::uniform_int_distribution<int32_t> tok(0, spec.vocab - 1);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  // Step 0: prefills of 40 and 7 tokens; steps 1..: one decode row each.
  auto batch = [&](int step, const std::vector<int32_t>& inputs) {
    Batch b;
    const int n_a = step == 0 ? 40 : 1, n_b = step == 0 ? 7 : 1;
    const int pos_a = step == 0 ? 0 : 39 + step, pos_b = step == 0 ? 0 : 6 + step;
    b.seqs.push_back({0, n_a, pos_a, table_a.data()});
    b.seqs.push_back({n_a, n_b, pos_b, table_b.data()});
    b.tokens = inputs;
    b.logit_rows = {n_a - 1, n_a + n_b - 1};
    return b;
  };
  auto sampling = [&] {
    StepSampling sm;
    for (int r = 0; r < 2; ++r) {
      SamplingRow row;
      row.temperature = 0.9f;
      row.top_k = 40;
      row.top_p = 0.95f;
      row.u = uni(rng);
      sm.rows.push_back(row);
    }
    return sm;
  };
  constexpr int kSteps = 12;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 47; ++i) prompt.push_back(tok(rng));
  std::vector<StepSampling> draws;
  for (int i = 0; i < kSteps; ++i) draws.push_back(sampling());
  // The plain runner, one step at a time.
  std::vector<std::vector<int32_t>> want;
  std::vector<int32_t> in = prompt;
  for (int i = 0; i < kSteps; ++i) {
    std::vector<int32_t> picks(2);
    const Batch b = batch(i, in);
    EXPECT_OK((*plain)->forward(
        b, StepOutput::Sampled(picks.data(), sampled ? &draws[static_cast<size_t>(i)] : nullptr)));
    want.push_back(picks);
    in = picks;
  }
  // The pipelined runner: step i + 1 queued before step i is collected.
  std::vector<std::vector<int32_t>> got;
  auto queue = [&](int i) {
    const Batch b = batch(i, i == 0 ? prompt : std::vector<int32_t>{-1, -2});
    EXPECT_OK((*piped)->launch(b, sampled ? &draws[static_cast<size_t>(i)] : nullptr));
  };
  queue(0);
  for (int i = 1; i <= kSteps; ++i) {
    if (i < kSteps) queue(i);
    std::vector<int32_t> picks;
    EXPECT_OK((*piped)->collect(&picks));
    got.push_back(picks);
  }
  EXPECT_TRUE(got == want) << what + ": the plain runner's tokens";
  // Refusals: a placeholder past the previous step's picks; a third outstanding step.
  EXPECT_TRUE(!(*piped)->launch(batch(kSteps, {-1, -3}), nullptr).is_ok())
      << what + ": row 2 of 2 refused";
  const Batch ok = batch(kSteps, {tok(rng), tok(rng)});
  EXPECT_OK((*piped)->launch(ok, nullptr));
  EXPECT_OK((*piped)->launch(batch(kSteps + 1, {-1, -2}), nullptr));
  EXPECT_TRUE(!(*piped)->launch(batch(kSteps + 2, {-1, -2}), nullptr).is_ok())
      << what + ": third refused";
  std::vector<int32_t> p_ok, p_next, p_swapped;
  EXPECT_OK((*piped)->collect(&p_ok));
  EXPECT_OK((*piped)->collect(&p_next));
  EXPECT_TRUE(!(*piped)->collect(&p_swapped).is_ok())
      << what + ": collect with nothing queued refused";
  // The refusals left the last picks usable: placeholders out of row order, each sequence
  // given the other's pick.
  EXPECT_OK((*piped)->launch(batch(kSteps + 2, {-2, -1}), nullptr));
  EXPECT_OK((*piped)->collect(&p_swapped));
  // The same three steps on the plain runner, the picks fed by hand.
  std::vector<int32_t> w_ok(2), w_next(2), w_swapped(2);
  EXPECT_OK((*plain)->forward(ok, StepOutput::Greedy(w_ok.data())));
  EXPECT_OK((*plain)->forward(batch(kSteps + 1, w_ok), StepOutput::Greedy(w_next.data())));
  EXPECT_OK((*plain)->forward(batch(kSteps + 2, {w_next[1], w_next[0]}),
                              StepOutput::Greedy(w_swapped.data())));
  EXPECT_TRUE(p_ok == w_ok && p_next == w_next && p_swapped == w_swapped)
      << what + ": steps after the refusals, swapped placeholders, the plain runner's tokens";
}

TEST_F(CudaModel, pipelined_steps_match_plain_steps) {
  std::mt19937 rng(21);
  for (bool sampled : {false, true}) {
    compare_pipeline({"llama", DType::kF16, 256, 4, 2, 512, 2, 1000, false, false}, sampled, rng);
    compare_pipeline({"llama", DType::kQ4_0, 256, 4, 2, 512, 2, 1000, false, false}, sampled, rng);
  }
}

}  // namespace
}  // namespace pagoda::cuda::testing
