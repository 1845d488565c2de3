// Zero-copy views for the shape ops (broadcast_in_dim, expand, reshape, permute, slice, squeeze,
// unsqueeze, segment_set): metadata only, so they work on tensors of any device.
#pragma once

#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy {

// The view `op` makes of `input`, with concrete output sizes `out_sizes`. Returns an undefined
// Tensor when the op cannot be a view of this input (a reshape across non-contiguous axes).
Tensor apply_view(const Op& op, const Tensor& input, const std::vector<int64_t>& out_sizes);

}  // namespace alloy
