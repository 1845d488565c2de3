// The generated kernels of the ReLU bit masks (ops/op_table's bitmask class): relu_mask(x) packs the
// last axis of x, 32 elements to an i32 word, and relu_backward_mask(grad, mask) keeps grad where
// the mask's bit is set. Neither is pointwise (the mask's last axis is ceil(N / 32) words), so they
// are kernels of their own shape over a [rows, N] view of the tensors, not cases of the
// pointwise emitter:
//   relu_mask: a warp per word; lane j tests element 32k + j and __ballot_sync packs the 32
//     answers, which lane 0 stores (a grid-stride loop over the words, uniform in each warp);
//   relu_backward_mask: a thread per element, reading its word and copying grad's stored bits
//     or zero (the result has grad's dtype, so no conversion).
// Pure text and arithmetic, no GPU: the CPU emulation tests run the same source and launch words.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy::cuda {

// `kind` is relu_mask (dtype: x's) or relu_backward_mask (dtype: grad's). The kernel is
// `extern "C" __global__ void <name>(const Params p)`, Params being 8-byte words (below).
std::string generate_bitmask_kernel(OpKind kind, DType dtype, const std::string& name);

constexpr int kBitmaskThreads = 256;

struct BitmaskLaunch {
  bool launch = false;  // false: nothing to compute (an empty tensor)
  std::vector<uint64_t> words;
  unsigned grid = 0, block = kBitmaskThreads;
};

// The launch of `kind` on `tensors` (its inputs, then its output), each a 2-D [rows, columns] view
// (the element tensors [rows, N], the masks [rows, ceil(N / 32)]) with any strides:
//   relu_mask:          x, x row stride, x column stride, mask, mask row stride, rows, N, words
//   relu_backward_mask: grad, its two strides, mask, mask row stride, out, its two strides, rows, N
// Pointers are the tensors' data() (device addresses on the GPU, host ones in the emulation).
BitmaskLaunch plan_bitmask_launch(OpKind kind, const std::vector<const Tensor*>& tensors, int sm_count);

}  // namespace alloy::cuda
