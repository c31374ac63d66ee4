// Builds the statement tree from tokens with jinja2's grammar and operator precedence.
#pragma once

#include <string>

#include "tokenizer/chat_template/ast.h"

namespace pagoda::jinja {

// Nesting deeper than this (statements plus parenthesised expressions) is refused, so a
// hostile template cannot exhaust the stack.
constexpr int kMaxParseDepth = 200;

// Throws TemplateError (kSyntax or kUnsupported) naming the line.
Body parse_template(const std::string& source);

}  // namespace pagoda::jinja
