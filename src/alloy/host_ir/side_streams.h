// side_streams: a Program -> Program pass (CUDA). A memory-bound generated kernel (pointwise,
// reduction, normalization) right before a GEMM that does not read it runs on side stream 1, so
// it overlaps the GEMM (compute-bound) instead of running between two: a bias gradient beside
// the next weight-gradient GEMM, say. The side stream first waits for everything the run's stream
// has enqueued (its inputs, and the buffers just allocated); the run's stream waits for the side
// kernel before the first segment that reads its results, and before the run ends.
// Precondition: a lowered program on one stream (no loops). Postcondition: every buffer is still
// allocated on the run's stream, and every side stream is joined before the run ends.
// ALLOY_NO_SIDE_STREAM=1 keeps one stream.
#pragma once

#include "alloy/host_ir/program.h"

namespace alloy::host_ir {

Program assign_side_streams(Program program, const ProgramPassOptions& options = {});

}  // namespace alloy::host_ir
