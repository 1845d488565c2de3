// Builds the executable host program for a fusion on a CUDA device: segments it for CUDA, lowers
// it, and makes each segment's executable (generated kernel, cuBLASLt matmul, host-side view, or
// CPU fallback).
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy::cuda {

// `fusion` must outlive the plan (segments point into it).
std::unique_ptr<host_ir::Executable> build_cuda_plan(const Fusion& fusion);

}  // namespace alloy::cuda
