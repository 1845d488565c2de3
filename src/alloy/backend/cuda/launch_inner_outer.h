// The launch choices of the persistent inner-outer kernel (issue 27; KernelVariant::inner_outer:
// row reductions and outer reductions of the same values in one kernel, the layer norm and RMSNorm
// backwards): its block, its vectors a thread, the rows it loads ahead (in registers or staged
// through shared memory), its row groups, blocks an SM and partials' combine. Internal to the
// CUDA backend: plan_launch (launch_plan.cpp) calls it; no GPU calls.
#pragma once

#include <cstdint>
#include <vector>

#include "alloy/backend/cuda/launch_plan.h"
#include "alloy/backend/cuda/launch_vectors.h"

namespace alloy::cuda {

// Sets `v`'s inner-outer choices for the laid-out launch `l` on `target`; returns the blocks of
// its persistent grid.
int64_t choose_inner_outer(const KernelAnalysis& a, const LaidOut& l, const LaunchTensors& lt, const LaunchTarget& target,
                           const std::vector<Axis>& axes, KernelVariant& v);

}  // namespace alloy::cuda
