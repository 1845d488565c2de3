// What a generated kernel needs to know about a group of ops: the iteration domain, the axes
// reduced (if any), how each value's axes map onto the domain, which values are loaded from
// memory ("leaves": segment inputs, possibly through views applied on the host, or a `cat` of
// such values), and which are computed once per row (after a reduction) rather than once per
// element. Shared by the GPU schedulers (to accept or refuse a group) and by the code generator.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

struct ValueLayout {
  // For each axis of the value: the domain axis it runs along, or -1 when the value is
  // broadcast along it (extent 1, or a broadcast axis made by broadcast_in_dim/expand).
  std::vector<int> axis_map;
  bool per_row = false;  // varies only along kept (non-reduced) domain axes: computed once per row
  bool leaf = false;     // loaded from memory (a segment input, through host-side views)
  // For stored outputs: the domain axis each output axis is written along (-1 for extent 1).
  std::vector<int> store_axes;
};

// A leaf that is a `cat` of host-side values (segment inputs or views of them): a multi-source
// leaf. At a position whose index along the cat's axis is i, it reads source r at
// i - (the sizes of sources 0..r-1 along that axis). An operand may also be a chain of one-input
// pointwise ops of a host-side value read by nothing else (rotate-half's `cat(neg(x2), x1)`): the
// chain is applied to each element of that source as it loads. A cat of other computed values is
// refused: the segmenter ends the kernel before it, so its operands come from memory.
struct CatLeaf {
  const Op* op = nullptr;
  std::vector<Value*> sources;  // the host-side values read, one an operand, in order
  // per source, the ops from it to the cat's operand, in order (empty: the operand itself)
  std::vector<std::vector<const Op*>> chains;
  int axis = 0;                 // the concatenated axis, among the value's axes
  // The sources do not share one dtype: each element is converted to the cat's dtype as loaded.
  bool mixed_dtypes = false;
  bool has_chains() const {
    for (const auto& c : chains)
      if (!c.empty()) return true;
    return false;
  }
};

struct KernelAnalysis {
  std::vector<Extent> domain;
  std::vector<int> reduced_axes;            // domain axes; empty for a pointwise kernel
  std::vector<const Op*> host_views;        // view ops applied to segment inputs on the host
  std::vector<const Op*> compute_ops;       // everything else, in order (includes in-kernel views)
  std::vector<Value*> leaves;               // tensor values the kernel loads
  std::map<const Value*, CatLeaf> cat_leaves;  // the leaves that are cats, by value
  std::vector<Value*> scalar_inputs;        // scalar inputs passed by value (literals are inlined)
  std::vector<Value*> outputs;              // values the kernel stores
  std::map<const Value*, ValueLayout> layout;
  std::vector<std::vector<const Op*>> stages;  // reductions grouped by dependency depth
  // One pass over the domain computes everything: a single stage of reductions, and no value
  // stored per element depends on a reduction result. Such a kernel may also run as a column
  // (outer) reduction with the reduced axes split over blocks (bias gradients, sum over dim 0).
  bool single_pass = false;

  bool is_reduction() const { return !reduced_axes.empty(); }
  const ValueLayout& at(const Value* v) const { return layout.at(v); }
  const CatLeaf* cat_leaf(const Value* v) const {
    auto it = cat_leaves.find(v);
    return it == cat_leaves.end() ? nullptr : &it->second;
  }
  // The values whose tensors a launch passes, in Params order: each leaf (a cat leaf: each of
  // its sources), then each output.
  std::vector<Value*> launch_values() const;
  // The domain axis a cat leaf's concatenated axis runs along, or -1 where the leaf is
  // broadcast along it (extent 1).
  int cat_domain_axis(const Value* leaf) const { return at(leaf).axis_map.at(size_t(cat_leaves.at(leaf).axis)); }
};

// Either an analysis or the reason the group cannot be one generated kernel.
using KernelAnalysisResult = std::variant<KernelAnalysis, std::string>;

// `outputs` are the values the segment must store (used after it or returned by the fusion).
KernelAnalysisResult analyze_kernel(const std::vector<const Op*>& ops, const std::vector<Value*>& segment_inputs,
                                    const std::vector<Value*>& outputs);

}  // namespace alloy
