#include "engine/engine_core.h"

#include "core/log.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

namespace pagoda {

struct EngineCore::Req {
  sched::Request s;
  std::string id;
  int index = 0;  // completion index within the request
  SamplingParams params;
  std::optional<Sampler> sampler;
  std::unique_ptr<IncrementalDetokenizer> detok;
  int pending_forks = 0;  // completions still to fork off when the prompt is done
  bool scheduled = false;
  RequestMetrics m;
  // Pipelined steps: the last step queued with this request, and whether it finished
  // while a step held it (its placeholder tokens, < 0, sit at the end of s.tokens).
  uint64_t launched = 0;
  bool done = false;
  int64_t num_output() const { return s.num_tokens() - s.num_prompt_tokens; }
};

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

EngineCore::EngineCore(const EngineCoreConfig& config, ModelRunner& runner, const Tokenizer* tok)
    : config_(config),
      runner_(runner),
      tok_(tok),
      kv_(config.n_blocks, config.block_size, config.enable_prefix_caching),
      sched_(config.sched, kv_) {}

EngineCore::~EngineCore() = default;

Status EngineCore::validate(const std::vector<int32_t>& prompt,
                            const SamplingParams& params) const {
  const int32_t n_vocab = runner_.config().n_vocab;
  for (int32_t t : prompt)
    if (t < 0 || t >= n_vocab)
      return invalid_argument(str_format("prompt token id %d is outside the vocabulary", t));
  if (params.n < 1) return invalid_argument("n must be at least 1");
  if (params.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (params.logprobs && (*params.logprobs < 0 || *params.logprobs > 20))
    return invalid_argument("logprobs must be between 0 and 20");
  if (!(params.temperature >= 0)) return invalid_argument("temperature must be >= 0");
  if (!(params.top_p > 0 && params.top_p <= 1)) return invalid_argument("top_p must be in (0, 1]");
  if (!(params.min_p >= 0 && params.min_p <= 1)) return invalid_argument("min_p must be in [0, 1]");
  sched::Request r;
  r.num_prompt_tokens = static_cast<int64_t>(prompt.size());
  r.max_total_tokens = r.num_prompt_tokens + params.max_tokens;
  r.seq_weight = params.n;
  return sched_.check_admissible(r);
}

Status EngineCore::add_request(const std::string& id, std::vector<int32_t> prompt,
                               const SamplingParams& params, int priority, double arrival_time) {
  if (by_id_.count(id)) return invalid_argument("a request with id '" + id + "' is running");
  PAGODA_RETURN_IF_ERROR(validate(prompt, params));
  auto r = std::make_unique<Req>();
  r->s.id = next_seq_++;
  r->s.priority = priority;
  r->s.num_prompt_tokens = static_cast<int64_t>(prompt.size());
  r->s.max_total_tokens = r->s.num_prompt_tokens + params.max_tokens;
  r->s.seq_weight = params.n;
  r->s.tokens = std::move(prompt);
  r->id = id;
  r->params = params;
  r->sampler.emplace(params, r->s.tokens);
  if (tok_)
    r->detok = std::make_unique<IncrementalDetokenizer>(*tok_, params.stop,
                                                        params.include_stop_str_in_output);
  r->pending_forks = params.n - 1;
  r->m.arrival = arrival_time;
  r->m.prompt_tokens = r->s.num_prompt_tokens;
  if (!pipelinable(params)) ++sync_only_;
  sched_.add(&r->s);
  by_id_[id].push_back(r->s.id);
  stats_.requests_added++;
  stats_.prompt_tokens += r->s.num_prompt_tokens;
  reqs_.emplace(r->s.id, std::move(r));
  return Status::ok();
}

void EngineCore::abort(const std::string& id, std::vector<RequestOutput>* out) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  const std::vector<kv::SeqId> seqs = it->second;
  const double now = Engine::now();
  for (kv::SeqId s : seqs) finish(*reqs_.at(s), FinishReason::kAbort, out, now);
}

EngineCore::Req* EngineCore::fork(Req& parent, int index) {
  auto c = std::make_unique<Req>();
  c->s = parent.s;
  c->s.id = next_seq_++;
  c->s.seq_weight = 1;
  c->id = parent.id;
  c->index = index;
  c->params = parent.params;
  c->sampler = parent.sampler;
  c->sampler->reseed(parent.params.seed ? *parent.params.seed + static_cast<uint64_t>(index)
                                        : random_seed());
  if (tok_)
    c->detok = std::make_unique<IncrementalDetokenizer>(*tok_, parent.params.stop,
                                                        parent.params.include_stop_str_in_output);
  c->scheduled = true;
  c->m = parent.m;
  if (!pipelinable(c->params)) ++sync_only_;
  kv_.fork(parent.s.id, c->s.id);
  sched_.add_running(&c->s);
  by_id_[c->id].push_back(c->s.id);
  Req* raw = c.get();
  reqs_.emplace(c->s.id, std::move(c));
  return raw;
}

namespace {

// Log-probabilities from raw logits: the chosen token's and the k most likely.
TokenLogprob logprobs_of(const float* logits, int32_t n_vocab, int32_t chosen, int k) {
  float mx = -INFINITY;
  for (int32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  TokenLogprob lp;
  lp.token = chosen;
  lp.logprob = logits[chosen] - lse;
  if (k > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    k = std::min(k, n_vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int i = 0; i < k; ++i)
      lp.top.emplace_back(idx[static_cast<size_t>(i)], logits[idx[i]] - lse);
  }
  return lp;
}

}  // namespace

void EngineCore::sample_into(Req& r, float* logits, int32_t chosen, std::vector<RequestOutput>* out,
                             double now, int64_t slot) {
  const int32_t n_vocab = runner_.config().n_vocab;
  std::vector<float> raw;
  std::vector<Req*> children;
  if (r.pending_forks > 0 || r.params.logprobs) raw.assign(logits, logits + n_vocab);
  if (r.pending_forks > 0) {
    // The prompt is computed: the other completions start here, sharing its blocks.
    for (int i = 1; i <= r.pending_forks; ++i) children.push_back(fork(r, i));
    r.pending_forks = 0;
    r.s.seq_weight = 1;
  }

  int32_t tok = chosen;
  if (tok >= 0)
    r.sampler->accept(tok);
  else
    tok = r.sampler->sample(logits, n_vocab);
  if (slot < 0) {
    slot = r.s.num_tokens();
    r.s.tokens.push_back(tok);
  }
  // Tokens up to this one (a pipelined step may hold a placeholder after it).
  const int64_t upto = slot + 1, n_output = upto - r.s.num_prompt_tokens;
  stats_.generation_tokens++;
  if (n_output == 1) r.m.first_token = now;
  r.m.last_token = now;

  RequestOutput o;
  o.request_id = r.id;
  o.index = r.index;
  o.time = now;
  o.token_ids.push_back(tok);
  if (r.params.logprobs)
    o.logprobs.push_back(logprobs_of(raw.data(), n_vocab, tok, *r.params.logprobs));

  const auto& stop_ids = r.params.stop_token_ids;
  FinishReason why = FinishReason::kNone;
  if (std::find(stop_ids.begin(), stop_ids.end(), tok) != stop_ids.end() ||
      (!r.params.ignore_eos && tok_ && tok_->is_end_of_generation(tok))) {
    why = FinishReason::kStop;
  } else if (r.detok) {
    IncrementalDetokenizer::Update u = r.detok->push(tok);
    o.text = std::move(u.text);
    if (u.stopped) why = FinishReason::kStop;
  }
  if (why == FinishReason::kNone &&
      (n_output >= r.params.max_tokens || upto >= config_.sched.max_model_len))
    why = FinishReason::kLength;
  if (why != FinishReason::kNone)
    finish(r, why, out, now, &o);
  else
    out->push_back(std::move(o));

  for (Req* c : children) {
    std::vector<float> mine = raw;
    sample_into(*c, mine.data(), -1, out, now);
  }
}

void EngineCore::finish(Req& r, FinishReason why, std::vector<RequestOutput>* out, double now,
                        RequestOutput* pending, const std::string& error) {
  RequestOutput o;
  if (pending) o = std::move(*pending);
  o.request_id = r.id;
  o.index = r.index;
  o.time = now;
  if (r.detok && why != FinishReason::kError) o.text += r.detok->finish();
  o.finished = true;
  o.finish_reason = why;
  o.error = error;
  r.m.finished = now;
  // Not counting the placeholders of pipelined steps still queued (at the end).
  int64_t generated = r.num_output();
  for (auto t = r.s.tokens.rbegin(); t != r.s.tokens.rend() && *t < 0; ++t) --generated;
  r.m.generation_tokens = generated;
  r.m.cached_tokens = r.s.num_cached_tokens;
  r.m.preemptions = r.s.num_preemptions;
  o.metrics = r.m;
  out->push_back(o);
  // Completions that were never forked end with their parent.
  for (int i = 1; i <= r.pending_forks; ++i) {
    RequestOutput c;
    c.request_id = r.id;
    c.index = i;
    c.time = now;
    c.finished = true;
    c.finish_reason = why;
    c.error = error;
    c.metrics = r.m;
    c.metrics.generation_tokens = 0;
    out->push_back(std::move(c));
  }
  if (why == FinishReason::kAbort)
    stats_.requests_aborted++;
  else
    stats_.requests_finished++;
  if (!pipelinable(r.params)) --sync_only_;
  sched_.remove(&r.s);
  auto it = by_id_.find(r.id);
  std::erase(it->second, r.s.id);
  if (it->second.empty()) by_id_.erase(it);
  auto node = reqs_.find(r.s.id);
  if (inflight_ && r.launched == inflight_->id) {
    // A queued step still holds it: kept (its token there unwanted) until collected.
    r.done = true;
    zombies_.push_back(std::move(node->second));
  }
  reqs_.erase(node);  // r is gone from here on, unless a zombie
}

void EngineCore::fail_step(const std::vector<Req*>& reqs, const Status& s,
                           std::vector<RequestOutput>* out) {
  log_error("engine step failed: " + s.message());
  stats_.failed_steps++;
  stats_.last_step_failed = true;
  const double now = Engine::now();
  for (Req* r : reqs)
    if (!r->done)  // finished earlier (a pipelined step's zombie)
      finish(*r, FinishReason::kError, out, now, nullptr, "the model failed: " + s.message());
}

void EngineCore::fill_sampling(const sched::SchedulerOutput& so) {
  sampling_.rows.clear();
  sampling_.penalties.clear();
  for (size_t i = 0; i < so.seqs.size(); ++i)
    if (so.seqs[i].samples)
      sampling_.rows.push_back(step_reqs_[i]->sampler->device_row(&sampling_.penalties));
}

bool EngineCore::greedy_step(const sched::SchedulerOutput& so) const {
  if (!runner_.picks_tokens(false)) return false;
  for (size_t i = 0; i < so.seqs.size(); ++i) {
    if (!so.seqs[i].samples) continue;
    const Req& r = *step_reqs_[i];
    if (!r.sampler->plain_greedy() || r.params.logprobs || r.pending_forks > 0) return false;
  }
  return true;
}

bool EngineCore::device_sampling_step(const sched::SchedulerOutput& so) const {
  if (!config_.device_sampling || !runner_.picks_tokens(true)) return false;
  for (size_t i = 0; i < so.seqs.size(); ++i) {
    if (!so.seqs[i].samples) continue;
    const Req& r = *step_reqs_[i];
    if (r.params.logprobs || r.pending_forks > 0) return false;
  }
  return true;
}

Status EngineCore::build_batch(const sched::SchedulerOutput& so) {
  const double now = Engine::now();
  // Each scheduled request's record, looked up once: the step's loops below would
  // otherwise each pay a hash lookup (two cache misses) per sequence.
  step_reqs_.clear();
  for (const sched::ScheduledSeq& q : so.seqs) step_reqs_.push_back(reqs_.at(q.req->id).get());
  for (const kv::BlockCopy& c : so.copies) PAGODA_RETURN_IF_ERROR(runner_.copy_block(c.src, c.dst));
  batch_.tokens.clear();
  batch_.seqs.clear();
  batch_.logit_rows.clear();
  int row = 0;
  for (size_t i = 0; i < so.seqs.size(); ++i) {
    const sched::ScheduledSeq& q = so.seqs[i];
    Req& r = *step_reqs_[i];
    const int64_t pos0 = r.s.num_computed;
    batch_.tokens.insert(batch_.tokens.end(), r.s.tokens.begin() + pos0,
                         r.s.tokens.begin() + pos0 + q.num_tokens);
    BatchSeq a;
    a.q_row = row;
    a.n_q = q.num_tokens;
    a.pos0 = static_cast<int>(pos0);
    a.blocks = kv_.blocks(r.s.id).data();
    batch_.seqs.push_back(a);
    if (q.samples) batch_.logit_rows.push_back(row + q.num_tokens - 1);
    row += q.num_tokens;
    if (!r.scheduled) {
      r.scheduled = true;
      r.m.first_scheduled = now;
    }
    stats_.prompt_tokens_computed +=
        std::max<int64_t>(0, std::min(pos0 + q.num_tokens, r.s.num_prompt_tokens) - pos0);
  }
  return Status::ok();
}

void EngineCore::step(std::vector<RequestOutput>* out) {
  if (config_.async_scheduling && sync_only_ == 0) {
    step_pipelined(out);
    return;
  }
  if (inflight_) {  // a plain step must see every token: finish the queued one first
    const double begin = Engine::now();
    std::optional<InFlight> f = std::move(inflight_);
    inflight_.reset();
    complete(*f, out);
    zombies_.clear();
    stats_.step_s += Engine::now() - begin;
    return;
  }
  const double begin = Engine::now();
  sched::SchedulerOutput so = sched_.schedule();
  if (so.empty()) return;
  Status s = build_batch(so);
  const int32_t n_vocab = runner_.config().n_vocab;
  const bool greedy = greedy_step(so);
  const bool on_device = greedy || device_sampling_step(so);
  if (s) {  // the runner picks the tokens (greedy, or drawn as sampling_ says), or the host
    const double exec_begin = Engine::now();
    if (on_device) {
      if (!greedy) fill_sampling(so);
      chosen_.resize(batch_.logit_rows.size());
    } else {
      logits_.resize(batch_.logit_rows.size() * static_cast<size_t>(n_vocab));
    }
    s = runner_.forward(
        batch_, on_device ? StepOutput::Sampled(chosen_.data(), greedy ? nullptr : &sampling_)
                          : StepOutput::Logits(logits_.data()));
    stats_.execute_s += Engine::now() - exec_begin;
  }
  if (!s) {
    fail_step(step_reqs_, s, out);
    stats_.step_s += Engine::now() - begin;  // a failed step still counts its time
    return;
  }
  stats_.last_step_failed = false;
  sched_.step_done(so);
  stats_.steps++;
  stats_.computed_tokens += so.num_tokens;

  const double done = Engine::now();
  size_t li = 0;
  for (size_t i = 0; i < so.seqs.size(); ++i) {
    if (!so.seqs[i].samples) continue;
    if (on_device)
      sample_into(*step_reqs_[i], nullptr, chosen_[li], out, done);
    else
      sample_into(*step_reqs_[i], logits_.data() + li * static_cast<size_t>(n_vocab), -1, out,
                  done);
    ++li;
  }

  count_waste();
  stats_.step_s += Engine::now() - begin;
}

void EngineCore::count_waste() {
  // KV waste: the unfilled tail of each running sequence's last block.
  int64_t slack = 0;
  for (const sched::Request* r : sched_.running())
    slack += static_cast<int64_t>(kv_.blocks(r->id).size()) * kv_.block_size() - r->num_computed;
  waste_slots_ += static_cast<double>(slack);
  reserved_slots_ += static_cast<double>(kv_.reserved_slots());
}

bool EngineCore::pipelinable(const SamplingParams& p) const {
  if (p.n != 1 || p.logprobs || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
      p.frequency_penalty != 0.0f)
    return false;
  const bool greedy = p.temperature <= 0.0f || p.top_k == 1;
  return (greedy && runner_.picks_tokens(false)) ||
         (config_.device_sampling && runner_.picks_tokens(true));
}

void EngineCore::step_pipelined(std::vector<RequestOutput>* out) {
  // Queue the next step before collecting the one queued last call: the device runs it
  // while the host handles the earlier step's tokens. Sequences sampled by the earlier
  // step take its tokens as placeholders (ModelRunner::launch), and one that turns out to
  // have finished there wastes its slot in the new step.
  const double begin = Engine::now();
  std::optional<InFlight> prev = std::move(inflight_);
  inflight_.reset();
  sched::SchedulerOutput so = sched_.schedule();
  const bool launching = !so.empty();
  if (launching) launch(std::move(so));
  if (prev) complete(*prev, out);
  // Requests finished while a queued step held them go once no queued step does.
  std::erase_if(zombies_, [&](const std::unique_ptr<Req>& z) {
    return !inflight_ || z->launched != inflight_->id;
  });
  if (launching || prev) count_waste();
  stats_.step_s += Engine::now() - begin;
}

void EngineCore::launch(sched::SchedulerOutput so) {
  InFlight f;
  f.id = ++launches_;
  f.status = build_batch(so);  // a failed copy fails the step as a failed launch does
  f.reqs = step_reqs_;
  if (f.status) {
    const bool greedy = greedy_step(so);  // else drawn on the device (pipelinable())
    if (!greedy) fill_sampling(so);
    const double t0 = Engine::now();
    f.status = runner_.launch(batch_, greedy ? nullptr : &sampling_);
    stats_.execute_s += Engine::now() - t0;
  }
  for (Req* r : f.reqs) r->launched = f.id;
  if (f.status) {
    // Placeholders: the token each sampled row will pick, for the next step's batch.
    int32_t row = 0;
    for (size_t i = 0; i < so.seqs.size(); ++i) {
      if (!so.seqs[i].samples) continue;
      Req& r = *f.reqs[i];
      f.slots.push_back(r.s.num_tokens());
      r.s.tokens.push_back(-(row + 1));
      ++row;
    }
    sched_.advance(so);
    stats_.steps++;
    stats_.pipelined_steps++;
    stats_.computed_tokens += so.num_tokens;
  }
  f.so = std::move(so);
  inflight_ = std::move(f);
}

void EngineCore::complete(InFlight& f, std::vector<RequestOutput>* out) {
  std::vector<int32_t> tokens;
  Status s = f.status;
  if (s) {
    const double t0 = Engine::now();
    s = runner_.collect(&tokens);
    stats_.execute_s += Engine::now() - t0;  // waiting for the device
    if (s && tokens.size() != f.slots.size())
      s = internal_error(
          str_format("the step gave %zu tokens for %zu rows", tokens.size(), f.slots.size()));
  }
  if (!s) {
    fail_step(f.reqs, s, out);
    return;
  }
  stats_.last_step_failed = false;
  const double done = Engine::now();
  size_t li = 0;
  for (size_t i = 0; i < f.so.seqs.size(); ++i) {
    Req& r = *f.reqs[i];
    if (!f.so.seqs[i].samples) {
      if (!r.done) sched_.offer_blocks(&r.s);
      continue;
    }
    const int64_t slot = f.slots[li];
    const int32_t tok = tokens[li++];
    if (r.done) continue;  // finished (stopped, aborted) since; its token is not wanted
    r.s.tokens[static_cast<size_t>(slot)] = tok;
    sched_.offer_blocks(&r.s);  // every token below num_computed is known now
    sample_into(r, nullptr, tok, out, done, slot);
  }
  // The queued step's inputs were this step's tokens: their blocks may be full now.
  if (inflight_)
    for (Req* r : inflight_->reqs)
      if (!r->done) sched_.offer_blocks(&r->s);
}

EngineStats EngineCore::stats() const {
  EngineStats s = stats_;
  s.num_running = sched_.num_running();
  s.num_waiting = sched_.num_waiting();
  s.kv_blocks_total = kv_.n_blocks();
  s.kv_blocks_used = kv_.num_used_blocks();
  s.kv_usage = s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0;
  s.prefix_queries = sched_.counters().prefix_queries;
  s.prefix_hits = sched_.counters().prefix_hits;
  s.preemptions = sched_.counters().preemptions;
  s.kv_waste = reserved_slots_ > 0 ? waste_slots_ / reserved_slots_ : 0;
  return s;
}

}  // namespace pagoda
