#include "alloy/common/settings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "alloy/common/error.h"

namespace alloy::settings {
namespace {

using K = Kind;

const std::vector<Setting> kSettings = {
    {"ALLOY_DISABLE_CUDA", K::flag, "0", 0, 0, "behave as if there were no GPU (the CPU path on a GPU host)"},
    {"ALLOY_CACHE_DIR", K::text, "", 0, 0, "where compiled kernels are kept on disk (empty: $XDG_CACHE_HOME/alloy or ~/.cache/alloy)"},
    {"ALLOY_RECOMPUTE_VALUES", K::flag, "0", 0, 0, "row kernels recompute costly values instead of holding them"},
    {"ALLOY_NO_EARLY_LOADS", K::flag, "0", 0, 0, "row kernels load what only the final pass reads in that pass, not with the row"},
    {"ALLOY_ROW_THREADS", K::integer, "256", 32, 1024, "row kernels: the block-size cap (a multiple of 32)", 32},
    {"ALLOY_ROW_MIN_BLOCKS", K::integer, "0", 0, 16, "row kernels: __launch_bounds__ minimum blocks an SM (0: none)"},
    {"ALLOY_NO_WARP_ROWS", K::flag, "0", 0, 0, "no warp-per-row variant for short rows"},
    {"ALLOY_NO_TILE_TRANSPOSES", K::flag, "0", 0, 0, "pointwise kernels read permuted operands directly, not through shared-memory tiles"},
    {"ALLOY_NO_SPLIT_STAGES", K::flag, "0", 0, 0, "normalizations over a strided axis run as one row kernel, not a kernel a pass"},
    {"ALLOY_NO_EDGE_ELEMENTS", K::flag, "0", 0, 0, "odd widths and totals fall back to scalar bodies instead of edge elements"},
    {"ALLOY_NO_STREAMING_ONLINE", K::flag, "0", 0, 0, "log-sum-exp over long rows holds them in registers instead of one streaming pass"},
    {"ALLOY_STREAMING_THREADS", K::integer, "256", 32, 1024, "streaming log-sum-exp kernels: threads a block (a multiple of 32)", 32},
    {"ALLOY_NO_COLUMN_KERNELS", K::flag, "0", 0, 0, "single-pass reductions over outer axes run as row kernels"},
    {"ALLOY_COLUMN_MIN_STEPS", K::integer, "16", 1, int64_t(1) << 20, "column kernels: at least this many reduced indices a thread"},
    {"ALLOY_COLUMN_BLOCKS_PER_SM", K::integer, "0", 0, 32, "column kernels: size the split for N blocks an SM (0: the occupancy)"},
    {"ALLOY_MATMUL_AUTOTUNE", K::integer, "8", 1, 32, "cuBLASLt: time the heuristic's first N algorithms (1: its first, untimed)"},
    {"ALLOY_DISABLE_EPILOGUES", K::text, "dgelu_bgrad,drelu_bgrad,bgrad_a,bgrad_b", 0, 0,
     "cuBLASLt epilogue kinds to refuse, comma-separated (empty: allow every kind)"},
    {"ALLOY_NO_SIDE_STREAM", K::flag, "0", 0, 0, "no side streams for memory-bound kernels beside GEMMs"},
    {"ALLOY_STAGED_COMMUNICATION", K::flag, "0", 0, 0, "device tensors communicate through host memory, not NCCL"},
    {"ALLOY_NCCL_LIBRARY", K::text, "", 0, 0, "the NCCL library to load (empty: libnccl.so.2)"},
    {"ALLOY_PIPELINE_REMEASURE", K::flag, "0", 0, 0, "--pipeline auto measures the link and GEMM rates again (and rewrites their cache)"},
    {"ALLOY_PIPELINE_NO_COST_CACHE", K::flag, "0", 0, 0, "--pipeline auto neither reads nor writes the measured rates' cache file"},
};

const Setting* find(std::string name) {
  if (!name.starts_with("ALLOY_")) name = "ALLOY_" + name;
  for (const Setting& s : kSettings)
    if (name == s.name) return &s;
  return nullptr;
}

std::optional<bool> parse_flag(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  return std::nullopt;
}

// The value as the kind takes it, or a user error at `where`.
std::string checked(const Setting& s, const std::string& value, const std::string& where) {
  if (value.empty() && s.kind != K::text) return s.fallback;
  if (s.kind == K::flag) {
    auto b = parse_flag(value);
    if (!b) user_error_at(where, s.name, "='", value, "': expected 0 or 1 (", s.help, ")");
    return *b ? "1" : "0";
  }
  if (s.kind == K::integer) {
    int64_t n = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size() || n < s.lo || n > s.hi || n % s.step != 0)
      user_error_at(where, s.name, "='", value, "': expected ", s.step == 1 ? "an integer" : "a multiple of " + std::to_string(s.step),
                    " from ", s.lo, " to ", s.hi, " (", s.help, ")");
    return std::to_string(n);
  }
  return value;
}

struct State {
  std::mutex mutex;
  bool loaded = false;
  std::map<std::string, std::string> values;  // by name, for every setting
};

State& state() {
  static State s;
  return s;
}

// Every setting's value (the environment's, read once, over the defaults); the lock is held.
void load(State& st) {
  if (st.loaded) return;
  std::map<std::string, std::string> values;
  for (const Setting& s : kSettings) {
    const char* env = std::getenv(s.name);
    values[s.name] = env ? checked(s, env, "environment variable") : s.fallback;
  }
  st.values = std::move(values);
  st.loaded = true;
}

std::string value_of(const char* name, Kind kind) {
  const Setting* s = find(name);
  ALLOY_CHECK(s && s->kind == kind, "no setting ", name, " of that kind");
  State& st = state();
  std::lock_guard lock(st.mutex);
  load(st);
  return st.values[s->name];
}

}  // namespace

