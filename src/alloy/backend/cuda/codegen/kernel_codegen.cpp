#include "alloy/backend/cuda/codegen/kernel_codegen.h"

#include <algorithm>
#include <string>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"

namespace alloy::cuda {

namespace {
// "_c3.-1": the collapsed axis of each cat leaf (nothing for kernels without one)
std::string cat_key(const std::vector<int>& cat_axes) {
  std::string key = cat_axes.empty() ? "" : "_c";
  for (size_t j = 0; j < cat_axes.size(); ++j) {
    if (j) key += ".";
    key += std::to_string(cat_axes[j]);
  }
  return key;
}
}  // namespace

std::string KernelVariant::key() const {
  // every field that changes the generated source, in a fixed order; one at its default adds nothing
  std::string key = "r" + std::to_string(outer_rank) + "." + std::to_string(inner_rank);
  key += "_v" + std::to_string(vector);
  key += "_t" + std::to_string(threads);
  key += "_i" + std::to_string(items);
  if (rows_per_block) key += "_w" + std::to_string(rows_per_block);
  if (min_blocks) key += "_b" + std::to_string(min_blocks);
  if (tile_x) {
    key += "_x" + std::to_string(tile_x);
    if (ty_fast) key += "y";
  }
  if (grid) key += "_g";
  if (inner_outer) key += "_io";
  if (prefetch) {
    key += "_pf";
    if (prefetch > 1) key += std::to_string(prefetch);
  }
  if (combine_levels != 2) key += "_l" + std::to_string(combine_levels);
  if (row_groups > 1) key += "_rg" + std::to_string(row_groups);
  if (staged_rows) key += "_sr";
  if (shared_partials) key += "_sp";
  if (shared_row) key += "_sh";
  if (welford_steps > 1) key += "_ws" + std::to_string(welford_steps);
  if (loads_ahead) key += "_la";
  if (step_bytes != 64) key += "_sb" + std::to_string(step_bytes);
  if (index32) key += "_32";
  if (recompute) key += "_rc";
  if (early_loads) key += "_el";
  if (full_rows) key += "_f";
  if (edge_elements) key += "_e";
  if (streaming_online) key += "_so";
  key += "_";
  key += leaf_modes;
  key += cat_key(cat_axes);
  if (transpose_axis >= 0) {
    key += "_t" + std::to_string(transpose_axis);
    key += staged;
  }
  return key;
}

std::string generate_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  if (analysis.is_reduction() && variant.inner_outer && !analysis.has_outer_reductions())
    internal_error("an inner-outer variant of a kernel without outer reductions");
  if (variant.row_groups > 1 && (!variant.inner_outer || variant.threads % 32 != 0 || variant.row_groups > 15))
    internal_error("row groups (", variant.key(), ") outside an inner-outer kernel of whole warps, or more than 15");
  if (variant.loads_ahead && (!variant.grid || variant.welford_steps > 1))
    internal_error("a variant loading its steps ahead (", variant.key(), ") that is not a grid reduction of single steps");
  if (variant.shared_partials && (!variant.inner_outer || variant.row_groups > 1))
    internal_error("partials in shared memory (", variant.key(), ") outside an inner-outer kernel of one row group");
  if (variant.staged_rows && variant.prefetch == 0)
    internal_error("a variant staging its rows ahead (", variant.key(), ") that loads none ahead");
  if (variant.prefetch && !variant.inner_outer)
    internal_error("a variant loading rows ahead (", variant.key(), ") that is not an inner-outer kernel");
  if (analysis.is_reduction() && variant.grid) return emit_grid_reduction_kernel(analysis, variant, name);
  if (analysis.is_reduction() && variant.tile_x > 0) return emit_column_kernel(analysis, variant, name);
  if (analysis.is_reduction()) return emit_row_kernel(analysis, variant, name);
  if (variant.transpose_axis >= 0) return emit_transpose_kernel(analysis, variant, name);
  return emit_pointwise_kernel(analysis, variant, name);
}

