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

// Each setting and the A/B or the need that keeps it (issue 24: at most 20, none without one).
// The block sizes, launch bounds, column splits and recomputed values of the generated kernels are
// not settings but a per-architecture table, backend/cuda/kernel_tuning.{h,cpp}, with its A/Bs.
const std::vector<Setting> kSettings = {
    // not an A/B: runs the CPU path on a GPU host (tests, bug reports)
    {"ALLOY_DISABLE_CUDA", K::flag, "0", 0, 0, "behave as if there were no GPU (the CPU path on a GPU host)"},
    // not an A/B: where the kernel cache lives
    {"ALLOY_CACHE_DIR", K::text, "", 0, 0, "where compiled kernels are kept on disk (empty: $XDG_CACHE_HOME/alloy or ~/.cache/alloy)"},
    // not an A/B: the per-architecture kernel choices for sweeps (scripts/gpu-sweep) and A/Bs of the
    // table's values (scripts/gpu-ab)
    {"ALLOY_KERNEL_TUNING", K::text, "", 0, 0,
     "a JSON file of kernel choices by architecture laid over the built-in table, e.g. {\"sm_90\": {\"row_threads\": 128}} "
     "(keys: row_threads, row_min_blocks, row_held_bytes, streaming_threads, reread_threads, row_shared_bytes, row_shared_threads, column_min_steps, column_blocks_per_sm, grid_threads, "
     "grid_blocks_per_sm, grid_min_vectors, inner_outer_accumulators, inner_outer_blocks_per_sm, multi_tensor_threads, "
     "multi_tensor_chunk_vectors, recompute_values, inner_outer_prefetch, inner_outer_rows_ahead, inner_outer_row_groups, inner_outer_staged_rows, inner_outer_combine_levels, grid_welford_steps, grid_step_bytes, grid_loads_ahead, inner_outer_shared_partials; empty: the built-in table)"},
    // H100, nanoGPT layer norm: 7.5 us with early loads, 8.3 without; the permuted layer norm's
    // normalize 100.6 -> 90.5 us (bench/results/2026-11-25-NVIDIA_H100_80GB_HBM3-issue17-session23-notes.md)
    {"ALLOY_NO_EARLY_LOADS", K::flag, "0", 0, 0, "row kernels load what only the final pass reads in that pass, not with the row"},
    // H100, nanoGPT layer norm back to back: 10.3 us with a warp per row, 13.8 without
    // (bench/results/2026-11-25-NVIDIA_H100_80GB_HBM3-issue17-session22.md)
    {"ALLOY_NO_WARP_ROWS", K::flag, "0", 0, 0, "no warp-per-row variant for short rows"},
    // H100, transpose + add at 8192^2 bf16: 539 -> 142 us (bench/results/2026-11-25-NVIDIA_H100_80GB_HBM3-issue17-notes.md)
    {"ALLOY_NO_TILE_TRANSPOSES", K::flag, "0", 0, 0, "pointwise kernels read permuted operands directly, not through shared-memory tiles"},
    // H100, layer norm of permute(x) [4096, 8192] bf16: 283.1 us as one row kernel, 111.7 as a
    // kernel a pass (bench/results/2026-11-25-NVIDIA_H100_80GB_HBM3-issue17-session22.md)
    {"ALLOY_NO_SPLIT_STAGES", K::flag, "0", 0, 0, "normalizations over a strided axis run as one row kernel, not a kernel a pass"},
    // H100, log-sum-exp [8192, 50257] bf16 1634 -> 360 us, gelu(a*b+c) over 10^8 + 3 399 -> 260 us
    // (docs/architecture.md, edge elements)
    {"ALLOY_NO_EDGE_ELEMENTS", K::flag, "0", 0, 0, "odd widths and totals fall back to scalar bodies instead of edge elements"},
    // H100, log-sum-exp [8192, 50257] bf16: 358 us held in registers, 286 streaming (docs/architecture.md)
    {"ALLOY_NO_STREAMING_ONLINE", K::flag, "0", 0, 0, "log-sum-exp over long rows holds them in registers instead of one streaming pass"},
    // no figure recorded for it off (scripts/gpu-ab column times it): the row kernels it falls back
    // to read outer-axis reductions strided. Column kernels carry the A/Bs of ALLOY_DISABLE_EPILOGUES
    // (the MLP backward's bias gradients) and ALLOY_NO_SPLIT_STAGES (the permuted layer norm)
    {"ALLOY_NO_COLUMN_KERNELS", K::flag, "0", 0, 0, "single-pass reductions over outer axes run as row kernels"},
    // H200, the MLP backward: 1091.8 us untimed (1), 1070.7 at 8, 1066.4 at 32
    // (bench/results/2026-11-24-NVIDIA_H200-notes.md)
    {"ALLOY_MATMUL_AUTOTUNE", K::integer, "8", 1, 32, "cuBLASLt: time the heuristic's first N algorithms (1: its first, untimed)"},
    // H100, the MLP backward: 1058 us with the bias-gradient kinds off, 1508 with every kind in
    // cuBLASLt (bench/results/2026-11-23-NVIDIA_H100_80GB_HBM3-notes.md)
    {"ALLOY_DISABLE_EPILOGUES", K::text, "dgelu_bgrad,drelu_bgrad,bgrad_a,bgrad_b", 0, 0,
     "cuBLASLt epilogue kinds to refuse, comma-separated (empty: allow every kind)"},
    // H200, the MLP backward: 1070.7 us with side streams, 1100.1 with one (bench/results/2026-11-24-NVIDIA_H200-notes.md)
    {"ALLOY_NO_SIDE_STREAM", K::flag, "0", 0, 0, "no side streams for memory-bound kernels beside GEMMs"},
    // not an A/B: the path for devices NCCL refuses (ranks sharing a GPU) and its tests
    {"ALLOY_STAGED_COMMUNICATION", K::flag, "0", 0, 0, "device tensors communicate through host memory, not NCCL"},
    // an A/B (issue 25): the pipelined loops' chunks moved by the copy engines, or by NCCL's kernels
    {"ALLOY_NO_COPY_ENGINES", K::flag, "0", 0, 0,
     "pipelined all-gathers and reduce-scatters between GPUs of one host use NCCL's kernels, not the copy engines"},
    // A/Bs for issue 25, not yet measured (0 keeps cuBLASLt's and NCCL's own choices): GEMMs inside
    // the pipelined loops sized for fewer SMs than the GPU has, leaving the rest to communication
    // kernels beside them (NCCL's, where the copy engines do not move the chunks), and NCCL's
    // kernels held to a number of CTAs
    {"ALLOY_OVERLAP_GEMM_SMS", K::integer, "0", 0, 1024,
     "GEMMs inside pipelined loops target this many SMs (cuBLASLt's SM count target; 0: every SM)"},
    {"ALLOY_NCCL_MAX_CTAS", K::integer, "0", 0, 64, "NCCL communicators use at most this many CTAs (0: NCCL's default)"},
    // not an A/B: where NCCL is installed
    {"ALLOY_NCCL_LIBRARY", K::text, "", 0, 0, "the NCCL library to load (empty: libnccl.so.2)"},
    // not A/Bs: the measured rates' cache, refreshed or bypassed
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
    if (ec != std::errc() || end != value.data() + value.size() || n < s.lo || n > s.hi)
      user_error_at(where, s.name, "='", value, "': expected an integer from ", s.lo, " to ", s.hi, " (", s.help, ")");
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
