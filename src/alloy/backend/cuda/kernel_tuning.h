// The per-architecture table of kernel choices the launch plan reads (issue 24): the block sizes,
// launch bounds, column splits and grid reductions' splits of the generated kernels, whether row
// kernels recompute values and whether inner-outer kernels load their next row ahead, one entry
// per compute capability. The built-in table holds the fastest measured
// (`scripts/gpu-sweep` prints an entry to commit there); the setting ALLOY_KERNEL_TUNING names a
// JSON file whose entries are laid over it, for sweeps and A/B timings:
//   {"sm_90": {"row_threads": 128, "recompute_values": true}}
// An entry names only the keys it changes. A device takes the entry of the nearest compute
// capability at or below its own (below every entry: the lowest).
#pragma once

#include <map>
#include <string>

namespace alloy::cuda {

struct KernelTuning {
  int row_threads = 256;          // row kernels: the block-size cap (a multiple of 32, 32 to 1024)
  int row_min_blocks = 0;         // row kernels: __launch_bounds__'s minimum blocks an SM (0 to 16; 0: none)
  // Row kernels in blocks of 1024 threads (64 registers a thread): the most bytes of a row a
  // thread holds in registers (items * vector elements of the widest leaf read per element);
  // longer rows are held in shared memory or read again (KernelVariant::items 0). 16 to 256.
  int row_held_bytes = 64;
  int streaming_threads = 256;    // streaming log-sum-exp kernels: threads a block (a multiple of 32, 32 to 1024)
  // Streaming kernels that read each row again to store values per element (a softmax over rows
  // not held): threads a block (a multiple of 32, 32 to 1024)
  int reread_threads = 1024;
  // Row kernels over rows too long for a block's registers: the most bytes of dynamic shared
  // memory a block may hold its row in (KernelVariant::shared_row; 0: never, such rows are read
  // again), and that kernel's threads a block at most (a multiple of 32, 32 to 1024; half as many
  // where that fits more blocks an SM).
  int row_shared_bytes = 232448;     // 0 to 232448
  int row_shared_threads = 1024;
  int column_min_steps = 16;      // column kernels: at least this many reduced indices a thread (1 to 2^20)
  int column_blocks_per_sm = 0;   // column kernels: size the split for N blocks an SM (0 to 32; 0: the occupancy)
  // Grid reductions (few long rows split over blocks, launch_plan's grid_splits): threads a block,
  // the blocks an SM holds (a full wave is SMs * this; also __launch_bounds__' minimum; 0: no grid
  // reductions, few long rows run as column kernels) and the vectors a thread loads at least.
  int grid_threads = 256;         // a multiple of 32, 32 to 1024
  int grid_blocks_per_sm = 4;     // 0 to 32
  int grid_min_vectors = 8;       // 1 to 2^20
  int grid_welford_steps = 1;     // 1 to 16: a var_mean's steps between merges (KernelVariant::welford_steps)
  int grid_step_bytes = 64;       // 64 to 256, a power of two: the bytes a thread loads a step (KernelVariant::step_bytes)
  // Inner-outer kernels (row and outer reductions in one persistent kernel, launch_plan's
  // choose_inner_outer): the f32 column accumulators a thread holds at most (wider blocks for wider
  // rows), and the blocks an SM runs (the persistent grid is SMs * this, also __launch_bounds__'
  // minimum; 0: estimated from the registers the accumulators and the held row take).
  int inner_outer_accumulators = 16;  // 4 to 256
  int inner_outer_blocks_per_sm = 0;  // 0 to 32
  // Multi-tensor kernels (an optimizer step over many parameters in one launch): threads a block,
  // and the vectors a thread computes of each chunk (a chunk is threads * vector * this elements
  // of one tensor; a block looks its chunk's tensor up in the table once a chunk).
  int multi_tensor_threads = 256;       // a multiple of 32, 32 to 1024
  int multi_tensor_chunk_vectors = 2;   // 1 to 256
  // Inner-outer kernels load each block's next row while its row reduces (a second set of the
  // row's registers), load the leaves that vary only along the columns (a norm's weight) once, and
  // reduce a row's sums together, one barrier for them all (KernelVariant::prefetch).
  bool inner_outer_prefetch = true;
  // ... and how many rows ahead of the one it reduces (each another set of the row's registers;
  // fewer where the registers a thread may have do not hold them).
  int inner_outer_rows_ahead = 1;  // 1 to 4
  int inner_outer_row_groups = 1;  // 1 to 8: rows a block reduces at once (KernelVariant::row_groups)
  // Inner-outer kernels: rows loaded ahead through shared memory (asynchronous copies, no
  // registers held for them; KernelVariant::staged_rows), 0: through registers (the above).
  int inner_outer_staged_rows = 0;  // 0 to 4
  // Inner-outer kernels: the levels of the tree that combines the blocks' column partials (the
  // last block to finish its rows reads levels * blocks^(1/levels) partials), or 0: every block
  // combines a share of the columns past a barrier of the grid (a cooperative launch).
  int inner_outer_combine_levels = 0;  // 0 to 4
  // Grid reductions load each step's vectors one step ahead (a second set of registers), so loads
  // are in flight while a step computes (KernelVariant::loads_ahead; not with windowed var_mean).
  bool grid_loads_ahead = false;
  // Inner-outer kernels hold their column partials in shared memory whatever the width (by
  // default only where a block has not the registers for them beside its row:
  // KernelVariant::shared_partials); for A/B timings and tests.
  bool inner_outer_shared_partials = false;
  bool recompute_values = false;  // row kernels recompute costly values (exp, tanh, ...) instead of holding them
  bool operator==(const KernelTuning&) const = default;
};

// By compute capability as major * 10 + minor (sm_90: 90).
using KernelTuningTable = std::map<int, KernelTuning>;

const KernelTuningTable& builtin_kernel_tuning();

// The keys a tuning file may name, comma-separated (the ALLOY_KERNEL_TUNING setting's help lists them).
std::string kernel_tuning_keys();

// `table` with the entries of a tuning file's text laid over it, each starting from the choices
// its architecture took from `table`. A user error at `where` (the file), naming the entry and
// the key, for text that is not JSON, an entry not named sm_<digits>, an unknown key, or a value
// of the wrong type or out of range.
KernelTuningTable with_tuning_file(KernelTuningTable table, const std::string& json_text, const std::string& where);

// The entry of `table` at or nearest below `sm` (major * 10 + minor); below every entry, the lowest.
KernelTuning tuning_for(const KernelTuningTable& table, int sm);

// The choices for compute capability major.minor: the built-in table, under the file that
// ALLOY_KERNEL_TUNING names where it is set (read once per path).
KernelTuning kernel_tuning(int major, int minor);

}  // namespace alloy::cuda
