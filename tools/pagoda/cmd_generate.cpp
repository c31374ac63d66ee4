// pagoda generate: offline batch generation, like vLLM's LLM.generate. Reads one JSON
// request per line, runs them all through the batching engine at once, and writes one
// JSON result per completion in input order.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine_flags.h"

namespace pagoda::cli {
namespace {

using nlohmann::json;

struct Job {
  json id;
  std::string key;
  bool tokens = false;
  std::string text;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int priority = 0;
};

template <typename T>
Status get_field(const json& j, const char* name, T* out) {
  if (!j.contains(name)) return Status::ok();
  try {
    *out = j.at(name).get<T>();
  } catch (const json::exception&) {
    return invalid_argument(std::string("field '") + name + "' has the wrong type");
  }
  return Status::ok();
}

// One input line to a job; the flags' sampling parameters are the defaults.
Result<Job> parse_job(const std::string& line, size_t lineno, const SamplingParams& defaults) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(str_format("line %zu is not a JSON object", lineno));
  static const char* kKnown[] = {"id",
                                 "prompt",
                                 "max_tokens",
                                 "temperature",
                                 "top_p",
                                 "top_k",
                                 "min_p",
                                 "seed",
                                 "n",
                                 "stop",
                                 "stop_token_ids",
                                 "ignore_eos",
                                 "repetition_penalty",
                                 "presence_penalty",
                                 "frequency_penalty",
                                 "logprobs",
                                 "priority",
                                 "include_stop_str_in_output"};
  for (const auto& [k, v] : j.items()) {
    bool known = false;
    for (const char* n : kKnown) known |= k == n;
    if (!known)
      return invalid_argument(str_format("line %zu: unknown field '%s'", lineno, k.c_str()));
  }
  Job job;
  job.id = j.contains("id") ? j["id"] : json(std::to_string(lineno));
  job.key = job.id.is_string() ? job.id.get<std::string>() : job.id.dump();
  if (!j.contains("prompt")) return invalid_argument(str_format("line %zu has no prompt", lineno));
  const json& p = j["prompt"];
  if (p.is_string()) {
    job.text = p.get<std::string>();
  } else if (p.is_array() && !p.empty() &&
             std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
    job.tokens = true;
    for (const json& x : p) {
      const int64_t v = x.get<int64_t>();
      if (v < 0 || v > INT32_MAX)
        return invalid_argument(str_format("line %zu: token id %lld is out of range", lineno,
                                           static_cast<long long>(v)));
      job.prompt.push_back(static_cast<int32_t>(v));
    }
  } else {
    return invalid_argument(
        str_format("line %zu: prompt must be a string or a list of token ids", lineno));
  }
  SamplingParams& sp = job.params;
  sp = defaults;
  Status s = Status::ok();
  auto field = [&](const char* name, auto* out) {
    if (s) s = get_field(j, name, out);
  };
  field("max_tokens", &sp.max_tokens);
  field("temperature", &sp.temperature);
  field("top_p", &sp.top_p);
  field("top_k", &sp.top_k);
  field("min_p", &sp.min_p);
  field("n", &sp.n);
  field("stop_token_ids", &sp.stop_token_ids);
  field("ignore_eos", &sp.ignore_eos);
  field("repetition_penalty", &sp.repetition_penalty);
  field("presence_penalty", &sp.presence_penalty);
  field("frequency_penalty", &sp.frequency_penalty);
  field("include_stop_str_in_output", &sp.include_stop_str_in_output);
  field("priority", &job.priority);
  if (s && j.contains("seed")) {
    uint64_t seed = 0;
    s = get_field(j, "seed", &seed);
    sp.seed = seed;
  }
  if (s && j.contains("logprobs")) {
    int lp = 0;
    s = get_field(j, "logprobs", &lp);
    sp.logprobs = lp;
  }
  if (s && j.contains("stop")) {
    if (j["stop"].is_string())
      sp.stop = {j["stop"].get<std::string>()};
    else
      s = get_field(j, "stop", &sp.stop);
  }
  if (!s) return s.with_context(str_format("line %zu", lineno));
  return job;
}

struct Completion {
  std::vector<int32_t> tokens;
  std::string text;
  json logprobs = json::array();
  FinishReason reason = FinishReason::kNone;
  std::string error;
  RequestMetrics metrics;
};

json result_json(const Job& job, int index, const Completion& c) {
  json o;
  o["id"] = job.id;
  if (job.params.n > 1) o["index"] = index;
  // Invalid UTF-8 (a character cut by max_tokens) is replaced rather than failing the dump.
  o["text"] = c.text;
  o["token_ids"] = c.tokens;
  o["finish_reason"] = finish_reason_name(c.reason);
  if (!c.error.empty()) o["error"] = c.error;
  if (job.params.logprobs) o["logprobs"] = c.logprobs;
  o["prompt_tokens"] = c.metrics.prompt_tokens;
  o["cached_tokens"] = c.metrics.cached_tokens;
  return o;
}

void progress(const Engine& engine, size_t total, std::atomic<bool>& stop, double t0) {
  const bool tty = isatty(STDERR_FILENO);
  int64_t last_reported = -1;
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const EngineStats s = engine.stats();
    const int64_t done = s.requests_finished + s.requests_aborted;
    const double el = Engine::now() - t0;
    const int width = 30;
    const int fill = total ? static_cast<int>(width * done / static_cast<int64_t>(total)) : 0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "[%.*s%*s] %lld/%zu done, %d running, %d waiting, %.0f out tok/s, KV %.0f%%",
                  fill, "==============================", width - fill, "",
                  static_cast<long long>(done), total, s.num_running, s.num_waiting,
                  el > 0 ? s.generation_tokens / el : 0.0, 100 * s.kv_usage);
    if (tty) {
      std::fprintf(stderr, "\r%s", line);
    } else if (done * 10 / static_cast<int64_t>(std::max<size_t>(total, 1)) != last_reported) {
      last_reported = done * 10 / static_cast<int64_t>(std::max<size_t>(total, 1));
      std::fprintf(stderr, "%s\n", line);
    }
  }
  if (tty) std::fprintf(stderr, "\n");
}