const std::vector<Setting>& all() { return kSettings; }

bool flag(const char* name) { return value_of(name, K::flag) == "1"; }

int64_t integer(const char* name) { return std::stoll(value_of(name, K::integer)); }

std::string text(const char* name) { return value_of(name, K::text); }

static const Setting& known(const std::string& name) {
  const Setting* s = find(name);
  if (!s) {
    std::string names;
    for (const Setting& known : kSettings) names += (names.empty() ? "" : ", ") + std::string(known.name + 6);
    user_error_at("--set " + name, "no setting '", name, "'; the settings are ", names);
  }
  return *s;
}

std::string current(const std::string& name) {
  const Setting& s = known(name);
  State& st = state();
  std::lock_guard lock(st.mutex);
  load(st);
  return st.values[s.name];
}

void set(const std::string& name, const std::string& value) {
  const Setting* s = &known(name);
  std::string v = checked(*s, value, "setting");
  State& st = state();
  std::lock_guard lock(st.mutex);
  load(st);
  st.values[s->name] = v;
}

std::string non_default() {
  State& st = state();
  std::lock_guard lock(st.mutex);
  load(st);
  std::string out;
  for (const Setting& s : kSettings)
    if (st.values[s.name] != s.fallback) out += (out.empty() ? "" : ", ") + std::string(s.name) + "=" + st.values[s.name];
  return out;
}

std::string dump_note() {
  std::string changed = non_default();
  return changed.empty() ? "" : "# settings: " + changed + "\n";
}

std::string help_text() {
  std::string out =
      "Settings (environment ALLOY_NAME=VALUE or --set NAME=VALUE; switches take 0 or 1, 1 turning the behaviour on;\n"
      "none is needed for correct or fast runs):\n";
  for (const Setting& s : kSettings) {
    std::string line = "  " + std::string(s.name) + "=" + (*s.fallback ? s.fallback : "''");
    line.resize(std::max<size_t>(line.size() + 1, 44), ' ');
    out += line + s.help + "\n";
  }
  return out;
}

}  // namespace alloy::settings
