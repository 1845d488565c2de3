// The persistent inner-outer kernel's launch choices (launch_inner_outer.h).
#include "alloy/backend/cuda/launch_inner_outer.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {

namespace {
// Whether a pointwise op on the outer reductions' results (computed per column) reads a leaf.
bool column_ops_read_leaves(const KernelAnalysis& a) {
  for (const Op* op : a.compute_ops) {
    if (op_row(op->kind).op_class == OpClass::reduction || !a.at(op->outputs[0]).per_column) continue;
    for (const Value* in : op->inputs)
      if (std::find(a.leaves.begin(), a.leaves.end(), in) != a.leaves.end()) return true;
  }
  return false;
}

// The registers a thread may have where `blocks` blocks of `threads` share an SM, as ptxas caps
// them under __launch_bounds__(threads, blocks) on sm_80/sm_90: each of an SM's four partitions
// holds 16K registers for its share of the warps (allocated in multiples of 8 a thread), at most
// 255. (192 threads x 3 blocks: 18 warps, 5 on a partition, 96 registers — not 65536 / 576 = 113;
// measured with ptxas's --resource-usage.)
int64_t register_cap(int64_t threads, int64_t blocks) {
  const int64_t warps = (threads + 31) / 32 * blocks, per_partition = (warps + 3) / 4;
  return std::min<int64_t>(255, 16384 / (32 * per_partition) / 8 * 8);
}
// Whether a kernel of an estimated `r` registers a thread compiles without spilling under that
// cap: the estimate may pass it by 4 (NVRTC's sm_90 compiles: the layer norm backward over 768
// bf16 columns, estimated 84, fits 80 at 7 blocks an SM; the RMSNorm backward over 3072, estimated
// 106, spilled 84 bytes at 3 blocks' 96 and ran 1.45x slower on an H100 than at 2 blocks, session 33).
bool fits_registers(int64_t r, int64_t threads, int64_t blocks) { return r <= register_cap(threads, blocks) + 4; }
}  // namespace

