// Whether a chat template takes a message's content as OpenAI's list of parts or as a
// string (vLLM's "content format"), decided from the parsed template as vLLM decides it
// from jinja2's AST: a template that loops over a message's content expects the parts.
#pragma once

#include "jinja/ast.h"

namespace pagoda::jinja {

// True when some for loop iterates a message's content: `m.content`, `m['content']` or
// `m.get('content')`, directly or through a variable it was set to, a macro parameter it
// was passed as, a filter or a slice; where `m` is a loop variable over the messages (or
// over a variable set from them: `messages[1:]`, `messages|selectattr(...)`), one item of
// them (`messages[0]`), or a macro parameter given one of those. Like vLLM's detection
// this ignores scopes: a name bound to a message anywhere counts everywhere.
bool iterates_message_content(const Body& body);

}  // namespace pagoda::jinja
