// The generated-kernel scheduler: accepts a run of ops that one CUDA kernel generated from the IR
// computes (kernel_analysis.h decides: one iteration domain, reductions the kernel shapes take,
// leaves it can load), as a normalization (a reduction whose row-shaped values are also
// stored), reduction or pointwise segment that keeps its KernelAnalysis. Refuses runs longer than
// kMaxKernelOps ops or whose tensors would pass CUDA's 32 KB of kernel parameters.
#pragma once

#include "alloy/segment/schedulers/scheduler.h"

namespace alloy {

// A kernel is grown op by op, each longer run analyzed again, so this cap keeps segmentation
// linear in the fusion's length (a longer chain becomes several kernels).
constexpr size_t kMaxKernelOps = 256;

Verdict can_schedule_generated(const Offer& offer);

// Whether a refusal is of a size limit (ops, kernel parameters), which a longer run only exceeds
// further: the segmenter stops growing the run there.
bool refused_for_size(const std::string& why);

}  // namespace alloy
