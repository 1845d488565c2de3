// Checks run-time inputs against a fusion's declaration and binds its symbolic sizes.
#pragma once

#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy {

// Every input present, of the declared dtype and rank, each constant axis of its size, each
// symbol bound consistently; then derived sizes and constraints. Errors name the input, the axis
// and both sizes.
Bindings bind_inputs(const Fusion& fusion, const std::vector<Tensor>& inputs);

// With the sizes bound, every value of the fusion must be a size that can run: at most
// kMaxTensorElements elements and at most `memory_bytes` bytes (the device's memory; 0: no
// bound). Otherwise a user error at the value's statement naming its size and the limit.
// `in_doubles`: the run holds every value, views included, as 8-byte doubles (the CPU reference
// kernels load their operands so); otherwise views are free.
void check_run_sizes(const Fusion& fusion, const Bindings& bindings, int64_t memory_bytes, const std::string& device,
                     bool in_doubles = false);

}  // namespace alloy
