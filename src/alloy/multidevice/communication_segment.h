// The executable of a communication segment: one resharding op (all_gather, reduce_scatter,
// all_reduce, all_to_all, shard_slice) on this device's part of a value, through the run's
// communicator. Collectives move whole parts, so the buffer handed to one is contiguous with
// the sharded axis outermost: a part already laid out so is passed as it is, any other is packed
// first, and results come back as views with the axes in their places (a permuted view where
// the axis was not outermost). shard_slice moves nothing: it is a view of this device's part.
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy::multidevice {

// Buffers are allocated and packed through `device`, the runtime of the run's device kind.
std::unique_ptr<host_ir::SegmentExecutable> make_communication_segment(const Segment& segment, const host_ir::DeviceRuntime& device);

}  // namespace alloy::multidevice
