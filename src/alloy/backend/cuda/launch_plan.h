// How a generated kernel is launched on given tensors: their strides laid over the kernel's
// domain (kept axes, then reduced), contiguous axes collapsed (never a cat's axis), the kernel
// shape (pointwise, row or column kernel, or a grid reduction: few long rows split over blocks),
// vector width and block chosen, and the Params words filled (a cat source's pointer moved back by
// its start along the cat's axis; a position's first value; a gather's step and size along its
// axis). No GPU calls: the CUDA runtime (generated_kernel), `alloy compile` and the CPU emulation
// tests share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/kernel_tuning.h"
#include "alloy/segment/schedulers/kernel_analysis.h"
#include "alloy/tensor/tensor.h"

namespace alloy::cuda {

// What the choices depend on besides the tensors; from_environment reads the settings and the
// kernel tuning table once, so a cached run reads no environment.
struct LaunchTarget {
  int sm_count = 0;
  int64_t shared_per_sm = 0;
  // Block sizes, launch bounds, column splits and recomputed values, by architecture
  // (kernel_tuning.h; ALLOY_KERNEL_TUNING overrides the built-in table).
  KernelTuning tuning;
  // The defaults are the fastest measured (bench/results/*-notes.md); each setting turns one
  // off, for A/B timings (scripts/gpu-ab).
  bool early_loads = true;   // ALLOY_NO_EARLY_LOADS unset
  bool column_kernels = true;  // ALLOY_NO_COLUMN_KERNELS unset
  bool warp_rows = true;       // ALLOY_NO_WARP_ROWS unset
  bool streaming_online = true;  // ALLOY_NO_STREAMING_ONLINE unset
  bool tile_transposes = true; // ALLOY_NO_TILE_TRANSPOSES unset
  bool edge_elements = true;   // ALLOY_NO_EDGE_ELEMENTS unset
  // A normalization whose rows lie across memory (the reduced axis strided, the kept one
  // contiguous: layer norm of permute(x)) runs as a kernel a pass (stage_split.h): column kernels
  // for the row statistics, then a pointwise kernel (ALLOY_NO_SPLIT_STAGES=1 keeps one row kernel)
  bool split_stages = true;
  // For a device of compute capability sm_major.sm_minor.
  static LaunchTarget from_environment(int sm_major, int sm_minor, int sm_count, int64_t shared_per_sm);
};

struct LaunchPlan {
  bool launch = false;  // false: nothing to compute (an empty domain)
  KernelVariant variant;
  std::vector<uint64_t> words;  // Params (param_words), the workspace and counter words left 0
  // Column kernels and grid reductions split over blocks: a scratch workspace and zeroed arrival
  // counters, whose pointers go into words[workspace_word] and words[counters_word]; -1 when not
  // needed.
  int workspace_word = -1, counters_word = -1;
  // Kernels with gathers: the word of the error flag's pointer (four zeroed 8-byte words the
  // kernel sets at an out-of-range index; backend/cuda/gather_fault.h), filled in by the launcher;
  // -1 when none.
  int error_word = -1;
  size_t workspace_bytes = 0, counter_bytes = 0;
  unsigned grid_x = 1, grid_y = 1, block = 256;
  // Every block resident at once (an inner-outer kernel combining over the grid past a barrier of
  // it, KernelVariant::combine_levels 0): a cooperative launch, of at most the blocks the compiled
  // kernel fits on the device at once (fit_cooperative_grid).
  bool cooperative = false;
  // The dynamic shared memory a block takes (an inner-outer kernel's partials there,
  // KernelVariant::shared_partials), 0 for most.
  size_t dynamic_shared = 0;
  // Column kernels: the most blocks along the reduced axes worth launching (0: not a column
  // kernel) and the workspace each needs; fit_column_grid sizes grid_y to the compiled kernel.
  int64_t column_max_splits = 0;
  // Run the kernel a pass instead (LaunchTarget::split_stages): the rest of the plan is the one
  // kernel's, for where the split cannot be made
  bool split_stages = false;
  size_t workspace_bytes_per_split = 0;
};

// Sizes a column kernel's split of the reduced axes (grid_y, workspace_bytes) to one full wave
// when an SM holds `blocks_per_sm` of its blocks (the compiled kernel's occupancy, which its
// registers may hold below what plan_launch assumed from threads and shared memory). A no-op for
// other kernels and where the tuning fixes the blocks an SM (KernelTuning::column_blocks_per_sm).
void fit_column_grid(LaunchPlan& plan, int blocks_per_sm, const LaunchTarget& target);
// A cooperative plan's grid cut to the blocks the device holds at once when an SM holds
// `blocks_per_sm` of the compiled kernel's (its registers may hold fewer than the plan assumed);
// false where not even one block fits (the launcher refuses). A no-op for other plans.
bool fit_cooperative_grid(LaunchPlan& plan, int blocks_per_sm, const LaunchTarget& target);

// Each scalar input of the analysis as its Params word (double bits, or int64), read from the
// host tensor `value_of` gives for it.
std::vector<uint64_t> scalar_words(const KernelAnalysis& analysis, const std::function<const Tensor&(const Value*)>& value_of);
// The same of any scalars.
std::vector<uint64_t> scalar_words(const std::vector<Value*>& scalars, const std::function<const Tensor&(const Value*)>& value_of);

// Positions have no memory: an iota's value and views of it, a gather's positions in its index
// (KernelAnalysis::positions, GatherLoad): a tensor of `sizes` with contiguous strides whose
// element offsets are its values (a view's own offset included), and no buffer to read.
Tensor position_tensor(DType dtype, const std::vector<int64_t>& sizes);

// The tensors of the analysis' launch_values(), in order: `value_of` each value's tensor from the
// run (segment inputs, host views, outputs), but the positions made here (iotas at `shape_of`'s
// sizes, their views, each gather's positions in its index), kept in `made`. Checks each gather's
// index against its input off the gathered axis (a user error, as the CPU reference's).
std::vector<const Tensor*> launch_tensors(const KernelAnalysis& analysis, const std::function<const Tensor&(const Value*)>& value_of,
                                          const std::function<std::vector<int64_t>(const Value*)>& shape_of, std::deque<Tensor>& made);

// `tensors`: those of the analysis' launch_values() (launch_tensors: each leaf, a cat leaf's
// sources, each gather's source and positions, then each output); `domain`: its extents evaluated;
// `scalar_words`: each scalar input as its Params word (double bits, or int64).
LaunchPlan plan_launch(const KernelAnalysis& analysis, const std::vector<int64_t>& domain,
                       const std::vector<const Tensor*>& tensors, const std::vector<uint64_t>& scalar_words,
                       const LaunchTarget& target);

}  // namespace alloy::cuda
