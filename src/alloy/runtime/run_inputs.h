// Inputs for a run that is not given all its data (`alloy run`, tests, benchmarks): symbolic sizes
// resolved from the given tensors and from explicit bindings, seeded random values for the inputs
// not given, and the one-line summary `alloy run` prints for each result.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy {

// A requested size: a symbol ("B" -> 4) or, for an axis declared `?`, "INPUT.AXIS" ("ids.1" -> 4).
using SizeRequest = std::pair<std::string, int64_t>;

// Binds every symbol of the inputs' declared shapes: first from the given tensors (`given` has one
// entry per declared input; an undefined Tensor is an input to draw), then from `requested`.
// A request that names no size of the fusion, or contradicts a given tensor, and a size that
// neither fixes while an input to draw needs it, are UserErrors; the last lists every such size.
Bindings resolve_input_sizes(const Fusion& fusion, const std::vector<Tensor>& given,
                             const std::vector<SizeRequest>& requested);

// A new CPU tensor with seeded random values: floats normal(0, 1), integers uniform in 0..9,
// bools a fair coin. The same (dtype, sizes, seed) always gives the same values.
Tensor random_tensor(DType dtype, const std::vector<int64_t>& sizes, uint64_t seed);

// The given tensors as they are, and the others drawn at random with sizes from `bindings`.
// Input i is drawn with its own seed made from (seed, i), so giving one input from a file does not
// change the values drawn for another. A scalar input gets a float in [0, 1) or an integer in 0..9.
std::vector<Tensor> complete_inputs(const Fusion& fusion, std::vector<Tensor> given, const Bindings& bindings,
                                    uint64_t seed);

// "mean=0.0123 std=0.98 min=-3.1 max=3.3 first=[0.12, -0.5, 1.7, 0.031, ...]" for a CPU tensor;
// NaNs and infinities are counted apart ("nan=3") and left out of the statistics.
std::string summarize_tensor(const Tensor& tensor);

// "bf16[8, 128, 768]"
std::string tensor_type_str(const Tensor& tensor);

}  // namespace alloy
