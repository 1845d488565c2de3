// The error flag of generated kernels with gathers (codegen/indexing_loads.cpp): four 8-byte words
// on the device, zero until the first thread to meet an index outside its gather's axis sets them
// (1, the gather, the index value, its row-major position in the index). The kernel loads nothing
// there. A run that launched such a kernel reads the flag back once its last node is enqueued
// (RunState::end_checks): a copy to the host that waits for the run's work, the one cost of
// checking (a run without gathers has no flag and no wait), and a set flag is the CPU reference's
// user error.
#pragma once

#include <cstdint>
#include <vector>

#include "alloy/host_ir/evaluator.h"
#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy::cuda {

// Each gather's index (and output) sizes and its input's, as the run bound them.
struct GatherShapes {
  std::vector<int64_t> index, input;
};
std::vector<GatherShapes> gather_shapes(const KernelAnalysis& analysis, const host_ir::RunState& state);

// Throws the user error the flag's words say (the CPU reference's wording: the gather's location,
// its input's name, the value, its position and the valid range); nothing where the flag is clear.
void check_gather_flag(const KernelAnalysis& analysis, const uint64_t words[4], const std::vector<GatherShapes>& shapes);

// One flag per device for one kernel's launches: `word` gives its address for the Params and
// asks the run to check it at its end (once per run); the check clears a set flag for the next run.
class GatherFlag {
 public:
  uint64_t word(const KernelAnalysis& analysis, host_ir::RunState& state);

 private:
  void check(const KernelAnalysis& analysis, int device, const std::vector<GatherShapes>& shapes);
  std::vector<Tensor> flags_;  // by device index
};

}  // namespace alloy::cuda
