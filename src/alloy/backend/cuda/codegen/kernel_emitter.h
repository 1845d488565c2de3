// What the kernel emitters (pointwise_kernel, transpose_kernel, row_kernel, column_kernel,
// grid_reduction_kernel) share: the Params struct,
// offsets from a linear index, leaf loads (multi-source cat leaves included), each op's register
// expression, and vector stores. Internal to codegen/; kernel_codegen.h is the public interface.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"

namespace alloy::cuda {

std::string emit_pointwise_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name);
std::string emit_row_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name);
std::string emit_column_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name);
std::string emit_transpose_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name);
std::string emit_grid_reduction_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name);

// `raw`, an element of `from` as stored, through a chain of one-input pointwise ops (a cat
// source's, CatLeaf::chains; a gather's, GatherLoad::chain), then stored as `to`: each op in its
// compute type, rounded to its dtype as the op-by-op program stores it.
std::string through_chain(const std::vector<const Op*>& chain, DType from, DType to, const std::string& raw);

class KernelEmitter;

// The inner-outer kernel's additions to the row kernel (inner_outer_kernel.cpp;
// KernelVariant::inner_outer): the row kernel's emitter calls them at these points of its text,
// with itself, so the column work reads values as the row kernel names them.
class InnerOuterParts {
 public:
  explicit InnerOuterParts(KernelEmitter& row_kernel) : e_(row_kernel) {}
  // Before the row loop: each outer reduction's column partials, a thread's `items` vectors.
  void declare_partials(const std::string& indent);
  // Rows loaded ahead (KernelVariant::prefetch: R of them), in place of the row kernel's loads of
  // the held row: before the row loop, the held leaves that vary only along the columns (loaded
  // once) and the block's first R rows, into the row's registers (L<k>[it], P<k> for the per-row
  // leaves) and those of the rows ahead (A<j>_<k>[it], B<j>_<k>); in the loop, before the row's
  // reductions, the block's row R ahead into N<k>[it] and Q<k>; at the iteration's end, each set
  // moves one row nearer.
  void load_rows_ahead(const std::string& indent);
  void load_next_row(const std::string& indent);
  void next_row_becomes_current(const std::string& indent);
  // In the final pass, element e of the thread's vector `element` ("[it]"): each outer
  // reduction's input added to its partial.
  void accumulate(const std::string& indent, const std::string& element);
  // After the row loop: the blocks' partials combined (the last blocks to arrive, or every block
  // past a barrier of the grid; in a fixed order), then each column's results and stores.
  void combine_and_store();
  // Row groups (KernelVariant::row_groups > 1), after the row loop: the groups' partials summed
  // into group 0's, in group order, through shared memory; group 0 then does the combine alone.
  void combine_groups();
  // The block's first row and the rows between its rows (blockIdx.x and gridDim.x, or with row
  // groups the group's: alloy_row_first, alloy_row_stride).
  std::string first_row() const;
  std::string row_stride() const;

 private:
  // With row groups, `body` runs in group 0 only (else as is); the thread that speaks for the block.
  void in_group_zero(const std::string& indent, const std::function<void(const std::string&)>& body);
  std::string block_thread() const;
  void combine_partials();
  void combine_over_the_grid();
  void declare_workspace(const std::string& indent, const std::string& rows);
  void store_columns();
  void store_column_vector(const std::string& indent);
  void reset_partials(const std::string& indent);
  void add_partials(const std::string& indent, const std::string& row);
  void store_partials(const std::string& indent, const std::string& row);
  std::set<int> held_row_leaves() const;
  std::string held_prefix(int rows_ahead) const;
  std::string scalar_prefix(int rows_ahead) const;
  std::vector<int> per_row_leaves() const;
  std::vector<std::string> tensors_of(const std::vector<int>& leaves) const;  // the leaves' Params names
  void load_row(const std::string& row, const std::string& held, const std::string& scalar, const std::string& indent);
  // Staged rows ahead (KernelVariant::staged_rows): the held leaves' rings of row slots in shared
  // memory; leaf k's element of vector `it` of this thread in slot `slot`; a row's copies into a slot.
  void declare_row_slots(const std::string& indent);
  std::string slot_element(int k, const std::string& slot) const;
  void stage_row(const std::string& row, const std::string& slot, const std::string& scalar, const std::string& indent);
  void load_held_vectors(const std::string& indent, const std::string& row_offsets, const std::string& held, const std::set<int>& which);
  void each_held_vector(const std::string& indent, const std::string& row_offsets, const std::set<int>& which,
                        const std::function<void(const std::string&)>& body);
  KernelEmitter& e_;
};