std::vector<FlagSpec> generate_flag_specs() {
  std::vector<FlagSpec> specs = engine_flag_specs();
  for (FlagSpec& f : sampling_flag_specs()) specs.push_back(f);
  specs.push_back({"--input", "-i", true, "requests, one JSON object per line"});
  specs.push_back({"--output", "-o", true, "results, one JSON object per line (default stdout)"});
  specs.push_back({"--stats-json", "", true, "write run statistics to this file"});
  specs.push_back({"--quiet", "-q", false, "no progress bar"});
  specs.push_back({"--help", "-h", false, "show this help"});
  return specs;
}

// Every non-blank line of the input file.
Result<std::vector<Job>> read_jobs(const std::string& path, const SamplingParams& defaults) {
  PAGODA_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  std::vector<Job> jobs;
  size_t lineno = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    PAGODA_ASSIGN_OR_RETURN(Job job, parse_job(line, lineno, defaults));
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) return invalid_argument("the input has no requests");
  return jobs;
}

// Time to first token over the requests that had one.
struct Ttft {
  double sum = 0;
  int64_t n = 0;
  double mean() const { return n ? sum / static_cast<double>(n) : 0.0; }
};

// A job's completions from its stream (each an error when the engine refused the request).
std::vector<Completion> collect(const Job& j, RequestStream* stream, const std::string& rejected,
                                Ttft* ttft) {
  std::vector<Completion> comps(static_cast<size_t>(std::max(1, j.params.n)));
  if (!stream) {
    for (Completion& c : comps) {
      c.reason = FinishReason::kError;
      c.error = rejected;
    }
    return comps;
  }
  while (auto o = stream->next()) {
    Completion& c = comps.at(static_cast<size_t>(o->index));
    c.tokens.insert(c.tokens.end(), o->token_ids.begin(), o->token_ids.end());
    c.text += o->text;
    for (const TokenLogprob& lp : o->logprobs) {
      json top = json::array();
      for (const auto& [t, l] : lp.top) top.push_back({{"token", t}, {"logprob", l}});
      c.logprobs.push_back({{"token", lp.token}, {"logprob", lp.logprob}, {"top", top}});
    }
    if (o->finished) {
      c.reason = o->finish_reason;
      c.error = o->error;
      c.metrics = o->metrics;
      if (o->metrics.first_token > 0) {
        ttft->sum += o->metrics.first_token - o->metrics.arrival;
        ++ttft->n;
      }
    }
  }
  return comps;
}

// Adds every job to the engine, then writes each one's results in input order as they
// finish. Returns the number of failed completions.
int run_jobs(Engine& e, const std::vector<Job>& jobs, FILE* out, Ttft* ttft) {
  std::vector<std::shared_ptr<RequestStream>> streams(jobs.size());
  std::vector<std::string> rejected(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    auto s = j.tokens ? e.add_request(j.key, j.prompt, j.params, j.priority)
                      : e.add_request(j.key, j.text, j.params, j.priority);
    if (s)
      streams[i] = *s;
    else
      rejected[i] = s.status().message();
  }
  int failures = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::vector<Completion> comps = collect(jobs[i], streams[i].get(), rejected[i], ttft);
    for (size_t k = 0; k < comps.size(); ++k) {
      if (comps[k].reason == FinishReason::kError) ++failures;
      const std::string line = result_json(jobs[i], static_cast<int>(k), comps[k])
                                   .dump(-1, ' ', false, json::error_handler_t::replace);
      std::fprintf(out, "%s\n", line.c_str());
    }
  }
  return failures;
}

