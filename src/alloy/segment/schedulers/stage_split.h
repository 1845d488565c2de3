// A reduction kernel of several passes (a normalization: statistics, then per-element outputs)
// split into one kernel a pass, for layouts where one kernel would read its rows across memory:
// the reduced axis is the strided one (layer norm or softmax of `permute(x)`). Each stage's
// reductions become a single-pass kernel over the rows (a column kernel: reads contiguous along
// the kept axis), writing the row statistics to small intermediate buffers; one last pointwise
// kernel reads them beside the inputs (a tile transpose where the layouts disagree). The input is
// read once a stage more, but every read and write is coalesced.
#pragma once

#include <optional>
#include <vector>

#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy {

struct StageSplit {
  std::vector<KernelAnalysis> kernels;  // in launch order: one a reduction stage, then the per-element one (if any)
  // values one kernel writes and a later one reads that the segment does not store: the runner
  // allocates them
  std::vector<Value*> intermediates;
};

// The split of `analysis` (of the segment `ops` reading `inputs`); nullopt where it has a single
// stage, positions or gathers, or some piece is not one kernel of the expected kind (a stage that
// is not single-pass, a per-element part that still reduces).
std::optional<StageSplit> split_by_stage(const KernelAnalysis& analysis, const std::vector<const Op*>& ops,
                                         const std::vector<Value*>& inputs);

}  // namespace alloy