// The base of the five emitters: the text is written to os_ (emit_header first, then the kernel).
class KernelEmitter {
  friend class InnerOuterParts;

 public:
  KernelEmitter(const KernelAnalysis& a, const KernelVariant& v, std::string name);

 protected:
  // The prelude and the Params struct.
  void emit_header();

  int dims() const { return v_.outer_rank + v_.inner_rank; }
  char mode_of_leaf(int k) const { return v_.vector > 1 && k < int(v_.leaf_modes.size()) ? v_.leaf_modes[k] : 's'; }

  void emit_params();
  // Offsets of every leaf and output for coordinates of axes [first, first + count) of `index`.
  void emit_offsets(const std::string& index, int first, int count, const std::string& prefix,
                    const std::vector<std::string>& tensors, const std::string& indent);
  std::vector<std::string> tensor_names(bool leaves, bool outputs, bool per_row) const;
  // The register expression of `v` (a leaf element, a scalar, a literal or a computed value).
  std::string ref(const Value* v, const std::string& element) const;
  bool held_from_earlier_pass(const Value* v) const;
  // Emits `ct vN = expr;` for op's outputs; in-kernel views just alias their input.
  void emit_op(const Op& op, const std::string& element, const std::string& indent);
  // Computed, per-element values that `targets` need, in definition order.
  std::vector<const Op*> element_ops_for(const std::vector<const Value*>& targets) const;
  // Loads leaves `which` as raw vectors into <prefix>k<target> from p.lk + <offset_prefix>lk.
  void emit_leaf_loads(const std::string& prefix, const std::string& target, const std::string& offset_prefix,
                       const std::string& indent, const std::set<int>& which);
  // The Params names of leaf k's tensors: l<k>; for a cat leaf also its other sources l<k>s<r>,
  // and l<k>_at, its position along the cat's axis (addressed like a tensor: emit_offsets counts
  // it along that axis), which selects the source.
  std::vector<std::string> leaf_tensor_names(int k) const;
  // The address of leaf k's element at offsets <offset_prefix>l<k> (a cat leaf: in the source its
  // position selects; its sources share one dtype).
  std::string leaf_pointer(int k, const std::string& offset_prefix) const;
  // Leaf k's stored element at <offset_prefix><tensor> + extra(tensor), in the leaf's storage type
  // (a cat leaf's source of another dtype converted to the cat's).
  std::string leaf_raw(int k, const std::string& offset_prefix,
                       const std::function<std::string(const std::string&)>& extra = {}) const;
  void emit_cat_leaf_load(int k, const CatLeaf& cat, const std::string& dst, const std::string& offset_prefix,
                          const std::string& indent);
  void emit_leaf_arrays(const std::string& prefix, const std::string& extent, const std::string& indent, const std::set<int>& which);
  // Leaves (by index) that vary per element.
  std::set<int> element_leaves() const;
  // Per-element leaves a pass computing `targets` reads.
  std::set<int> leaves_for(const std::vector<const Value*>& targets) const;
  // Stores outputs that vary per element; `values[k]` is the register name of output k at element e.
  void emit_vector_stores(const std::string& offset_prefix, const std::string& indent, const std::string& element,
                          const std::function<void(const std::string&)>& compute_element);
  std::vector<const Value*> element_outputs() const;
  // Edge elements (KernelVariant::edge_elements): the tensor whose address fixes where a line's
  // aligned vectors start (its Params name, element bytes); `long long <name>`, the elements of a
  // line at p.<reference> + offset before its first aligned one (at most `extent`); one element at
  // offsets <offset_prefix>: leaves `which` read into lane 0 of their vectors, then `body` at e = 0;
  // and its stores.
  std::pair<std::string, int> edge_reference() const;
  void emit_edge_head(const std::string& name, const std::string& offset, const std::string& extent, const std::string& indent);
  void emit_edge_element(const std::string& offset_prefix, const std::string& indent, const std::set<int>& which,
                         const std::function<void(const std::string&)>& body);
  void emit_element_stores(const std::string& offset_prefix, const std::string& indent);
  // The body of a pointwise slot at offsets off_: the per-element leaves (cached_) loaded as
  // vectors, `ops` computed at each element and the outputs stored as vectors; and one edge
  // element's: the leaves read into lane 0, `ops` at it, its stores.
  void emit_vector_slot(const std::vector<const Op*>& ops, const std::string& indent);
  void emit_element_slot(const std::vector<const Op*>& ops, const std::string& indent);
  // The value a sum, mean, max or min starts from, in register type T.
  static std::string identity_of(const Op& r, const std::string& T);
  // Per-row ops whose inputs are all available now.
  void emit_ready_per_row_ops(const std::string& in);

