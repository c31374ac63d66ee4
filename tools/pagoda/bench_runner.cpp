// `pagoda bench --device cuda`: the llama-bench tests on any backend through the
// ModelRunner interface, plus decode at a depth and decode of several sequences at once.
#include "bench_runner.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "common.h"
#include "engine/runner_session.h"
#include "json_out.h"

namespace pagoda::cli {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int bench_runner(const std::string& model_path, const RunnerBenchConfig& bc) {
  const double t_load = now_seconds();
  auto file = open_tensor_source(model_path);
  if (!file) return fail("bench", file.status());
  const int P = bc.prompt_len, G = bc.gen_len, D = bc.depth, B = std::max(1, bc.parallel);
  const int per_seq = std::max(P, D + G) + 16;
  RunnerOptions o;
  o.n_kv_blocks = (per_seq + 15) / 16 * (B + 1);  // the prefill test uses the first
  o.max_batch_tokens = std::max({bc.n_batch, B, 16});
  o.max_logit_rows = B;
  o.device = bc.device;
  o.kv_cache_type = bc.kv_cache_type;
  o.fp8_weights = bc.fp8_weights;
  o.cuda = settings().cuda;
  auto runner = make_cuda_runner(**file, o);
  if (!runner) return fail("bench", runner.status());
  ModelRunner& r = **runner;
  const double load_s = now_seconds() - t_load;
  const ModelConfig& c = r.config();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0, c.n_vocab - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(std::max({P, D, G, 1})));
  for (int32_t& t : prompt) t = dist(rng);
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  std::vector<int32_t> next(static_cast<size_t>(B)), picked;

  // B sequences with their own blocks, each prefilled once with D tokens (untimed; the
  // decode test then rewrites positions D .. D+G-1 on every repeat).
  const int blocks_per = (per_seq + 15) / 16;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < blocks_per; ++i)
      tables[static_cast<size_t>(b)].push_back((b + 1) * blocks_per + i);
  if (G > 0 && D > 0) {
    const int chunk = std::min(D, bc.n_batch);
    const int seqs_per_batch = std::max(1, bc.n_batch / chunk);
    for (int off = 0; off < D; off += chunk) {
      const int n = std::min(chunk, D - off);
      for (int b0 = 0; b0 < B; b0 += seqs_per_batch) {
        Batch pb;
        for (int b = b0; b < std::min(B, b0 + seqs_per_batch); ++b) {
          pb.seqs.push_back(
              {static_cast<int>(pb.tokens.size()), n, off, tables[static_cast<size_t>(b)].data()});
          pb.tokens.insert(pb.tokens.end(), prompt.begin() + off, prompt.begin() + off + n);
        }
        if (Status st = r.forward(pb, StepOutput{}); !st) return fail("bench", st);
      }
    }
  }
  Batch db;
  db.tokens.resize(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    db.seqs.push_back({b, 1, D, tables[static_cast<size_t>(b)].data()});
    db.logit_rows.push_back(b);
  }

  std::vector<double> pp, tg;
  for (int64_t rep = 0; rep <= bc.repeats; ++rep) {  // rep 0 warms up
    if (P > 0) {
      RunnerSession s(r, per_seq, 16, bc.n_batch);
      const double t0 = now_seconds();
      std::vector<int32_t> p(prompt.begin(), prompt.begin() + P);
      if (Status st = s.eval(p, false, &logits); !st) return fail("bench", st);
      if (rep > 0) pp.push_back(P / (now_seconds() - t0));
    }
    if (G > 0) {
      // Plain: each step's tokens are prompt tokens, greedy on the device as an engine
      // sampling on the GPU would run. Pipelined: they are the previous step's picks
      // (placeholders -1 - row), as the engine's pipelined decode feeds them, with one
      // step queued behind the host.
      const double t0 = now_seconds();
      for (int i = 0; i < G; ++i) {
        for (int b = 0; b < B; ++b) {
          db.tokens[static_cast<size_t>(b)] =
              bc.pipelined && i > 0 ? -1 - b : prompt[static_cast<size_t>((i + b) % prompt.size())];
          db.seqs[static_cast<size_t>(b)].pos0 = D + i;
        }
        Status st =
            bc.pipelined ? r.launch(db, nullptr) : r.forward(db, StepOutput::Greedy(next.data()));
        if (st && bc.pipelined && i > 0) st = r.collect(&picked);
        if (!st) return fail("bench", st);
      }
      if (bc.pipelined)
        if (Status st = r.collect(&picked); !st) return fail("bench", st);
      if (rep > 0) tg.push_back(static_cast<double>(B) * G / (now_seconds() - t0));
    }
  }
  const double kv_read = static_cast<double>(KvStorage::bytes_per_token(c)) * (D + G / 2.0) * B;
  const double step_bytes = static_cast<double>(r.decode_weight_bytes()) + kv_read;
  const double pp_tps = median(pp), tg_tps = median(tg);
  const double gbps = tg_tps / B * step_bytes / 1e9;
  if (bc.json) {
    std::printf(
        "{\"model\":%s,\"device\":%s,\"prompt_len\":%d,\"gen_len\":%d,\"depth\":%d,\"parallel\":%d,"
        "\"repeats\":%lld,\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,\"prefill_runs\":%s,"
        "\"decode_runs\":%s,\"decode_bytes_per_step\":%.0f,\"decode_gb_s\":%.1f,\"load_s\":%.3f,"
        "\"pipelined\":%s,\"weight_bytes\":%zu}\n",
        json_string(model_path).c_str(), json_string(r.describe()).c_str(), P, G, D, B,
        static_cast<long long>(bc.repeats), pp_tps, tg_tps, json_array(pp).c_str(),
        json_array(tg).c_str(), step_bytes, gbps, load_s, bc.pipelined ? "true" : "false",
        r.weight_bytes());
  } else {
    std::printf("model %s (%s)\n%s, load %.2f s\n", model_path.c_str(), c.name.c_str(),
                r.describe().c_str(), load_s);
    if (P > 0) std::printf("prefill pp%d: %.1f tok/s (median of %zu)\n", P, pp_tps, pp.size());
    if (G > 0)
      std::printf(
          "decode  tg%d @ depth %d x %d seqs%s: %.1f tok/s (median of %zu), %.1f MB/step, %.0f "
          "GB/s\n",
          G, D, B, bc.pipelined ? " (pipelined)" : "", tg_tps, tg.size(), step_bytes / 1e6, gbps);
  }
  return 0;
}

}  // namespace pagoda::cli
