// gather's run-time checks and their user errors, one wording for every backend: the CPU reference
// (reference_indexing.cpp) checks before it reads, the generated CUDA kernels check the sizes
// before the launch and report the index their error flag caught after the run
// (backend/cuda/gather_fault.h).
#pragma once

#include <cstdint>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy::reference {

// Off the gathered axis, the index may be shorter than the input, never longer (torch.gather).
void check_gather_extents(const Op& gather, const std::vector<int64_t>& index_sizes, const std::vector<int64_t>& input_sizes, int axis);

// The index value `value` at row-major position `position` of the index is outside [0, the
// input's size along `axis`): a user error at the gather, naming its input, the value, its
// position and the valid range.
[[noreturn]] void gather_index_out_of_range(const Op& gather, int64_t value, int64_t position, const std::vector<int64_t>& index_sizes,
                                            const std::vector<int64_t>& input_sizes, int axis);

}  // namespace alloy::reference
