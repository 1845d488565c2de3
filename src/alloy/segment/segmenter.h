// The segmenter: partitions a fusion into segments, each owned by the first scheduler (in a fixed
// order) that accepts it. On the CPU every op is its own segment run by the reference kernels
// (views are no-op segments); on CUDA the schedulers are tried in the order documented in
// docs/architecture.md. Then it decides how each in-place output is written (segment/in_place.h).
#pragma once

#include "alloy/segment/segment.h"

namespace alloy {

Segmentation segment_fusion(const Fusion& fusion, Target target);

}  // namespace alloy
