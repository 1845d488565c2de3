// The one rule by which a result matches its reference (the CPU reference kernels' result for
// the same inputs): the tests' tensors_close and Python's fd.validate both use it.
//
// Elementwise |actual - expected| <= atol + rtol * |expected| with tolerances set by the dtype
// (exact for integers and bools), atol at least 4 units in the last place of the expected
// values' RMS (fused code rounds intermediates at other points than the op-by-op reference: a
// GEMM's epilogue computes GELU from the unrounded product); NaN must match NaN, and a NaN or
// infinity where a number is expected fails. Floats may have a few scattered elements outside
// it (long bf16 reductions flip a few roundings): at most one in a thousand (at least one), each
// within 4x the tolerance, with the relative L2 error within what the dtype allows. A wrong row,
// or one element off by more than a flipped rounding can make it, still fails.
#pragma once

#include <string>

#include "alloy/tensor/tensor.h"

namespace alloy {

// Empty when `actual` matches `expected` (both on any device, at any strides); else what differs:
// the dtype, the shape, or "N of M elements differ (rtol R, atol A): [i] a vs e, ...". `scale`
// widens the dtype's tolerance (an f32 result computed from bf16 GEMM outputs inherits bf16
// rounding differences).
std::string compare_to_reference(const Tensor& actual, const Tensor& expected, double scale = 1.0);

}  // namespace alloy