int param_words(const KernelAnalysis& a, const KernelVariant& v) {
  int dims = std::max(1, v.outer_rank + v.inner_rank);
  int header = a.is_reduction() ? (v.tile_x > 0 || v.grid || v.inner_outer ? 5 : 3) : 1;
  int tensors = int(a.outputs.size()), ends = 0;
  for (const Value* leaf : a.leaves) {
    const CatLeaf* cat = a.cat_leaf(leaf);
    tensors += cat ? int(cat->sources.size()) : 1;
    ends += cat ? int(cat->sources.size()) - 1 : 0;
  }
  // each gather: its source and its positions, then the source's step and size along the axis;
  // and one error flag for them all
  int gathers = int(a.gathers.size()) * (2 * (1 + dims) + 2) + (a.gathers.empty() ? 0 : 1);
  return header + dims + tensors * (1 + dims) + ends + gathers + int(a.scalar_inputs.size());
}

namespace {
int register_bytes(const std::string& ct) { return ct == "float" ? 4 : 8; }
}  // namespace

int column_shared_bytes(const KernelAnalysis& a, const KernelVariant& v) {
  if (v.tile_x <= 0 || v.threads / v.tile_x <= 1 || a.stages.empty()) return 0;
  int bytes = 0;
  for (const Op* r : a.stages[0]) {
    std::string T = compute_type(r->outputs[0]->dtype());
    if (T == "bool") T = "alloy_i64";
    bytes += (r->kind == OpKind::var_mean ? 3 : 1) * register_bytes(T) * v.threads * v.vector;
  }
  return bytes;
}

int column_workspace_words(const KernelAnalysis& a) {
  int words = 0;
  if (!a.stages.empty())
    for (const Op* r : a.stages[0]) words += r->kind == OpKind::var_mean ? 3 : 1;
  return words;
}

InnerOuterTree inner_outer_tree(int64_t blocks, int levels) {
  InnerOuterTree t;
  if (blocks <= 1) return t;
  if (levels == 0) {  // the combine over the grid: a row a block, an arrival and a departure counter
    t.fanout = blocks;
    t.rows = blocks;
    t.counters = 2;
    return t;
  }
  auto reach = [&](int64_t s) {  // s^levels, saturated at blocks
    int64_t r = 1;
    for (int l = 0; l < levels && r < blocks; ++l) r *= s;
    return r;
  };
  while (reach(t.fanout) < blocks) ++t.fanout;
  for (int64_t n = blocks; n > 1; n = (n + t.fanout - 1) / t.fanout) {
    t.rows += n;
    t.counters += (n + t.fanout - 1) / t.fanout;
  }
  return t;
}

namespace {
size_t partial_bytes_per_column(const KernelAnalysis& a) {
  size_t bytes = 0;
  for (const Op* r : a.outer_reductions) bytes += std::string(compute_type(r->outputs[0]->dtype())) == "double" ? 8 : 4;
  return bytes;
}
}  // namespace

size_t inner_outer_shared_partial_bytes(const KernelAnalysis& a, const KernelVariant& v) {
  return v.shared_partials ? size_t(v.items) * size_t(v.vector) * size_t(v.threads) * partial_bytes_per_column(a) : 0;
}

size_t inner_outer_workspace_bytes(const KernelAnalysis& a, int64_t blocks, int64_t cols, int levels) {
  return size_t(inner_outer_tree(blocks, levels).rows) * size_t(cols) * partial_bytes_per_column(a);
}

bool along_columns_only(const KernelAnalysis& a, const Value* leaf) {
  const ValueLayout& l = a.at(leaf);
  if (l.per_row) return false;
  for (int axis : l.axis_map)
    if (axis >= 0 && std::find(a.reduced_axes.begin(), a.reduced_axes.end(), axis) == a.reduced_axes.end()) return false;
  return true;
}

int transpose_shared_bytes(const KernelAnalysis& a, const KernelVariant& v) {
  int bytes = 0;
  for (size_t k = 0; k < a.leaves.size() && k < v.staged.size(); ++k)
    if (v.staged[k] == 't') bytes += kTransposeTile * kTransposeTile * dtype_size(a.leaves[k]->dtype());
  return bytes;
}

}  // namespace alloy::cuda
