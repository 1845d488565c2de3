// The matmul scheduler's executable: linear / matmul (torch semantics, batched and broadcast)
// as one cuBLASLt call on row-major operands, f32 accumulation.
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy::cuda {

std::unique_ptr<host_ir::SegmentExecutable> make_matmul_segment(const Segment& segment);

}  // namespace alloy::cuda
