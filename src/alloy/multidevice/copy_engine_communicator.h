// The copy-engine form of the pipelined loops' chunked collectives (internal to multidevice/).
#pragma once

#include <memory>

#include "alloy/multidevice/communicator.h"

namespace alloy::multidevice {

// `nccl` with its chunked all-gather and sum reduce-scatter (all_gather_into_parts,
// reduce_scatter_parts and its send/finish halves) moved by the copy engines between GPUs of one
// host that reach each other, and the landed forms (all_gather_landed, and the sum
// reduce-scatter's reduce_scatter_parts_landed: the peers' chunks read in this rank's staging
// slots until release_landed); everything else stays `nccl`'s. Collective over the team (`host`
// is its host team); returns `nccl` itself where the copy engines cannot serve (a team of one,
// ranks on several hosts, no peer access, ALLOY_NO_COPY_ENGINES=1), said once on stderr.
std::shared_ptr<Communicator> with_copy_engines(std::shared_ptr<Communicator> nccl, std::shared_ptr<Communicator> host, int device,
                                                const host_ir::DeviceRuntime& runtime);

}  // namespace alloy::multidevice
