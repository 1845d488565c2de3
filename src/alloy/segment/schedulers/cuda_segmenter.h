// Segmentation for the CUDA target: merges ops into the fewest segments that the GPU schedulers
// (noop, matmul, normalization, reduction, pointwise) accept, recording every refusal.
#pragma once

#include "alloy/segment/segment.h"

namespace alloy {

Segmentation segment_for_cuda(const Fusion& fusion);

}  // namespace alloy
