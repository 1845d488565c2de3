// Alloy's settings (issue 16): the knobs for experiments and tuning that the library reads, each
// with one name, one documented meaning and a default, listed by `alloy --help`. A setting comes
// from the environment (ALLOY_NAME=VALUE, read once per process, at the first use of any setting)
// or from set() (the command line's `--set NAME=VALUE`, the Python module's alloy.set_setting);
// none is needed for a correct or fast run. Switches take 0 or 1 (also true/false, on/off,
// yes/no; empty: the default) and mean the same in every one: 1 turns the named behaviour on. A value that is not
// one of those, or an integer out of its range, is a user error naming the variable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace alloy::settings {

enum class Kind { flag, integer, text };

struct Setting {
  const char* name;      // ALLOY_...
  Kind kind;
  const char* fallback;  // the default, as text
  int64_t lo = 0, hi = 0;  // integers: the accepted range
  const char* help;
};

// Every setting, in the order `alloy --help` lists them.
const std::vector<Setting>& all();

// The current value of a setting of that kind (an internal error for a name not in all()).
bool flag(const char* name);
int64_t integer(const char* name);
std::string text(const char* name);

// Sets a setting by name (with or without the ALLOY_ prefix) from text: a user error, saying
// what is accepted, for an unknown name or a value out of its kind or range. Call before the
// work it should affect (values some passes read once per process are kept once read).
void set(const std::string& name, const std::string& value);

// A setting's current value as text (for saving and restoring it); a user error for an unknown name.
std::string current(const std::string& name);

// "ALLOY_A=1, ALLOY_B=3" for every setting whose value differs from its default; empty when none.
std::string non_default();

// The line every dump starts with when settings differ from their defaults, a comment of the
// .fusion format ("# settings: ALLOY_A=1\n"); empty when none does.
std::string dump_note();

// The `alloy --help` footer: one line or two per setting.
std::string help_text();

}  // namespace alloy::settings
