// How each in-place output (`return y -> x`) is written: by the kernel that computes y, straight
// into x's memory (y's buffer is x's: one read and one write of each element, no copy), or into a
// buffer of y's own that the run copies into x after everything else (the executor's write).
// Precondition: `segmentation` is `fusion`'s, and `fusion.output_aliases()` names the targets.
// Postcondition: one InPlaceOutput per in-place output, in return order, each saying why.
//
// The kernel writes x directly only where that cannot change what any op or output sees:
//  - y is computed by a generated pointwise kernel S (every element is computed, from loads into
//    registers, by the thread that stores it; a reduction's or normalization's passes are not);
//  - S reads x only as a leaf at the element it writes (a compute op's operand whose layout over
//    the domain is y's), never through a view, a cat or a broadcast, so every element of x is
//    read by the thread that then writes it, before it writes it;
//  - nothing outside S reads x or a view of x (before S on a side stream, or after it, it would
//    see the new values or race with them);
//  - no other output is x or a view of x (the aliasing rule: every other output keeps the values
//    from before the write), and y is written in place into no other input.
// A multi-tensor segment (schedulers/multi_tensor.h) computes each of its chains as that chain's
// own pointwise kernel would: each chain is judged as such a kernel (its member segment).
// The CPU target never writes directly: its reference kernels compute every op into a buffer of
// its own.
#pragma once

#include <vector>

#include "alloy/segment/segment.h"

namespace alloy {

std::vector<InPlaceOutput> decide_in_place(const Fusion& fusion, const Segmentation& segmentation);

}  // namespace alloy
