// Builds the statement tree from tokens with jinja2's grammar and operator precedence.
#pragma once

#include <string>

#include "jinja/ast.h"

namespace pagoda::jinja {

// Nesting deeper than this (statements plus parenthesised expressions) is refused, so a
// hostile template cannot exhaust the stack.
constexpr int kMaxParseDepth = 200;

// Throws TemplateError (kSyntax or kUnsupported) naming the line.
Body parse_template(const std::string& source);

// The names a frame's body assigns unconditionally (set, block set, macro; an if counts
// when every branch assigns the name). jinja2 binds such a name to its frame for the whole
// frame: an inner frame (a loop body, a macro...) that reads it before the assignment sees
// it undefined instead of the render context's value of the same name.
std::vector<std::string> frame_stores(const Body& body);
// Fills Stmt::declared for every statement that opens a frame.
void annotate_frames(Body& body);

}  // namespace pagoda::jinja
