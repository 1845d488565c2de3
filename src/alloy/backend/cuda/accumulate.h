// into += the sum of addends on the device: a reduce-scatter ring's accumulate step, the copy
// engines' reduce-scatter finish, and the peers' parts a pipelined reduce-scatter's own GEMM did not
// take as its C (host_ir/pipeline_collectives.h).
#pragma once

#include <vector>

#include "alloy/backend/cuda/cuda_api.h"

namespace alloy::cuda {

// All contiguous, of one dtype and shape; one pass over them (a launch per 8 addends), summed in
// f32 for 16-bit floats (double for f64) and rounded once a launch; integers wrap; bools or. 16
// bytes at a time where every pointer is 16-byte aligned, else element by element. On `stream`.
void accumulate(const Tensor& into, const std::vector<Tensor>& addends, const Stream& stream);

// The kernel's CUDA source and name (tests compile it without a GPU).
const char* accumulate_source();
constexpr const char* kAccumulateKernel = "alloy_accumulate";

}  // namespace alloy::cuda
