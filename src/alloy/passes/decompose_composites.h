// decompose_composites: rewrites softmax, layer_norm and rms_norm into the primitives a
// framework would trace (cast to f32, var_mean / max / sum with keepdim, rsqrt, sub, mul, add,
// cast back), so the GPU schedulers see one shape of normalization whatever the source.
// Precondition: a valid fusion. Postcondition: no composite ops; outputs keep names and types.
#pragma once

#include <memory>

#include "alloy/ir/fusion.h"

namespace alloy {

std::unique_ptr<Fusion> decompose_composites(const Fusion& fusion);

}  // namespace alloy
