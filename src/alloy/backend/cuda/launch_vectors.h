// How a generated kernel's launch reads and writes its tensors in vectors (issue 17's edge
// elements and tile transposes included): the launch's axes and tensors as the launch plan lays
// them out, and the choice of the widest vector every tensor's address and strides allow. Internal
// to the CUDA backend: launch_plan.cpp lays a launch out and calls these; launch_vectors.cpp
// holds them. No GPU calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/segment/schedulers/kernel_analysis.h"
#include "alloy/tensor/tensor.h"

namespace alloy::cuda {

// One axis of the launch: its size and every tensor's stride along it.
struct Axis {
  int64_t size;
  std::vector<int64_t> strides;  // per launch tensor (Slot)
  // The domain axis a cat leaf's concatenated axis runs along (the position along it selects the
  // source, so it is never merged with a neighbour), else -1.
  int cat_axis = -1;
};

// The tensors a launch passes (KernelAnalysis::launch_values), each with the value whose layout
// places it on the domain (a cat source: its cat leaf's; a gather's source and positions: its
// output's), the leaf it belongs to (-1: none), and what it is. Only leaves read from memory and
// outputs are accessed in vectors: positions are computed, gathers read element by element.
struct Slot {
  enum class Kind { leaf, position, gather_source, gather_positions, output };
  const Value* laid_out_as;
  int leaf;
  Kind kind;
  int gather = -1;  // the gather's index in KernelAnalysis::gathers
  bool in_vectors() const { return kind == Kind::leaf || kind == Kind::output; }
  bool is_position() const { return kind == Kind::position || kind == Kind::gather_positions; }
};

// The stride of a launch tensor along domain axis d; 0 where it is broadcast. A gather's source
// runs along the domain as the gather's output does, but for the gathered axis (the index's value
// picks the element there).
int64_t domain_stride(const KernelAnalysis& a, const Slot& slot, const Tensor& tensor, int d);

// Every cat leaf's sources: where each starts and ends along the cat's axis, and the launch
// tensors (slots) they are.
struct CatSources {
  int domain_axis;               // -1: the leaf is broadcast along the cat's axis
  std::vector<int> slots;
  std::vector<int64_t> starts;   // per source
  std::vector<int64_t> ends;     // per source but the last
};

// The widest vector (up to 16 bytes for the narrowest type, at most `max_vector` elements) along
// axis `va` (the innermost reduced axis of a row kernel, the innermost kept axis of a column
// kernel, the innermost axis of a pointwise kernel): whole vectors where they fit, else (`edges`:
// row and pointwise kernels) vectors with edge elements. Sets v.vector, v.leaf_modes and
// v.edge_elements.
void choose_vector(const KernelAnalysis& a, const std::vector<Slot>& slots, KernelVariant& v, const std::vector<Axis>& axes, int va,
                   const std::vector<const Tensor*>& tensors, const std::vector<uintptr_t>& addresses,
                   const std::vector<CatSources>& cats, bool edges, int max_vector = 8);

// The domain's axes in kernel order (kept, then reduced; pointwise: all, in order) with every
// tensor's stride, contiguous neighbours merged (launch_plan.cpp's lay_out).
struct LaidOut {
  std::vector<Axis> outer, inner;
  int64_t numel = 1, rows = 1, cols = 1;
};

// The tensors of a launch, as plan_launch got them, and what they imply.
struct LaunchTensors {
  const std::vector<const Tensor*>& tensors;
  std::vector<Slot> slots;
  std::vector<CatSources> cats;
  std::vector<uintptr_t> addresses;  // as passed (launch_addresses)
};

// Every offset a kernel over `axes` computes (with slack for the lanes past the end) fits in an int.
bool small_offsets(const std::vector<Axis>& axes, int64_t numel);

// A pointwise kernel whose leaves disagree on the contiguous axis as a tile transpose
// (KernelVariant::transpose_axis), where it can be one (launch_vectors.cpp says when); false and
// `v` unchanged where not.
bool choose_transpose(const KernelAnalysis& a, const std::vector<Slot>& slots, KernelVariant& v, const std::vector<Axis>& axes,
                      const std::vector<const Tensor*>& tensors, const std::vector<uintptr_t>& addresses);

}  // namespace alloy::cuda
