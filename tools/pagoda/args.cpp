#include "args.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace pagoda::cli {

Result<Args> Args::parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) {
      a.positional_.push_back(arg);
      continue;
    }
    std::optional<std::string> inline_value;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs)
      if (s.name == arg || (!s.alias.empty() && s.alias == arg)) spec = &s;
    if (spec == nullptr) return invalid_argument("unknown flag '" + arg + "'");
    if (spec->takes_value) {
      if (inline_value) {
        a.values_[spec->name] = *inline_value;
      } else {
        if (i + 1 >= argc) return invalid_argument("flag " + spec->name + " needs a value");
        a.values_[spec->name] = argv[++i];
      }
    } else {
      if (inline_value) return invalid_argument("flag " + spec->name + " takes no value");
      a.values_[spec->name] = "1";
    }
  }
  return a;
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get_or(const std::string& name, const std::string& def) const {
  return get(name).value_or(def);
}

Result<int64_t> Args::get_int(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  const auto v = get(name);
  if (!v) return def;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0)
    return invalid_argument(name + " expects an integer, got '" + *v + "'");
  if (x < lo || x > hi)
    return invalid_argument(str_format("%s must be in [%lld, %lld], got %lld", name.c_str(),
                                       static_cast<long long>(lo), static_cast<long long>(hi), x));
  return static_cast<int64_t>(x);
}

Result<double> Args::get_double(const std::string& name, double def, double lo, double hi) const {
  const auto v = get(name);
  if (!v) return def;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || errno != 0 || x != x)
    return invalid_argument(name + " expects a number, got '" + *v + "'");
  if (x < lo || x > hi)
    return invalid_argument(str_format("%s must be in [%g, %g], got %g", name.c_str(), lo, hi, x));
  return x;
}

std::string usage(const std::string& command, const std::string& synopsis,
                  const std::vector<FlagSpec>& specs) {
  std::string s = "usage: pagoda " + command + " " + synopsis + "\n";
  for (const FlagSpec& f : specs) {
    std::string left =
        "  " + (f.alias.empty() ? "" : f.alias + ", ") + f.name + (f.takes_value ? " V" : "");
    if (left.size() < 28) left.resize(28, ' ');
    s += left + " " + f.help + "\n";
  }
  return s;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pagoda::cli
