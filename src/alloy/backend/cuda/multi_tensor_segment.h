// The executable of a multi-tensor segment (segment/schedulers/multi_tensor.h): one launch of the
// chain's kernel over a table of every member's tensors (multi_tensor_plan.h); a member whose
// tensors are not contiguous runs as its own pointwise kernel first.
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy::cuda {

std::unique_ptr<host_ir::SegmentExecutable> make_multi_tensor_segment(const Segment& segment);

}  // namespace alloy::cuda
