// Generated tokens to text, a piece at a time, the way a stream must see it: only whole
// UTF-8 characters leave, and text that could be the start of a stop string is held
// back until it is known not to be one, so a client never receives part of a stop string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

class Utf8Stream {
 public:
  // Appends the whole characters of what came before plus `bytes` to `out`, holding
  // back an incomplete character at the end.
  void push(std::string_view bytes, std::string* out);
  std::string push(std::string_view bytes) {
    std::string out;
    push(bytes, &out);
    return out;
  }
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

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stop_;
  bool include_stop_;
  size_t hold_ = 0;  // longest stop string - 1: bytes that must stay back
  Utf8Stream utf8_;
  // The tail of the whole characters decoded so far: what is not yet released, and the
  // hold_ released bytes before it that a stop string may still begin in. The engine
  // runs this for every generated token, so it keeps no copy of the whole text.
  std::string decoded_;
  size_t sent_ = 0;  // decoded_[0, sent_) has been released
  bool stopped_ = false;
};

}  // namespace pagoda
