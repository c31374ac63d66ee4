// Generated tokens to text, a piece at a time, the way a stream must see it: only whole
// UTF-8 characters leave, and text that could be the start of a stop string is held
// back until it is known not to be one, so a client never receives part of a stop string.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

// Collects bytes and releases only whole UTF-8 characters.
class Utf8Stream {
 public:
  std::string push(const std::string& bytes);
  // Whatever is left, even an incomplete character.
  std::string flush();

 private:
  std::string pending_;
};

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tok, std::vector<std::string> stop,
                         bool include_stop_in_output);

  struct Update {
    std::string text;      // new text safe to send
    bool stopped = false;  // a stop string was completed; the request ends here
  };
  // Adds a generated token (end-of-generation tokens render as nothing).
  Update push(int32_t token);
  // The request ended: releases the text held back.
  std::string finish();
  // All text released so far.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stop_;
  bool include_stop_;
  size_t hold_ = 0;  // longest stop string - 1: bytes that must stay back
  Utf8Stream utf8_;
  std::string decoded_;  // whole characters decoded so far
  std::string text_;     // decoded_[0, sent) that has been released
  bool stopped_ = false;
};

}  // namespace pagoda
