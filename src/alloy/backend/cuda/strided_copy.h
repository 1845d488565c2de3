// A contiguous copy of a strided device tensor, for the few consumers that need packed operands
// (a reshape that cannot be a view, a matmul operand cuBLASLt cannot stride through).
#pragma once

#include "alloy/backend/cuda/cuda_api.h"

namespace alloy::cuda {

// `t` itself when it is already contiguous; otherwise a packed copy made on `stream`.
Tensor contiguous(const Tensor& t, const Stream& stream);

}  // namespace alloy::cuda
