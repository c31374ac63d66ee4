// Splits template source into tokens the way jinja2's lexer does with Hugging Face's
// settings (trim_blocks, lstrip_blocks, no kept trailing newline): text, the delimiters of
// {% %} and {{ }}, and inside them names, literals and operators. Comments and raw blocks
// are resolved here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::jinja {

enum class Tok {
  kData,
  kBlockBegin,
  kBlockEnd,
  kVarBegin,
  kVarEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof,
};

struct Token {
  Tok type;
  std::string text;  // data, name, decoded string literal or operator
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

// Throws TemplateError (kSyntax) with the line on malformed input.
std::vector<Token> tokenize(const std::string& source);

}  // namespace pagoda::jinja
