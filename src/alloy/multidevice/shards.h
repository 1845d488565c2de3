// Moving between a global value and a device's part of it, on the host: what a tool needs that
// reads global inputs on every rank and writes global outputs (`alloy run` under mpirun), and
// what tests compare with.
#pragma once

#include "alloy/ir/fusion.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/tensor/tensor.h"

namespace alloy::multidevice {

// Team rank `team_rank`'s part of a global CPU tensor (a contiguous copy; the tensor itself when
// replicated or partial). A size the mesh does not divide is a user error naming `what`.
Tensor local_part(const Tensor& global, const Sharding& sharding, int team_rank, const std::string& what);

// The global value of a sharded CPU tensor, gathered over `team` (collective: every rank of the
// team calls it); a replicated tensor itself.
Tensor gather_global(const Tensor& local, const Sharding& sharding, Communicator& team);

// This process's position in `mesh`, or -1 when it is not in it.
int team_rank_of(const std::vector<int64_t>& mesh);

}  // namespace alloy::multidevice
