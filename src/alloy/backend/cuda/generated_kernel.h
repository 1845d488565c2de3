// Segment executables for generated kernels (pointwise, reduction, normalization): at run time
// they make the host-side views, lay every tensor's strides over the kernel's domain, collapse
// contiguous axes, pick the vector width the pointers allow, and launch the cached variant.
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"
#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy::cuda {

std::unique_ptr<host_ir::SegmentExecutable> make_generated_kernel(const Segment& segment, KernelAnalysis analysis);

}  // namespace alloy::cuda
