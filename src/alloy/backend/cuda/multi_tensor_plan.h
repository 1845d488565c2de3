// How a multi-tensor segment (segment/schedulers/multi_tensor.h) is launched on given tensors: the
// table of the kernel's Params (codegen/kernel_codegen.h, generate_multi_tensor_kernel) filled from
// each member's tensors, the vector width its dtypes allow and, per member, whether its pointers
// allow it; the grid. A member whose tensors are not all contiguous is left to a launch of its own
// (its chain's pointwise kernel, which reads any strides). No GPU calls: the CUDA runtime
// (multi_tensor_segment), `alloy compile --bind` and the CPU emulation tests share it.
#pragma once

#include <cstdint>
#include <vector>

#include "alloy/backend/cuda/launch_plan.h"
#include "alloy/segment/schedulers/multi_tensor.h"

namespace alloy::cuda {

struct MultiTensorLaunch {
  bool launch = false;  // false: no member in the table has an element
  KernelVariant variant;  // one axis, the widest vector the dtypes allow (16 bytes of the narrowest), every leaf 'v'
  std::vector<uint64_t> words;  // the Params (multi_tensor_param_words)
  unsigned grid = 1, block = 256;
  int64_t chunks = 0;
  int tensors = 0, vectorized = 0;  // table entries in use, and those read and written in vectors
  std::vector<size_t> apart;  // members launched on their own: a tensor not contiguous
};

// The variant of a multi-tensor kernel whatever the tensors (the vector from the dtypes alone; the
// block and the chunk's vectors a thread, `items`, from the tuning).
KernelVariant multi_tensor_variant(const KernelAnalysis& kernel, const KernelTuning& tuning);

// A launch's scalar words (double bits, or int64): `shared` each scalar input every member reads, in
// the kernel's order; `own[i]` member i's own value of each per-member scalar
// (MultiTensorGroup::scalars), in the same order.
struct MultiTensorScalars {
  std::vector<uint64_t> shared;
  std::vector<std::vector<uint64_t>> own;
};

// The scalar words of `group`'s launch, read from the host tensors `value_of` gives.
MultiTensorScalars multi_tensor_scalar_words(const MultiTensorGroup& group, const std::function<const Tensor&(const Value*)>& value_of);

// `tensors[i]`: member i's tensors in the kernel's launch order (each leaf, then each output),
// `members` the table's size (the segment's member count), `per_member` which scalar inputs are each
// member's own (MultiTensorGroup::per_member).
MultiTensorLaunch plan_multi_tensor_launch(const KernelAnalysis& kernel, const std::vector<bool>& per_member, int members,
                                           const std::vector<std::vector<const Tensor*>>& tensors, const MultiTensorScalars& scalars,
                                           const LaunchTarget& target);

}  // namespace alloy::cuda
