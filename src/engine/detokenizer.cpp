#include "engine/detokenizer.h"

#include <algorithm>

namespace pagoda {

namespace {

// Length of the longest prefix of `s` that ends on a character boundary (a trailing
// incomplete UTF-8 sequence is left out).
size_t whole_characters(std::string_view s) {
  const size_t n = s.size();
  size_t back = 0;
  while (back < 4 && back < n && (static_cast<unsigned char>(s[n - 1 - back]) & 0xC0) == 0x80)
    ++back;
  if (back < n) {
    const auto lead = static_cast<unsigned char>(s[n - 1 - back]);
    const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > back + 1) return n - 1 - back;  // incomplete: hold it back
  }
  return n;
}

}  // namespace

void Utf8Stream::push(std::string_view bytes, std::string* out) {
  if (pending_.empty()) {  // the common case: no copy through pending_
    const size_t cut = whole_characters(bytes);
    out->append(bytes.substr(0, cut));
    pending_.assign(bytes.substr(cut));
    return;
  }
  pending_ += bytes;
  const size_t cut = whole_characters(pending_);
  out->append(pending_, 0, cut);
  pending_.erase(0, cut);
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, std::vector<std::string> stop,
                                               bool include_stop_in_output)
    : tok_(tok), stop_(std::move(stop)), include_stop_(include_stop_in_output) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  for (const std::string& s : stop_) hold_ = std::max(hold_, s.size() - 1);
}

IncrementalDetokenizer::Update IncrementalDetokenizer::push(int32_t token) {
  Update u;
  if (stopped_) return u;
  if (sent_ > hold_ + 256) {  // drop released text no stop string can begin in any more
    const size_t drop = sent_ - hold_;
    decoded_.erase(0, drop);
    sent_ -= drop;
  }
  const size_t old_size = decoded_.size();
  utf8_.push(tok_.token_to_piece(token), &decoded_);
  if (!stop_.empty() && decoded_.size() > old_size) {
    // A stop string completed by this token ends inside the new text, so it starts at
    // most its length - 1 bytes before it.
    const size_t from = old_size > hold_ ? old_size - hold_ : 0;
    size_t best = std::string::npos, best_len = 0;
    for (const std::string& s : stop_) {
      const size_t p = decoded_.find(s, from);
      if (p != std::string::npos && p < best) {
        best = p;
        best_len = s.size();
      }
    }
    if (best != std::string::npos) {
      decoded_.resize(include_stop_ ? best + best_len : best);
      stopped_ = true;
      u.stopped = true;
      if (decoded_.size() > sent_) u.text.assign(decoded_, sent_);
      sent_ = decoded_.size();
      return u;
    }
  }
  size_t safe = decoded_.size() > hold_ ? decoded_.size() - hold_ : 0;
  // Released text ends on a character boundary: a stream must never carry half a
  // character (decoded_ holds whole characters, so a non-continuation byte starts one).
  while (safe > sent_ && (static_cast<unsigned char>(decoded_[safe]) & 0xC0) == 0x80) --safe;
  if (safe > sent_) {
    u.text.assign(decoded_, sent_, safe - sent_);
    sent_ = safe;
  }
  return u;
}

std::string IncrementalDetokenizer::finish() {
  if (stopped_) return {};
  decoded_ += utf8_.flush();
  std::string rest = decoded_.substr(sent_);
  sent_ = decoded_.size();
  return rest;
}

}  // namespace pagoda
