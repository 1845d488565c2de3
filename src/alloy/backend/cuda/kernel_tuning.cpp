#include "alloy/backend/cuda/kernel_tuning.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "alloy/common/error.h"
#include "alloy/common/settings.h"

namespace alloy::cuda {
namespace {

// The built-in entries and the A/Bs behind each value (the defaults as settings before issue 24):
// - row_threads 256: an H100 sweep of 128/256/512/1024 moved layer norm [8192, 8192] bf16 between
//   121 and 169 us and softmax between 155 and 285 us, best at 256
//   (bench/results/2026-11-23-NVIDIA_H100_80GB_HBM3-notes.md); on an H200 layer norm, softmax and
//   RMSNorm took 74.7/77.2/77.3 us at 256, 77.4/76.0/76.7 at 128, 83.4/80.7/77.7 at 512
//   (2026-11-24-NVIDIA_H200-notes.md); nanoGPT's layer norm (H100) 10.3 us, 10.9 at 128
//   (2026-11-25-NVIDIA_H100_80GB_HBM3-issue17-session22.md).
// - row_min_blocks 0: __launch_bounds__(256, 5) 81.2/75.2/75.5 us on the H200 rows above; on the
//   H100 nanoGPT layer norm 12.7 us at 2, 12.3 at 4, against 10.3 (session 22).
// - streaming_threads 256: log-sum-exp [8192, 50257] bf16 on an H100 286 us, 292 at 512 (commit
//   3cd8a94, issue 17).
// - column_min_steps 16: column_sum [8192, 6400] bf16 on an H100 40.7 us, 40.7-40.9 at 32 and 64
//   (2026-11-25-NVIDIA_H100_80GB_HBM3-issue17-session23-notes.md), 43.8 at 8 (session 22).
// - column_blocks_per_sm 0 (the compiled kernel's occupancy, fit_column_grid): 40.5-41.0 us at 4
//   and 5 against 40.7 (session 23); the occupancy fit took an H200's column sum from 37 to 32 us.
// - recompute_values false: on the H200 rows above 74.7/83.4/75.8 us recomputing (softmax slower);
//   nanoGPT's layer norm on an H100 9.2 against 10.3 us (session 22): a case for an entry by shape
//   some day, not by architecture.
// - grid_threads 256, grid_blocks_per_sm 4, grid_min_vectors 8 (issue 27; on an H100, session 27,
//   2, 6 or 8 blocks an SM and 128 threads were all slower for var_mean and the grad norm:
//   scripts/gpu-ab grid): 1024
//   threads an SM, each with up to four 16-byte loads in flight (64 KiB an SM, above the ~25 KiB
//   an H100's bandwidth-latency product asks of each SM), at most 64 registers (var_mean's step
//   sums fit); a row split only where each thread then loads at least 8 vectors. To sweep on the
//   GPU: the grad-norm bench case (grad_norm_1e8); grid_blocks_per_sm 0 is the A/B against the
//   column kernels that ran these shapes before.
// - grid_welford_steps 1 (issue 27, sessions 29-30): var_mean's merge of a thread's sums every M
//   steps; on an H100 var_mean over 4 rows of 25M bf16 took 76.9/77.5/78.1/76.6 us at 1/2/4/8
//   (`scripts/gpu-ab grid_welford`, bench/results/2026-11-27-NVIDIA_H200-x2-session30-notes.md):
//   the merges are not what holds it at 86% of copy.
// - inner_outer_accumulators 16, inner_outer_blocks_per_sm 0, inner_outer_prefetch true,
//   inner_outer_combine_levels 3 (issue 27; `scripts/gpu-ab inner_outer`, H100, session 27, the
//   layer norm / RMSNorm backward at [8192, 4096] and [32768, 768] bf16, alloy_bench medians): a
//   thread holds at most 16 f32 column partials, so rows wider than 128 threads' worth take wider
//   blocks (the layer norm's at 4096 columns 512 threads of one vector; where such a block has no
//   registers for a second row, the one of two vectors a thread); the persistent grid holds as
//   many blocks an SM as ~64K registers fit by an estimate of the kernel's.
//   Each block loads its next row while it reduces and stores (before, nothing was in flight to
//   memory then): 103.1/79.0/106.9/69.8 us off, 101.4/74.1/91.6/68.3 on (and the 768-column
//   blocks of 96 threads, not 128 with a quarter idle). The partials' combine tree of three
//   levels: 100.4/70.6/89.3/65.2 (one level, the last block reading all: 158.8/185.9/152.2/135.8).
//   16 accumulators (two levels): 98.9/74.2/85.0/67.5. Their combination, timed in session 28:
//   99.8/71.8/86.8/65.3. Blocks an SM by hand: 2 gave 99.5/104.4/89.1/100.7, 4 spills (666.8 at
//   4096 columns).
// - inner_outer_combine_levels 0, inner_outer_rows_ahead 1 (issue 27, session 28, `scripts/gpu-ab
//   inner_outer` and `inner_outer_combine`, same four cases, H100): the combine over the grid
//   89.7-92.1/78.5-79.8/78.5-80.7/71.6-72.6 against the tree of three levels'
//   99.2-99.7/70.5-70.8/85.7-86.1/64.9-65.2 (faster at one block an SM, slower at 1056 blocks of
//   96 threads: the plan keeps the tree where the grid has more than two blocks an SM, so the
//   default gives 90.3/71.2/78.6/64.7); two rows ahead 100.7/74.4/85.7/66.2 and three
//   101.5/73.1/95.2/67.2 against one's 99.8/71.8/86.8/65.3.
// - inner_outer_row_groups 1 (issue 27, sessions 29-30; `scripts/gpu-ab inner_outer_groups`, H100,
//   the layer norm / RMSNorm backward at [8192, 4096] and [32768, 768] bf16): 91.0/71.2/78.7/66.3 us
//   by default; 2 groups 94.8/70.5/78.6/63.9, 3 groups 94.9/69.1/165.9/66.6, 4 groups
//   92.3/74.4/163.8/62.0 (a block of groups takes one block's registers an SM, so the grid holds as
//   many threads as before; RMSNorm at 4096 columns in blocks of 768-1024 threads twice as slow).
// - grid_loads_ahead false (issue 27, sessions 30-31; `scripts/gpu-ab grid` and `grid_welford`,
//   H100): each step's loads issued a step ahead (var_mean computes 4 instructions an element
//   against the grad norm's 2 and runs at 86% of copy against 93%) changed nothing: grad norm of
//   1e8 bf16 / var_mean of 4x25M 71.5/76.9 us against 71.6-72.2/76.7-76.8 by default (at 3 blocks
//   an SM 70.9/76.5); var_mean alone 77.3 against 76.7-77.0 (`bench/results/2026-11-27-NVIDIA_H200-x4-session31-notes.md`).
// - grid_step_bytes 64 (issue 27, session 36; `scripts/gpu-ab grid_step`, H100): 128 bytes a
//   thread a step (eight 16-byte vectors) at four blocks an SM spilled var_mean (20 bytes) and
//   ran it at 82.5-84.1 us against 76.4-77.3; at three blocks an SM var_mean 74.8-75.7 against
//   75.3-77.3 over four rounds (the same), the grad norm 70.7-71.6 against 71.7-72.7 (1-2%):
//   not worth a change of every grid reduction's blocks.
// - inner_outer_staged_rows 0 (issue 27, sessions 30-31; `scripts/gpu-ab inner_outer_staged`, H100,
//   the same four norm backwards as the row groups): rows ahead through shared memory by cp.async
//   gave nothing over the registers' row ahead (90.9/71.7/79.5/66.8 us): 1-4 rows
//   91.2-93.4/70.8-72.9/90.5-92.3/65.2-68.2 (RMSNorm at 4096 columns 14% slower), 3 rows with 2
//   row groups 94.0/70.6/77.1/69.8, 3 rows at 8 blocks an SM 123/72.4/451/69.0.
// - multi_tensor_threads 256, multi_tensor_chunk_vectors 2 (issue 27): GPT-2's AdamW step over 148
//   tensors in one launch at 86% of copy bandwidth on an H100 (as torch._fused_adamw_), the one
//   2^28 tensor step at 100%; `scripts/gpu-ab multi_tensor` times other chunks and blocks.
// - inner_outer_shared_partials false (issue 27, session 33): the plan keeps the column partials
//   in shared memory only where a block has not the registers for them beside its row (the layer
//   norm backward over 12288 and 16384 bf16 columns: 263.3 -> 242.8 and 301.9 -> 166.2 us on an
//   H100, bench/results/2026-11-27-session33-notes.md); forcing them at narrower rows is for tests.
//   The plan also takes them where they give a block a second block an SM (session 36: the layer
//   norm backward over [8192, 4096] bf16 90.3 -> 83.0 us on an H100; launch_inner_outer.cpp).
// - row_held_bytes 64 (session 34, `scripts/gpu-ab row_held` and `reread` on an H100, softmax
//   over 2048 rows; bench/results/2026-11-27-session34-notes.md): at 64 elements a thread the
//   kernels holding 50-64 spilled (ptxas: 156-592 bytes) and were slower than the row read again
//   (bf16 50257 252.5 -> 184.3 us, f32 50257 1140.4 -> 392.3); then, with rows held in shared
//   memory, 32 f32 elements (128 bytes) held in registers were slower than in shared memory
//   (f32 32000 271.9 -> 183.4 us, f32 [8192, 32000] 1059.8 -> 703.7, f32 24000 140.9 -> 137.9)
//   and 32 bf16 (64 bytes) faster (bf16 32000 100.7 against 114.7, bf16 24000 79.4 against 90.0).
// - reread_threads 1024 (session 34, the same job): softmax rows not held, the max and the sum in
//   one streaming pass, then the storing pass; at 256 threads a block the second read missed the
//   L2 more (bf16 50257 231.1 us against 184.3 at 1024, f32 50257 463.3 against 392.3); cutting
//   the grid to the blocks whose rows fit half or a quarter of the L2 was slower (bf16 128256
//   539.1 -> 600.3), and three passes slower still (bf16 128256 713.3, f32 128256 1418.4).
// - row_shared_bytes 232448 (all a block may take), row_shared_threads 1024 (session 34, `scripts/
//   gpu-ab shared_row`, H100, softmax over 2048 rows): rows too long for registers held in shared
//   memory, read once: bf16 65536 268.3 -> 206.4 us, bf16 100000 421.0 -> 377.2, f32 40000 331.6
//   -> 228.6, f32 50257 393.8 -> 328.7 (against reading them again); bf16 50257 the same (181.5,
//   at 512 threads: two blocks an SM). 256 threads were slower everywhere (bf16 100000 1468.7).
// sm_80 (A100) has not been measured: it takes the same values.
const KernelTuningTable kBuiltin = {
    {80, KernelTuning{}},
    {90, KernelTuning{}},
};

struct IntegerKey {
  const char* name;
  int KernelTuning::*field;
  int lo, hi, step;
};

const IntegerKey kIntegerKeys[] = {
    {"row_threads", &KernelTuning::row_threads, 32, 1024, 32},
    {"row_min_blocks", &KernelTuning::row_min_blocks, 0, 16, 1},
    {"row_held_bytes", &KernelTuning::row_held_bytes, 16, 256, 1},
    {"streaming_threads", &KernelTuning::streaming_threads, 32, 1024, 32},
    {"reread_threads", &KernelTuning::reread_threads, 32, 1024, 32},
    {"row_shared_bytes", &KernelTuning::row_shared_bytes, 0, 232448, 1},
    {"row_shared_threads", &KernelTuning::row_shared_threads, 32, 1024, 32},
    {"column_min_steps", &KernelTuning::column_min_steps, 1, 1 << 20, 1},
    {"column_blocks_per_sm", &KernelTuning::column_blocks_per_sm, 0, 32, 1},
    {"grid_threads", &KernelTuning::grid_threads, 32, 1024, 32},
    {"grid_blocks_per_sm", &KernelTuning::grid_blocks_per_sm, 0, 32, 1},
    {"grid_min_vectors", &KernelTuning::grid_min_vectors, 1, 1 << 20, 1},
    {"grid_welford_steps", &KernelTuning::grid_welford_steps, 1, 16, 1},
    {"grid_step_bytes", &KernelTuning::grid_step_bytes, 64, 256, 64},
    {"inner_outer_accumulators", &KernelTuning::inner_outer_accumulators, 4, 256, 1},
    {"inner_outer_blocks_per_sm", &KernelTuning::inner_outer_blocks_per_sm, 0, 32, 1},
    {"inner_outer_combine_levels", &KernelTuning::inner_outer_combine_levels, 0, 4, 1},
    {"inner_outer_rows_ahead", &KernelTuning::inner_outer_rows_ahead, 1, 4, 1},
    {"inner_outer_row_groups", &KernelTuning::inner_outer_row_groups, 1, 8, 1},
    {"inner_outer_staged_rows", &KernelTuning::inner_outer_staged_rows, 0, 4, 1},
    {"multi_tensor_threads", &KernelTuning::multi_tensor_threads, 32, 1024, 32},
    {"multi_tensor_chunk_vectors", &KernelTuning::multi_tensor_chunk_vectors, 1, 256, 1},
};

// Choices on or off: true or false in a file.
struct BoolKey {
  const char* name;
  bool KernelTuning::*field;
};

const BoolKey kBoolKeys[] = {
    {"recompute_values", &KernelTuning::recompute_values},
    {"inner_outer_prefetch", &KernelTuning::inner_outer_prefetch},
    {"grid_loads_ahead", &KernelTuning::grid_loads_ahead},
    {"inner_outer_shared_partials", &KernelTuning::inner_outer_shared_partials},
};

// "sm_90" -> 90; -1 for anything else.
int parse_arch(const std::string& name) {
  if (name.size() < 4 || name.size() > 7 || name.compare(0, 3, "sm_") != 0) return -1;
  int sm = 0;
  for (size_t i = 3; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    sm = sm * 10 + (name[i] - '0');
  }
  return sm;
}

void set_key(KernelTuning& t, const std::string& entry, const std::string& key, const nlohmann::json& value, const std::string& where) {
  std::string at = "\"" + entry + "\": \"" + key + "\"";
  for (const BoolKey& k : kBoolKeys) {
    if (key != k.name) continue;
    if (!value.is_boolean()) user_error_at(where, at, " is ", value.dump(), "; expected true or false");
    t.*k.field = value.get<bool>();
    return;
  }
  for (const IntegerKey& k : kIntegerKeys) {
    if (key != k.name) continue;
    bool whole = value.is_number_integer();
    int64_t n = whole ? value.get<int64_t>() : 0;
    if (!whole || n < k.lo || n > k.hi || n % k.step != 0)
      user_error_at(where, at, " is ", value.dump(), "; expected ", k.step == 1 ? "an integer" : "a multiple of " + std::to_string(k.step),
                    " from ", k.lo, " to ", k.hi);
    t.*k.field = int(n);
    return;
  }
  user_error_at(where, at, ": no such key; the keys are ", kernel_tuning_keys());
}

}  // namespace

const KernelTuningTable& builtin_kernel_tuning() { return kBuiltin; }

std::string kernel_tuning_keys() {
  std::string keys;
  for (const IntegerKey& k : kIntegerKeys) keys += std::string(k.name) + ", ";
  for (const BoolKey& k : kBoolKeys) keys += std::string(k.name) + ", ";
  return keys.substr(0, keys.size() - 2);
}

KernelTuning tuning_for(const KernelTuningTable& table, int sm) {
  ALLOY_CHECK(!table.empty(), "an empty kernel tuning table");
  auto above = table.upper_bound(sm);
  return above == table.begin() ? above->second : std::prev(above)->second;
}

KernelTuningTable with_tuning_file(KernelTuningTable table, const std::string& json_text, const std::string& where) {
  nlohmann::json file;
  try {
    file = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    user_error_at(where, "not JSON: ", e.what());
  }
  if (!file.is_object()) user_error_at(where, "expected an object of entries such as {\"sm_90\": {\"row_threads\": 256}}, found ", file.dump());
  KernelTuningTable entries;
  for (const auto& [entry, keys] : file.items()) {
    int sm = parse_arch(entry);
    if (sm <= 0) user_error_at(where, "\"", entry, "\": expected an architecture such as sm_90");
    if (!keys.is_object()) user_error_at(where, "\"", entry, "\" is ", keys.dump(), "; expected an object of keys (", kernel_tuning_keys(), ")");
    KernelTuning t = tuning_for(table, sm);
    for (const auto& [key, value] : keys.items()) set_key(t, entry, key, value, where);
    entries[sm] = t;
  }
  for (const auto& [sm, t] : entries) table[sm] = t;
  return table;
}

KernelTuning kernel_tuning(int major, int minor) {
  std::string path = settings::text("ALLOY_KERNEL_TUNING");
  if (path.empty()) return tuning_for(kBuiltin, major * 10 + minor);
  static std::mutex mutex;
  static std::map<std::string, KernelTuningTable> by_path;
  std::lock_guard lock(mutex);
  auto it = by_path.find(path);
  if (it == by_path.end()) {
    std::string where = "ALLOY_KERNEL_TUNING file " + path;
    std::ifstream in(path);
    if (!in) user_error_at(where, "cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    it = by_path.emplace(path, with_tuning_file(kBuiltin, text.str(), where)).first;
  }
  return tuning_for(it->second, major * 10 + minor);
}

}  // namespace alloy::cuda
