// The communicators behind communicator_for (internal to multidevice/).
#pragma once

#include "alloy/multidevice/communicator.h"

namespace alloy::multidevice {

// Host tensors: MPI over the mesh's ranks (a team of one copies). Collective over the job.
std::shared_ptr<Communicator> host_communicator(const std::vector<int64_t>& mesh);

// Device tensors: NCCL where it serves, else staged through host memory over `host` (which
// sends NCCL's unique id too), moving tensors through `runtime`. Collective over the team.
// Builds without CUDA report an error.
std::shared_ptr<Communicator> device_communicator(std::shared_ptr<Communicator> host, int device,
                                                  const host_ir::DeviceRuntime& runtime);

}  // namespace alloy::multidevice
