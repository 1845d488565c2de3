// The bitmask scheduler's executable: one relu_mask or relu_backward_mask op as its generated
// kernel (codegen/bitmask_kernel.h) over [rows, columns] views of its tensors (a packed copy where
// the leading axes do not fold into one row stride).
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy::cuda {

std::unique_ptr<host_ir::SegmentExecutable> make_bitmask_segment(const Segment& segment);

// The same for one op of another segment (the matmul fallback runs its relu_mask this way).
std::unique_ptr<host_ir::SegmentExecutable> make_bitmask_op(const Op& op, int segment_id);

}  // namespace alloy::cuda
