// decompose_composites: rewrites softmax, layer_norm and rms_norm into the primitives a
// framework would trace (cast to f32, var_mean / max / sum with keepdim, rsqrt, sub, mul, add,
// cast back), so the GPU schedulers see one shape of normalization whatever the source; and
// pow(x, 0.5) / pow(x, -0.5) of a floating x into sqrt / rsqrt, as PyTorch computes them (the
// CPU reference's pow does the same for a literal exponent); and reductions that reduce nothing
// (a 0-dim value, axes of size 1) into the value itself (a variance: 0 or NaN).
// Precondition: a valid fusion. Postcondition: no composite ops; outputs keep names and types.
#pragma once

#include <memory>

#include "alloy/ir/fusion.h"

namespace alloy {

std::unique_ptr<Fusion> decompose_composites(const Fusion& fusion);

}  // namespace alloy
