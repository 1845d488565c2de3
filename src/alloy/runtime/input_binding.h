// Checks run-time inputs against a fusion's declaration and binds its symbolic sizes.
#pragma once

#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/runtime/tensor.h"

namespace alloy {

// Every input present, of the declared dtype and rank, each constant axis of its size, each
// symbol bound consistently; then derived sizes and constraints. Errors name the input, the axis
// and both sizes.
Bindings bind_inputs(const Fusion& fusion, const std::vector<Tensor>& inputs);

}  // namespace alloy
