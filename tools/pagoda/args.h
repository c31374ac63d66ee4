// Flag parsing for the pagoda subcommands: each command declares its flags; anything
// else is an error that names the flag.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda::cli {

struct FlagSpec {
  std::string name;   // "--model"
  std::string alias;  // "-m" or ""
  bool takes_value;
  std::string help;
};

class Args {
 public:
  // Parses argv[first..argc). Returns an error for unknown flags or missing values.
  static Result<Args> parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& def) const;
  Result<int64_t> get_int(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  Result<double> get_double(const std::string& name, double def, double lo, double hi) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// Reads several typed flags and keeps the first error, so a command reads them all and
// checks once. A flag in error reads as its default (always a valid value).
class FlagReader {
 public:
  explicit FlagReader(const Args& args) : args_(args) {}
  int64_t integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) {
    return keep(args_.get_int(name, def, lo, hi), def);
  }
  double number(const std::string& name, double def, double lo, double hi) {
    return keep(args_.get_double(name, def, lo, hi), def);
  }
  const Status& status() const { return status_; }

 private:
  template <typename T>
  T keep(Result<T> r, T def) {
    if (r.is_ok()) return *r;
    if (status_.is_ok()) status_ = r.status();
    return def;
  }
  const Args& args_;
  Status status_;
};

std::string usage(const std::string& command, const std::string& synopsis,
                  const std::vector<FlagSpec>& specs);

// Reads a whole file; an error names the path.
Result<std::string> read_file(const std::string& path);

}  // namespace pagoda::cli