// Row and outer reductions in one persistent kernel (KernelVariant::inner_outer): a block per row,
// the row held in registers in whole vectors (a thread owns the same columns in every row, so no
// edge elements), as many threads as keep a thread's column partials within
// `inner_outer_accumulators` f32 registers (128 to 1024), and a grid of min(rows, SMs * blocks an
// SM) blocks: the tuning's blocks an SM, or as many as 64K registers hold by an estimate (the
// partials, the held leaves, twice those loaded with each row where the next row is loaded ahead,
// 40 more), at most 2048 threads an SM. The next row is loaded ahead where the tuning asks for it
// and the estimate fits the registers a thread of the block may have. Returns the blocks.
int64_t choose_inner_outer(const KernelAnalysis& a, const LaidOut& l, const LaunchTensors& lt, const LaunchTarget& target,
                           const std::vector<Axis>& axes, KernelVariant& v) {
  v.inner_outer = true;
  choose_vector(a, lt.slots, v, axes, int(axes.size()) - 1, lt.tensors, lt.addresses, lt.cats, false);
  int words = 0;  // 32-bit registers of one column's partials
  for (const Op* r : a.outer_reductions) words += std::string(compute_type(r->outputs[0]->dtype())) == "double" ? 2 : 1;
  const int64_t slots = std::max<int64_t>(1, (l.cols + v.vector - 1) / v.vector);
  const int64_t per_thread = std::max(1, target.tuning.inner_outer_accumulators / std::max(1, v.vector * words));
  // The block for `per` vectors a thread at most: the fewest threads that hold the row in that
  // many (128 to 1024), or, where that block leaves threads without a vector in a row (768 bf16
  // columns are 96 vectors: a quarter of 128 threads idle), the width nearest it that leaves fewer
  // idle (96 threads of one vector each there).
  auto shape = [&](int64_t per) {
    int64_t threads = std::clamp<int64_t>(((slots + per - 1) / per + 31) / 32 * 32, 128, 1024);
    auto idle = [&](int64_t t) { return (slots + t - 1) / t * t - slots; };
    const int64_t first = threads;
    for (int64_t t = 32; t <= 1024; t += 32)
      if ((slots + t - 1) / t <= per &&
          (idle(t) < idle(threads) || (idle(t) == idle(threads) && std::abs(t - first) < std::abs(threads - first))))
        threads = t;
    v.threads = int(threads);
    v.items = int((slots + threads - 1) / threads);
    v.full_rows = l.cols == int64_t(v.items) * threads * v.vector;
  };
  // 32-bit registers a thread takes, by an estimate: 40, the partials and the leaves, were every
  // per-element one held. Loading the next row ahead holds those loaded with each row twice (the
  // row's and the next row's; the per-row ones too), those of the columns once, and one register
  // more for every two elements a thread holds (ptxas keeps some converted values across the
  // reductions): fitted to NVRTC's sm_90 compiles of the norm backwards at widths 768 to 8192,
  // bf16 and f32, so that none spills at the blocks an SM it gives. (Without, the estimate of
  // before, which the kernel of before keeps.)
  // (`ahead` rows loaded ahead: each holds the per-element leaves of a row once more.)
  int64_t per_row_words = 0;  // registers of a row's per-row leaves (a norm's mean and rstd)
  for (const Value* leaf : a.leaves)
    if (!a.is_position(leaf) && a.at(leaf).per_row) per_row_words += (dtype_size(leaf->dtype()) + 3) / 4;
  auto registers = [&](int ahead) {
    const int64_t elements = int64_t(v.items) * v.vector;
    int64_t held = 0;
    for (const Value* leaf : a.leaves) {
      if (a.is_position(leaf)) continue;
      if (!a.at(leaf).per_row) held += elements * dtype_size(leaf->dtype()) / 4 * (ahead > 0 && !along_columns_only(a, leaf) ? 1 + ahead : 1);
      else if (ahead > 0) held += (1 + ahead) * ((dtype_size(leaf->dtype()) + 3) / 4);
    }
    return 40 + elements * words + held + (ahead > 0 ? elements / 2 : 0);
  };
  // rows loaded ahead where asked, as many as the tuning's rows ahead or fewer, where a thread of
  // the block has the registers for them (else it would spill); where a block this wide has no
  // registers for one row ahead, the one of twice the vectors a thread where that has (the layer
  // norm backward over 8192 bf16 columns at 16 accumulators: 512 threads of two vectors loading
  // ahead, not 1024 of one that cannot; no further: the estimate is tight there)
  // row groups: as many as asked that a block of 1024 threads holds, not more than the rows, and
  // whose shared memory (every group's two reduction regions, and the partials of all groups but
  // the first to sum after the rows) stays within the 48 KiB a block has without opting in
  auto groups_shared = [&](int64_t n) { return (n - 1) * v.items * v.vector * v.threads * 4 * words + n * 2 * 99 * 8; };
  auto groups = [&] {
    int64_t g = std::clamp<int64_t>(std::min<int64_t>(target.tuning.inner_outer_row_groups, l.rows), 1, std::max(1, 1024 / v.threads));
    while (g > 1 && groups_shared(g) > 48 * 1024) --g;
    return int(g);
  };
  auto most_ahead = [&] {
    int ahead = target.tuning.inner_outer_prefetch ? std::max(1, target.tuning.inner_outer_rows_ahead) : 0;
    // (ptxas' cap, without the slack of the blocks an SM: RMSNorm's backward over 12288 bf16
    // columns, 384 threads of four vectors a row ahead estimated 169 against 168, spilled 268 bytes
    // and took 408 us on an H100 against 217 for 768 threads of two vectors without)
    const int64_t limit = register_cap(int64_t(v.threads) * groups(), 1);  // (at most 65536 / threads, 255)
    while (ahead > 0 && registers(ahead) > limit) --ahead;
    return ahead;
  };
  // Rows ahead through shared memory (staged_rows): where asked, where every leaf a row holds is
  // read in whole vectors of 4, 8 or 16 bytes (what one asynchronous copy moves) from a tensor of
  // its own, as many rows as asked whose ring of slots (one more than the rows) fits with the
  // groups' shared memory in 48 KiB; the registers count the row once (and each per-row leaf
  // ahead, and 8 for the slots and the copies' addresses: fitted to NVRTC's sm_80 and sm_90
  // compiles of the layer norm backward at 768 and 4096 bf16 columns, none spilling), and the
  // blocks an SM are as many as the SM's shared memory holds too.
  auto stageable = [&] {
    for (size_t k = 0; k < a.leaves.size(); ++k) {
      const Value* leaf = a.leaves[k];
      if (a.at(leaf).per_row || along_columns_only(a, leaf)) continue;
      if (a.is_position(leaf) || a.cat_leaf(leaf) || k >= v.leaf_modes.size() || v.leaf_modes[k] != 'v') return false;
      const int64_t bytes = int64_t(v.vector) * dtype_size(leaf->dtype());
      if (bytes != 4 && bytes != 8 && bytes != 16) return false;
    }
    return true;
  };
  auto staged_bytes = [&](int64_t ahead, int64_t g) {  // the ring of row slots of a block
    int64_t row = 0;
    for (const Value* leaf : a.leaves)
      if (!a.at(leaf).per_row && !along_columns_only(a, leaf) && !a.is_position(leaf))
        row += int64_t(v.items) * v.threads * g * v.vector * dtype_size(leaf->dtype());
    return (ahead + 1) * row;
  };
  shape(per_thread);
  if (target.tuning.inner_outer_staged_rows > 0 && stageable()) {
    v.row_groups = groups();
    int64_t ahead = target.tuning.inner_outer_staged_rows;
    while (ahead > 0 && staged_bytes(ahead, v.row_groups) + groups_shared(v.row_groups) > 48 * 1024) --ahead;
    v.prefetch = int(ahead);
    v.staged_rows = ahead > 0;
  }
  if (!v.staged_rows) {
    v.prefetch = most_ahead();
    if (target.tuning.inner_outer_prefetch && v.prefetch == 0) {
      const KernelVariant widest = v;
      shape(2 * per_thread);
      v.prefetch = v.threads < widest.threads ? most_ahead() : 0;
      if (v.prefetch == 0) v = widest;
    }
    v.row_groups = groups();
  }
  // Partials in shared memory: where a block of this shape has not the registers for its partials
  // beside its row even alone on its SM (the layer norm backward over 12288 or more bf16 columns:
  // 1024 threads of 64 registers) and the shared memory a block may have holds them. The block is
  // then the widest (most warps to hide the row's loads: the fewest vectors a thread), the row
  // loaded ahead where the registers (without the partials) hold it.
  const int64_t shared_limit = target.shared_per_sm - 8 * 1024;  // (the kernel's static shared memory besides)
  if (!v.staged_rows && v.row_groups == 1 &&
      (target.tuning.inner_outer_shared_partials || !fits_registers(registers(v.prefetch), v.threads, 1))) {
    const KernelVariant in_registers = v;
    const int words_in_registers = std::exchange(words, 0);  // (the estimate without the partials)
    shape((slots + 1023) / 1024);
    v.shared_partials = true;
    v.prefetch = most_ahead();
    if (int64_t(inner_outer_shared_partial_bytes(a, v)) > shared_limit) {
      v = in_registers;
      words = words_in_registers;
    }
  }
  const int64_t block = int64_t(v.threads) * v.row_groups;
  v.min_blocks = target.tuning.inner_outer_blocks_per_sm;
  if (v.min_blocks == 0) {
    int64_t r = std::min<int64_t>(255, v.staged_rows ? registers(0) + v.prefetch * per_row_words + int64_t(v.items) * v.vector / 2 + 8
                                                      : registers(v.prefetch));
    v.min_blocks = int(std::clamp<int64_t>(65536 / (block * ((r + 7) / 8 * 8)), 1, std::max<int64_t>(1, 2048 / block)));
    while (v.min_blocks > 1 && !fits_registers(r, block, v.min_blocks)) --v.min_blocks;  // as ptxas caps them
    if (v.shared_partials)
      v.min_blocks = int(std::clamp<int64_t>(target.shared_per_sm / int64_t(inner_outer_shared_partial_bytes(a, v) + 1024), 1, v.min_blocks));
    if (v.staged_rows && target.shared_per_sm > 0)
      v.min_blocks = int(std::clamp<int64_t>(target.shared_per_sm / (staged_bytes(v.prefetch, v.row_groups) + groups_shared(v.row_groups) + 1024), 1,
                                             v.min_blocks));
  }
  // Partials in shared memory for a second block an SM: where the partials in registers leave one
  // block of this shape an SM, a thread holds one vector of a row, each block of the two an SM has
  // 16 rows or more (a second block's partials are one more row of them to store and combine: at
  // 2048 rows of 4096 columns, 8 a block, it lost 5%), and the same block without its partials in
  // registers fits ptxas' cap at two (its rows ahead included), with both blocks' partials in the
  // SM's shared memory. Twice the warps to hide the rows' loads: on an H100 (session 36,
  // scripts/gpu-ab inner_outer_shared and scripts/fusion-ab) the layer norm backward over [8192,
  // 4096] bf16 (512 threads of one vector, 95 registers with the partials, 64 without) 90.3 ->
  // 83.0 us, over 3072 bf16 0.93x, 1600 f32 0.75x, recomputing its statistics over 4096 bf16
  // 0.95x. At two vectors a thread it gained on an H200 and not on an H100 (the layer norm
  // recomputing over 3072 f32 1.04x, RMSNorm's over 5120 bf16 1.00-1.03x), at four it lost on both
  // (RMSNorm's over 4096 f32, 1.06x on the H200); where the registers already hold two blocks
  // (RMSNorm's over 4096 bf16: 256 threads of two vectors) a block of 512 without partials
  // measured the same. Those keep them in registers.
  constexpr int64_t kRowsPerBlockForShared = 16;
  if (target.tuning.inner_outer_blocks_per_sm == 0 && !v.staged_rows && v.row_groups == 1 && !v.shared_partials && v.min_blocks == 1 &&
      v.items == 1 && l.rows >= int64_t(std::max(1, target.sm_count)) * 2 * kRowsPerBlockForShared && block * 2 <= 2048) {
    KernelVariant shared = v;
    shared.shared_partials = true;
    const int64_t without_partials = registers(v.prefetch) - int64_t(v.items) * v.vector * words;
    if (fits_registers(without_partials, block, 2) && 2 * (int64_t(inner_outer_shared_partial_bytes(a, shared)) + 1024) <= target.shared_per_sm) {
      v = shared;
      v.min_blocks = 2;
    }
  }
  v.index32 = small_offsets(axes, l.numel);
  v.recompute = target.tuning.recompute_values;
  v.combine_levels = target.tuning.inner_outer_combine_levels;
  // The combine over the grid where the grid has at most two blocks an SM, else a tree of three
  // levels: on an H100 the grid's combine took 8-10 us off the norm backwards at 4096 columns (132
  // blocks) and added 6-8 at 768 (1056 blocks of 96 threads; session 28, scripts/gpu-ab
  // inner_outer_combine). And the tree where a column op reads a leaf (the combine over the grid
  // computes a column's results in a thread that holds none of its leaves).
  if (v.combine_levels == 0 && (v.min_blocks > 2 || column_ops_read_leaves(a))) v.combine_levels = 3;
  const int64_t row_sets = (l.rows + v.row_groups - 1) / v.row_groups;  // a block's rows at once
  return std::clamp<int64_t>(std::min<int64_t>(row_sets, int64_t(std::max(1, target.sm_count)) * v.min_blocks), 1, 2147483647);
}

}  // namespace alloy::cuda
