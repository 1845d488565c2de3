// The CPU reference implementation of every op: the correctness oracle of the project and the
// CPU backend's kernels. Semantics follow PyTorch (each family's reference_*.cpp opens with its
// numerics): pointwise ops broadcast like NumPy and compute in double (exact int64 for integer
// and bool results), reductions accumulate in double or int64, matmul and linear round once to
// the output dtype.
#pragma once

#include <cstdint>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy {

// Runs `op` on CPU `inputs` (any strides and offsets; scalars arrive as 0-dim tensors whose
// dtype may differ from the declared one). `output_sizes` holds the concrete shape of each
// output. Compute ops return new contiguous tensors of op.outputs[i]->dtype(); view ops
// (broadcast_in_dim, expand, reshape where possible, permute, slice, squeeze, unsqueeze,
// segment_set) return zero-copy views of their input.
std::vector<Tensor> run_reference_op(const Op& op, const std::vector<Tensor>& inputs,
                                     const std::vector<std::vector<int64_t>>& output_sizes);

}  // namespace alloy
