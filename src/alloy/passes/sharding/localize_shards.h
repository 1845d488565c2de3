// localize_shards: the fusion one device runs. Every value keeps its name and sharding, and its
// shape becomes its local shape: a sharded axis divided by the mesh size (B -> B/2); replicated
// and partial values keep their global shape. Ops are copied with local types (no shape
// inference: derived symbols and constraints stay those of the global fusion, which binds the
// run's sizes). Two ops change so that partial values sum to the global result:
//   - a mean over a sharded axis is the local mean times 1/N (shards are even);
//   - a linear whose output is partial adds bias/N on each device instead of the whole bias.
// Precondition: insert_resharding ran. Postcondition: every device computes its part of each
// value from its parts of the inputs; resharding ops are the only ops whose input and output
// local shapes differ.
#pragma once

#include <memory>

#include "alloy/ir/fusion.h"

namespace alloy {

// The local shape of `v` (its type with the sharded axis divided by the mesh size).
ValueType local_type(const Value& v);

std::unique_ptr<Fusion> localize_shards(const Fusion& fusion);

}  // namespace alloy
