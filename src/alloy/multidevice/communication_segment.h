// The executable of a communication segment: one resharding op (all_gather, reduce_scatter,
// all_reduce, all_to_all, shard_slice) on this device's part of a value, through the run's
// communicator. Collectives move whole parts, so the buffer handed to one is contiguous with
// the sharded axis outermost: a part already laid out so is passed as it is, any other is packed
// first, and results come back as views with the axes in their places (a permuted view where
// the axis was not outermost). shard_slice moves nothing: it is a view of this device's part.
#pragma once

#include <functional>
#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy::multidevice {

// How the backend holding the tensors allocates and packs them.
struct DeviceMemory {
  std::function<Tensor(DType, const std::vector<int64_t>&, host_ir::RunState&)> empty;
  std::function<Tensor(const Tensor&, host_ir::RunState&)> contiguous;  // the tensor itself when already contiguous
};

std::unique_ptr<host_ir::SegmentExecutable> make_communication_segment(const Segment& segment, DeviceMemory memory);

// The host backend's DeviceMemory (CPU tensors).
DeviceMemory host_memory();

// A ring's step and rank through the run's team (host_ir::Executable::ring), for every backend.
host_ir::RingExchange ring_exchange();

}  // namespace alloy::multidevice
