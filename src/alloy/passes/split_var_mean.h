// split_var_mean: rewrites var_mean into the two means it is made of, mean(x) and
// mean((x - mean(x))^2) (times n / (n - correction)), so that a variance over a sharded axis is
// two partial sums and two small all-reduces instead of gathering the whole input. Runs only on
// fusions with a mesh (a single device keeps var_mean, which its kernels compute in one pass).
// 16-bit inputs are computed in f32 and cast back, as var_mean computes them. A correction over
// a symbolic size (n unknown until run time) keeps var_mean, which then gathers its input.
// Precondition: a checked fusion. Postcondition: no var_mean except those; names and types of
// every value the fusion had are kept.
#pragma once

#include <memory>

#include "alloy/ir/fusion.h"

namespace alloy {

std::unique_ptr<Fusion> split_var_mean(const Fusion& fusion);

}  // namespace alloy
