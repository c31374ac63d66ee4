#include "engine/detokenizer.h"

#include <algorithm>

namespace pagoda {

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  // Find the end of the last complete character.
  const size_t n = pending_.size();
  size_t back = 0;
  while (back < 4 && back < n &&
         (static_cast<unsigned char>(pending_[n - 1 - back]) & 0xC0) == 0x80)
    ++back;
  size_t cut = n;
  if (back < n) {
    const auto lead = static_cast<unsigned char>(pending_[n - 1 - back]);
    const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > back + 1) cut = n - 1 - back;  // incomplete: hold it back
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
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
  const size_t old_size = decoded_.size();
  decoded_ += utf8_.push(tok_.token_to_piece(token));
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
      if (decoded_.size() > text_.size()) u.text = decoded_.substr(text_.size());
      text_ = decoded_;
      return u;
    }
  }
  const size_t safe = decoded_.size() > hold_ ? decoded_.size() - hold_ : 0;
  if (safe > text_.size()) {
    u.text = decoded_.substr(text_.size(), safe - text_.size());
    text_.append(u.text);
  }
  return u;
}

std::string IncrementalDetokenizer::finish() {
  if (stopped_) return {};
  decoded_ += utf8_.flush();
  std::string rest = decoded_.substr(text_.size());
  text_ = decoded_;
  return rest;
}

}  // namespace pagoda
