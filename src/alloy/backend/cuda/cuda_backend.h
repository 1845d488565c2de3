// The CUDA backend's entry points for backend/backend.h, in a header free of CUDA types: its
// device runtime and the executables of the segments it owns (generated kernels, cuBLASLt
// matmuls, bit masks, host-side views, CPU fallbacks). backend/none/cuda_unavailable.cpp defines
// them in a build without the toolkit.
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy::cuda {

const host_ir::DeviceRuntime& cuda_runtime();

// `segment` (of a CUDA segmentation) must outlive the executable.
std::unique_ptr<host_ir::SegmentExecutable> make_cuda_executable(const Segment& segment);

}  // namespace alloy::cuda
