// insert_resharding: makes every change of sharding an op of its own. Where an op's rule needs an
// input in another sharding than the input has (passes/sharding/sharding_rules.h), where a statement
// the user annotated differs from what its op computes, and where a fusion output is still
// partial, a resharding op is inserted:
//   shard(a) -> replicated   all_gather(axis=a)
//   shard(a) -> shard(b)     all_to_all(from_axis=a, axis=b)
//   partial  -> replicated   all_reduce(reduce=...)
//   partial  -> shard(b)     reduce_scatter(axis=b, reduce=...)  (never all_reduce + slice)
//   replicated -> shard(b)   shard_slice(axis=b)                  (this device's part; no traffic)
// One reshard of a value serves every consumer that needs the same sharding. A partial fusion
// output is all-reduced; its name moves to the reduced value.
// The choices are propagate_sharding's, made again at the same `sizes` (the cost rule's), so an
// annotated statement computes what propagation costed before its reshard.
// Precondition: propagate_sharding ran at `sizes`. Postcondition: every op's inputs have the shardings its
// rule computes from, so each device computes its part alone; names, outputs and user
// annotations are kept.
#pragma once

#include <memory>

#include "alloy/ir/fusion.h"

namespace alloy {

std::unique_ptr<Fusion> insert_resharding(const Fusion& fusion, const Bindings& sizes = {});

}  // namespace alloy
