// What a generated kernel needs to know about a group of ops: the iteration domain, the axes
// reduced (if any), how each value's axes map onto the domain, which values are loaded from
// memory ("leaves": segment inputs, possibly through views applied on the host, or a `cat` of
// such values), and which are computed once per row (after a reduction) rather than once per
// element; positions (iota) and the data-dependent loads of gathers. Shared by the GPU schedulers
// (to accept or refuse a group) and by the code generator.
#pragma once

#include <map>
#include <set>
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
  // An outer reduction's result (over the kept axes: a column sum beside the row reductions) and
  // the pointwise ops of such results: varies only along the reduced axes, complete only once
  // every row is done, so computed once per column at the kernel's end (inner_outer_kernel.cpp).
  bool per_column = false;
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

// A gather in a kernel, y = gather(x, index, dim=axis): at each position of y the kernel loads x
// from memory at that position, but along `axis` at the index's value there (range-checked: an
// index outside [0, x.shape[axis]) sets the kernel's error flag and loads nothing). x is a
// host-side value (`source`: a segment input or a view of one), or computed from one by a chain of
// one-input pointwise ops (`chain`, in order; the cross-entropy's `gather(cast(logits))`), which is
// applied to the loaded element as it would be computed there. The source is not a leaf: it is
// never read in vectors, only element by element at computed addresses.
struct GatherLoad {
  const Op* op = nullptr;
  Value* source = nullptr;
  std::vector<const Op*> chain;
  int axis = 0;  // along x's axes (x's rank is the index's and y's)
};

// The inputs a kernel computes `op`'s value from, in order: all of them, except a gather's input x,
// which it loads at the index's positions (GatherLoad), so only the index is read as a value.
std::vector<Value*> computed_from(const Op& op);

struct KernelAnalysis {
  std::vector<Extent> domain;
  std::vector<int> reduced_axes;            // domain axes; empty for a pointwise kernel
  std::vector<const Op*> host_views;        // view ops applied to segment inputs on the host
  std::vector<const Op*> compute_ops;       // everything else, in order (includes in-kernel views)
  std::vector<Value*> leaves;               // tensor values the kernel loads
  std::map<const Value*, CatLeaf> cat_leaves;  // the leaves that are cats, by value
  // Positions: an iota's value (element i is i) and views of it are leaves with no memory; the
  // kernel computes each element from its offset in a tensor of contiguous strides (launch_plan's
  // position_tensor). `iotas` make them, `position_views` (zero-copy view ops only) view them, and
  // `positions` holds every such value (the leaves among them are read as positions).
  std::vector<const Op*> iotas;
  std::vector<const Op*> position_views;
  std::set<const Value*> positions;
  std::vector<GatherLoad> gathers;  // in compute order
  std::vector<Value*> scalar_inputs;        // scalar inputs passed by value (literals are inlined)
  std::vector<Value*> outputs;              // values the kernel stores
  std::map<const Value*, ValueLayout> layout;
  std::vector<std::vector<const Op*>> stages;  // reductions grouped by dependency depth
  // Outer reductions: reductions over exactly the kept axes (sum, mean, max or min over the rows,
  // the layer norm backward's dw and db beside its row sums), of values computed per element.
  // Not in `stages`: each thread accumulates its columns in the final pass over every row it
  // handles, and the blocks' partials are combined at the kernel's end (SchedulerKind::inner_outer).
  std::vector<const Op*> outer_reductions;
  // One pass over the domain computes everything: a single stage of reductions, and no value
  // stored per element depends on a reduction result. Such a kernel may also run as a column
  // (outer) reduction with the reduced axes split over blocks (bias gradients, sum over dim 0).
  bool single_pass = false;

  bool is_reduction() const { return !reduced_axes.empty(); }
  bool has_outer_reductions() const { return !outer_reductions.empty(); }
  // Computed once per element: neither per row nor per column (every value of a pointwise kernel).
  bool per_element(const Value* v) const {
    const ValueLayout& l = at(v);
    return !is_reduction() || (!l.per_row && !l.per_column);
  }
  const ValueLayout& at(const Value* v) const { return layout.at(v); }
  const CatLeaf* cat_leaf(const Value* v) const {
    auto it = cat_leaves.find(v);
    return it == cat_leaves.end() ? nullptr : &it->second;
  }
  bool is_position(const Value* v) const { return positions.count(v) > 0; }
  // The index in `gathers` of a gather op's load, or -1.
  int gather_index(const Op* op) const {
    for (size_t j = 0; j < gathers.size(); ++j)
      if (gathers[j].op == op) return int(j);
    return -1;
  }
  // Positions or gathers: kernels of the pointwise and row shapes only (launch_plan refuses column
  // kernels, tile transposes and split stages for them).
  bool has_indexing() const { return !gathers.empty() || !positions.empty(); }
  // The values whose tensors a launch passes, in Params order: each leaf (a cat leaf: each of
  // its sources; a position: a tensor of no memory), then for each gather its source and its
  // output (standing for its positions in the index: a position tensor of the output's shape,
  // which the kernel reports an out-of-range index at), then each output.
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
