// Views made on the host for the CUDA backend's segments (noop segments, and the views a
// generated kernel or a matmul reads its inputs through): zero-copy where the shape op can view
// the input as it is laid out, else of a packed device copy (a reshape across non-contiguous axes).
#pragma once

#include "alloy/host_ir/evaluator.h"

namespace alloy::cuda {

// Stores in `state` the view `view` makes of its input there, on the run's current stream.
void make_host_view(const Op& view, host_ir::RunState& state);

}  // namespace alloy::cuda