  // ---- positions and gathers (indexing_loads.cpp) ----
  // The Params names of gather j's tensors: g<j> (its source) and g<j>p (its positions in the
  // index); of the gathers computed per row (`per_row`) or per element.
  std::vector<std::string> gather_tensor_names(bool per_row) const;
  // Position leaf k's element at offsets <offset_prefix>l<k> (+ `extra`, element e along the
  // vector axis where given), in its storage type: its first element's value plus the offset.
  std::string position_raw(int k, const std::string& offset_prefix, const std::string& extra = "") const;
  // `dst` (a vector of leaf k) filled with positions, element e along the vector axis.
  void emit_position_load(int k, const std::string& dst, const std::string& offset_prefix, const std::string& indent);
  // `ct vN = ...` for gather `op`: the index's value checked against the source's axis (an
  // out-of-range one sets p.err and loads nothing), the source's element loaded there, through
  // its chain.
  void emit_gather(const Op& op, const std::string& element, const std::string& indent);
  // Kernels with gathers: the device function that sets the error flag (after the Params).
  void emit_gather_fault_function();
  // " + e * p.<tensor>_stride[axis]": element e of a vector along the vector axis (the innermost;
  // pointwise and row kernels, the shapes positions and gathers run in); "" for vectors of one.
  std::string along_vector(const std::string& tensor) const;

  const KernelAnalysis& a_;
  const KernelVariant& v_;
  std::string name_;
  std::ostringstream os_;
  std::map<const Value*, int> leaf_index_, scalar_index_;
  std::set<const Value*> emitted_per_row_;
  std::set<int> cached_;   // leaves held in registers across passes
  // Row kernels: computed values held in registers, by the pass that computes them.
  std::map<const Value*, int> cache_pass_;
  int current_pass_ = 0;   // the stage being emitted; the stage count for the final pass
  const Value* online_exp_ = nullptr;  // online softmax's exp, held in registers and rescaled where read (or null)
  std::set<const Value*> used_in_kernel_;  // values some op of the kernel reads
  // Cat leaves' positions (l<k>_at) and the collapsed axis each counts along (-1: none, always 0).
  std::map<std::string, int> position_axis_;
  // The offsets of the element being computed (emit_offsets' prefix): "off_" in pointwise
  // kernels, "co_" in row kernels; values per row use "ro_". Gathers address their sources by it.
  std::string element_offsets_ = "off_";
};

}  // namespace alloy::cuda
