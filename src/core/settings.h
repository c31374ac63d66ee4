// The one table of PAGODA_* environment variables: name, type, default, meaning, and how
// each sets a field of Settings (include/pagoda/settings.h). read_settings() is the only
// place that reads them; the CLI calls it once at start-up and passes the values down.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "pagoda/settings.h"

namespace pagoda {

struct SettingSpec {
  const char* name;
  const char* type;      // what the value may be, e.g. "0|1", "integer 0..1048576", "names"
  const char* fallback;  // in force when unset or empty
  const char* meaning;
  Status (*set)(std::string_view text, Settings* s);  // text is not empty
  std::string (*show)(const Settings& s);             // the value in force
};

std::span<const SettingSpec> setting_table();

// Reads every variable of the table through `lookup` (the process environment when
// empty); unset or empty keeps the default; a malformed value is an error naming it.
Result<Settings> read_settings(const std::function<const char*(const char*)>& lookup = {});

// Parses `text` as a whole decimal integer in [lo, hi], or an error naming the setting
// `name` (atoi's "garbage is 0" once turned a typo into another configuration).
Result<int64_t> parse_setting(const char* name, const char* text, int64_t lo, int64_t hi);

// The table with the values in force, one row a variable (`pagoda info --env`).
std::string describe_settings(const Settings& s);

}  // namespace pagoda
