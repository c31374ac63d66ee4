#include "tokenizer/vocab_test_format.h"

namespace pagoda {

std::vector<std::string> parse_vocab_test_inputs(std::string_view contents) {
  constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (pos < contents.size()) {
    const size_t next = contents.find(kSeparator, pos);
    if (next == std::string_view::npos) {
      inputs.emplace_back(contents.substr(pos));
      break;
    }
    inputs.emplace_back(contents.substr(pos, next - pos));
    pos = next + kSeparator.size();
  }
  return inputs;
}

std::string format_vocab_test_line(const std::vector<TokenId>& ids) {
  std::string line;
  for (TokenId id : ids) line += " " + std::to_string(id);
  line += "\n";
  return line;
}

std::string run_vocab_test(const Tokenizer& tok, const std::vector<std::string>& inputs,
                           bool parse_special, bool add_special) {
  std::string out;
  for (const std::string& in : inputs)
    out += format_vocab_test_line(tok.encode(in, add_special, parse_special));
  return out;
}

}  // namespace pagoda
