// into += sum on the device: a reduce-scatter ring's accumulate step (host_ir/pipeline_collectives.h).
#pragma once

#include "alloy/backend/cuda/cuda_api.h"

namespace alloy::cuda {

// Both contiguous, of one dtype and shape; 16-bit floats add in f32 and round once. On `stream`.
void accumulate(const Tensor& into, const Tensor& sum, const Stream& stream);

// The kernel's CUDA source and name (tests compile it without a GPU).
const char* accumulate_source();
constexpr const char* kAccumulateKernel = "alloy_accumulate";

}  // namespace alloy::cuda
