// unify_extents: sizes shape inference found must be equal (two different symbols or `?`s meeting
// in a broadcast, a contraction or a cat's other axes: a run-time constraint) become one. Every
// value's shape (inputs included) and every derived size is rewritten to its class's
// representative: a constant where the class has one, else its first input symbol, else its
// first derived size. The generated kernels then see one extent per axis (`add(x: f32[?, 4],
// y: f32[?, 4])` is one pointwise kernel, not a CPU fallback), and binding the rewritten inputs
// checks the equality at the input. A symbol no input carries any more stays bound as a derived
// size equal to its representative, so the constraints, and anything else still naming it (the
// global fusion of a sharded one), evaluate as before.
// Runs for the CUDA target, last of the fusion passes. Postcondition: names, dtypes, ops and
// constraints are kept; only extents change.
#pragma once

#include <memory>

#include "alloy/ir/fusion.h"

namespace alloy {

std::unique_ptr<Fusion> unify_extents(const Fusion& fusion);

}  // namespace alloy
