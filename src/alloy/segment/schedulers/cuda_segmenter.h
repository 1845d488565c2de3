// Segmentation for the CUDA target: merges ops into the fewest segments that the GPU schedulers
// (scheduler.h: communication, matmul, generated kernels, bitmask, noop, then cpu_fallback)
// accept, trying them in that order and recording every refusal.
#pragma once

#include "alloy/segment/segment.h"

namespace alloy {

Segmentation segment_for_cuda(const Fusion& fusion);

}  // namespace alloy
