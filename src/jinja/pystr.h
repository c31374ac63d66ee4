// Python's str semantics over UTF-8: code point lengths and slices, str.isspace(), case
// mapping, repr() of floats and strings, and the two formatting languages ('%' and
// str.format) as far as chat templates use them. The builders whose output can outgrow
// their input (split, replace, escaping, the two formattings) charge what they build to
// the running rendering's allocation budget (alloc_budget.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

class Value;

std::vector<uint32_t> to_code_points(std::string_view s);
std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end);
size_t code_point_count(std::string_view s);
bool valid_utf8(std::string_view s);

bool py_isspace(uint32_t cp);
uint32_t py_lower(uint32_t cp);
uint32_t py_upper(uint32_t cp);
bool py_isalpha(uint32_t cp);
bool py_isdigit(uint32_t cp);
bool py_isprintable(uint32_t cp);

std::string str_lower(std::string_view s);
std::string str_upper(std::string_view s);
std::string str_capitalize(std::string_view s);
std::string str_title(std::string_view s);
// str.strip() family: `chars` null means whitespace.
std::string str_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(): no separator splits on whitespace runs; maxsplit < 0 means all.
std::vector<std::string> str_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> str_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::string str_replace(std::string_view s, std::string_view old, std::string_view repl,
                        int64_t count);

std::string float_repr(double v);
std::string string_repr(std::string_view s);

// 'fmt % args' with Python's printf-style conversions.
std::string percent_format(const std::string& fmt, const Value& args);
// str.format(*pos, **kw).
std::string brace_format(const std::string& fmt, const std::vector<Value>& pos,
                         const std::vector<std::pair<std::string, Value>>& kw);

// markupsafe.escape for the few values that meet it (escape filter, Markup + str).
std::string html_escape(std::string_view s);

}  // namespace pagoda::jinja