json stats_json(const EngineStats& s, size_t requests, int failures, double elapsed,
                const Ttft& ttft) {
  json st;
  st["requests"] = requests;
  st["failed"] = failures;
  st["elapsed_s"] = elapsed;
  st["prompt_tokens"] = s.prompt_tokens;
  st["generation_tokens"] = s.generation_tokens;
  st["output_tokens_per_s"] = s.generation_tokens / elapsed;
  st["computed_tokens"] = s.computed_tokens;
  st["prompt_tokens_computed"] = s.prompt_tokens_computed;
  st["prefix_cache_queries"] = s.prefix_queries;
  st["prefix_cache_hits"] = s.prefix_hits;
  st["preemptions"] = s.preemptions;
  st["kv_waste"] = s.kv_waste;
  st["kv_pool_bytes"] = s.kv_pool_bytes;
  st["kv_blocks"] = s.kv_blocks_total;
  st["steps"] = s.steps;
  st["pipelined_steps"] = s.pipelined_steps;
  st["step_s"] = s.step_s;
  st["execute_s"] = s.execute_s;
  st["mean_ttft_s"] = ttft.mean();
  return st;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  const std::vector<FlagSpec> specs = generate_flag_specs();
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("generate", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("generate",
                            "-m MODEL --input PROMPTS.jsonl [--output OUT.jsonl] [flags]\n"
                            "  input lines: {\"id\":..., \"prompt\": text or token ids, "
                            "optional sampling fields (max_tokens, temperature, top_p, "
                            "top_k, min_p, seed, n, stop, stop_token_ids, ignore_eos, "
                            "logprobs, priority, ...)}",
                            specs)
                          .c_str());
    return 0;
  }
  EngineConfig ec;
  if (Status s = read_engine_flags(*args, &ec); !s) return fail("generate", s);
  SamplingParams defaults;
  if (Status s = read_sampling_flags(*args, &defaults); !s) return fail("generate", s);
  if (!args->has("--input")) return fail("generate", invalid_argument("missing --input FILE"));
  const Result<std::vector<Job>> jobs = read_jobs(*args->get("--input"), defaults);
  if (!jobs) return fail("generate", jobs.status());

  FILE* out = stdout;
  if (args->has("--output")) {
    out = std::fopen(args->get("--output")->c_str(), "w");
    if (!out) return fail("generate", io_error("cannot write '" + *args->get("--output") + "'"));
  }

  const double t_load = Engine::now();
  auto engine = Engine::create(ec);
  if (!engine) return fail("generate", engine.status());
  Engine& e = **engine;
  const double t0 = Engine::now();
  const bool quiet = args->has("--quiet");
  if (!quiet)
    std::fprintf(stderr,
                 "pagoda generate: %zu requests; loaded in %.2f s; KV pool %.1f MiB (%d blocks of "
                 "%d tokens), max_num_seqs %d, max_num_batched_tokens %d\n",
                 jobs->size(), t0 - t_load, e.stats().kv_pool_bytes / 1048576.0,
                 e.stats().kv_blocks_total, e.config().block_size, e.config().max_num_seqs,
                 e.config().max_num_batched_tokens);

  std::atomic<bool> stop{false};
  std::thread bar;
  if (!quiet) bar = std::thread([&] { progress(e, jobs->size(), stop, t0); });
  Ttft ttft;
  const int failures = run_jobs(e, *jobs, out, &ttft);
  const double elapsed = Engine::now() - t0;
  stop = true;
  if (bar.joinable()) bar.join();
  if (out != stdout)
    std::fclose(out);
  else
    std::fflush(stdout);

  const EngineStats s = e.stats();
  if (args->has("--stats-json")) {
    std::ofstream f(*args->get("--stats-json"));
    f << stats_json(s, jobs->size(), failures, elapsed, ttft).dump(2) << "\n";
    if (!f) return fail("generate", io_error("cannot write '" + *args->get("--stats-json") + "'"));
  }
  if (!quiet)
    std::fprintf(stderr,
                 "pagoda generate: %zu requests in %.2f s: %lld prompt tokens (%lld computed, "
                 "%lld from the prefix cache), %lld generated (%.1f tok/s); %lld preemptions; "
                 "KV waste %.2f%%; mean TTFT %.3f s\n",
                 jobs->size(), elapsed, static_cast<long long>(s.prompt_tokens),
                 static_cast<long long>(s.prompt_tokens_computed),
                 static_cast<long long>(s.prefix_hits), static_cast<long long>(s.generation_tokens),
                 s.generation_tokens / elapsed, static_cast<long long>(s.preemptions),
                 100 * s.kv_waste, ttft.mean());
  return failures ? 1 : 0;
}

}  // namespace pagoda::cli
