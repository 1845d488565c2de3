// propagate_sharding: gives every tensor value of a fusion that names a mesh a sharding, and
// records where each came from. A pass over the whole finished fusion, so the order ops were
// created in does not matter:
//   1. parameters: the user's annotation, else replicated (the format's default);
//   2. forward, in definition order: each op's output gets the cheapest choice of its rule
//      (passes/sharding/sharding_rules.h: pointwise, reductions -> partial, column- and row-parallel
//      linear/matmul, reshape split/merge, permute, slice, cat); a statement the user annotated
//      keeps the annotation (insert_resharding reshards what the op computes into it);
//   3. backward, in reverse order: a value propagated as replicated whose every consumer wants
//      it sharded the same way (values made from literals or replicated inputs alone, broadcasts
//      of a sharded axis) takes that sharding from its consumers, when its op can compute it
//      locally at no higher cost.
// A user's annotation is never changed. The cost rule counts each symbol at its size in `sizes`
// (a run's bindings; the executor decides per binding) and at 4096 where unbound. With sizes
// bound, a fusion output the user did not annotate keeps the layout it gets where none is
// (source `pinned`, treated as an annotation): the outputs' layouts are the fusion's interface,
// the same at every size, and only what moves inside follows the sizes.
// Precondition: a checked fusion; every annotation on one mesh (else a located user error).
// Postcondition: every tensor value has a sharding.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

std::unique_ptr<Fusion> propagate_sharding(const Fusion& fusion, const Bindings& sizes = {});

// The in-place outputs of `declared` (`return y -> p`, which passes need not carry) against the
// shardings `propagated` (propagate_sharding's result for it, or for a rewrite of it with the same
// inputs and outputs) gives them: y laid out as p is, else a user error at the return.
void check_in_place_shardings(const Fusion& declared, const Fusion& propagated);

// `--dump sharding`: every value with its sharding and where it came from.
std::string sharding_report(const Fusion& fusion);

}  // namespace alloy
