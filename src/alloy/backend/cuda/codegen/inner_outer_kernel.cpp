// The inner-outer kernel (KernelVariant::inner_outer, SchedulerKind::inner_outer): row reductions
// and outer reductions (over the rows) of the same values in one persistent kernel — the layer
// norm backward's dx (two row sums) beside dw and db (column sums), RMSNorm's dx beside dw.
//
// It is the row kernel (row_kernel.cpp) of a block per row over a persistent grid (min(rows,
// SMs * blocks an SM) blocks, row = blockIdx.x, + gridDim.x, ...), with the row held in registers:
// a thread owns the same columns in every row (its `items` vectors), so the final pass adds each
// outer reduction's input to the thread's f32 column partials, in row order. After its last row a
// block writes its partials to the workspace, and the partials are combined by a tree of
// last-block tickets (kernel_codegen.h's inner_outer_tree: groups of S consecutive blocks, then
// the groups, ...): the last child of each node to arrive sums its children's partials in order,
// and the root's computes each column's results (the outer reductions' values and the pointwise
// ops on them, dw's cast to bf16) and stores them; or (combine_levels 0, a cooperative launch)
// every block, past a barrier of the grid, combines a share of the columns (combine_over_the_grid). Deterministic: each partial's
// rows, the tree and its order are fixed by the block count, which the launch plan takes from the
// sizes, the SM count and the tuning only; which block arrives last changes nothing. The counters
// live in the stream's zeroed scratch and each combining block resets its own.
//
// Against two kernels (the row kernel for dx, a column kernel re-reading dy and x for dw and db):
// 3 tensor passes instead of 5, and one launch.
//
// With rows loaded ahead (KernelVariant::prefetch: R rows) each block loads the row R ahead of the
// one it reduces into another set of registers before that row's reductions (the rows between
// were loaded by the iterations before), and the leaves of the columns (the weight) once.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {
namespace {

std::string partial_name(const Op* r) { return "O" + std::to_string(r->outputs[0]->id); }
std::string partial_type(const Op* r) { return compute_type(r->outputs[0]->dtype()); }

std::string combine(const Op* r, const std::string& a, const std::string& b) {
  if (r->kind == OpKind::max) return "ax_max(" + a + ", " + b + ")";
  if (r->kind == OpKind::min) return "ax_min(" + a + ", " + b + ")";
  return a + " + " + b;
}

// The outer reductions in workspace order: f64 partials first, so every region starts aligned to
// its vectors (inner_outer_workspace_bytes).
std::vector<const Op*> workspace_order(const KernelAnalysis& a) {
  std::vector<const Op*> order;
  for (int wide = 1; wide >= 0; --wide)
    for (const Op* r : a.outer_reductions)
      if ((partial_type(r) == "double") == bool(wide)) order.push_back(r);
  return order;
}

}  // namespace

// The thread's column partials, O<id>[it][e]: registers, or (KernelVariant::shared_partials) a view
// of its words in the dynamic shared memory, the reductions' regions in workspace order.
void InnerOuterParts::declare_partials(const std::string& in) {
  e_.os_ << in << "__shared__ bool alloy_last;\n";
  const KernelVariant& v = e_.v_;
  if (v.shared_partials) {
    e_.os_ << in << "ALLOY_DYNAMIC_SHARED(alloy_partials);\n";
    long long at = 0;  // bytes
    for (const Op* r : workspace_order(e_.a_)) {
      std::string T = partial_type(r);
      e_.os_ << in << "const AlloySharedPartials<" << T << ", " << v.vector << "> " << partial_name(r) << "{reinterpret_cast<" << T
             << "*>(alloy_partials + " << at << ") + threadIdx.x, " << v.threads << "};\n";
      at += (long long)v.items * v.vector * v.threads * (T == "double" ? 8 : 4);
    }
  }
  for (const Op* r : e_.a_.outer_reductions) {
    std::string T = partial_type(r), O = partial_name(r);
    if (!v.shared_partials) e_.os_ << in << T << " " << O << "[" << e_.v_.items << "][" << e_.v_.vector << "];\n";
    e_.os_ << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << e_.v_.items << "; ++it)\n"
           << in << "  #pragma unroll\n" << in << "  for (int e = 0; e < " << e_.v_.vector << "; ++e) " << O << "[it][e] = "
           << KernelEmitter::identity_of(*r, T) << ";\n";
  }
}

// Rows loaded ahead: with nothing else in flight while a block reduces (barriers) and stores its
// row, the kernel is latency-bound; the next row's loads, issued before the row's reductions, are
// in flight through them.
std::set<int> InnerOuterParts::held_row_leaves() const {
  std::set<int> held;
  for (int k : e_.cached_)
    if (!along_columns_only(e_.a_, e_.a_.leaves[k])) held.insert(k);
  return held;
}

std::vector<int> InnerOuterParts::per_row_leaves() const {
  std::vector<int> leaves;
  for (size_t k = 0; k < e_.a_.leaves.size(); ++k)
    if (e_.a_.at(e_.a_.leaves[k]).per_row) leaves.push_back(int(k));
  return leaves;
}

std::vector<std::string> InnerOuterParts::tensors_of(const std::vector<int>& leaves) const {
  std::vector<std::string> tensors;
  for (int k : leaves) {
    std::vector<std::string> names = e_.leaf_tensor_names(k);
    tensors.insert(tensors.end(), names.begin(), names.end());
  }
  return tensors;
}

void InnerOuterParts::load_rows_ahead(const std::string& in) {
  std::ostringstream& os = e_.os_;
  const std::string held = "[" + std::to_string(e_.v_.items) + "]";
  std::set<int> columns;
  for (int k : e_.cached_)
    if (along_columns_only(e_.a_, e_.a_.leaves[k])) columns.insert(k);
  if (!columns.empty()) {
    os << in << "// the leaves that vary only along the columns, the same in every row: loaded once\n";
    e_.emit_leaf_arrays("L", held, in, columns);
    load_held_vectors(in, "", "L", columns);
  }
  const int ahead = e_.v_.prefetch;
  if (e_.v_.staged_rows) {
    declare_row_slots(in);
    os << in << "// the block's first row" << (ahead > 1 ? "s" : "") << " into the first slot" << (ahead > 1 ? "s" : "")
       << ", a copy group a row; each iteration then copies the one " << ahead << " row" << (ahead > 1 ? "s" : "") << " ahead\n";
    e_.emit_leaf_arrays("L", held, in, held_row_leaves());
    for (int j = 0; j < ahead; ++j) {
      for (int k : per_row_leaves()) os << in << compute_type(e_.a_.leaves[k]->dtype()) << " " << scalar_prefix(j) << k << ";\n";
      stage_row(first_row() + (j ? " + " + std::to_string(j) + "ll * " + row_stride() : std::string()), std::to_string(j), scalar_prefix(j), in);
    }
    os << in << "unsigned alloy_slot = 0;  // the current row's slot\n";
    return;
  }
  os << in << "// the block's first row" << (ahead > 1 ? "s" : "") << "; each iteration then loads the one " << ahead << " row"
     << (ahead > 1 ? "s" : "") << " ahead\n";
  for (int j = 0; j < ahead; ++j) {
    e_.emit_leaf_arrays(held_prefix(j), held, in, held_row_leaves());
    for (int k : per_row_leaves()) os << in << compute_type(e_.a_.leaves[k]->dtype()) << " " << scalar_prefix(j) << k << ";\n";
    load_row(first_row() + (j ? " + " + std::to_string(j) + "ll * " + row_stride() : std::string()), held_prefix(j), scalar_prefix(j), in);
  }
}

// The registers of the row j rows ahead of the one reduced (0: that one; prefetch: the one an
// iteration loads): L<k>[it], P<k>; A<j>_<k>[it], B<j>_<k>; N<k>[it], Q<k>.
std::string InnerOuterParts::held_prefix(int j) const {
  return j == 0 ? "L" : j == e_.v_.prefetch ? "N" : "A" + std::to_string(j) + "_";
}
std::string InnerOuterParts::scalar_prefix(int j) const {
  return j == 0 ? "P" : j == e_.v_.prefetch ? "Q" : "B" + std::to_string(j) + "_";
}

void InnerOuterParts::load_next_row(const std::string& in) {
  std::ostringstream& os = e_.os_;
  const int ahead = e_.v_.prefetch;
  if (e_.v_.staged_rows) {
    const std::set<int> held = held_row_leaves();
    os << in << "alloy_cp_wait<" << ahead - 1 << ">();  // this row's copies (all but the " << ahead - 1 << " latest groups) have landed\n";
    if (!held.empty()) {
      os << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << e_.v_.items << "; ++it) {";
      for (int k : held) os << " L" << k << "[it] = " << slot_element(k, "alloy_slot") << ";";
      os << " }\n";
    }
    os << in << "// the block's row " << ahead << " ahead into the slot the row before this one left, in flight while this one reduces\n";
    for (int k : per_row_leaves()) os << in << compute_type(e_.a_.leaves[k]->dtype()) << " Q" << k << ";\n";
    stage_row("row + " + (ahead > 1 ? std::to_string(ahead) + "ll * " : std::string()) + row_stride(),
              "(alloy_slot == 0 ? " + std::to_string(ahead) + "u : alloy_slot - 1)", "Q", in);
    return;
  }
  os << in << "// the block's row " << ahead << " ahead, in flight while this one reduces and stores\n";
  e_.emit_leaf_arrays("N", "[" + std::to_string(e_.v_.items) + "]", in, held_row_leaves());
  for (int k : per_row_leaves()) os << in << compute_type(e_.a_.leaves[k]->dtype()) << " Q" << k << ";\n";
  load_row("row + " + (ahead > 1 ? std::to_string(ahead) + "ll * " : std::string()) + row_stride(), "N", "Q", in);
}

void InnerOuterParts::next_row_becomes_current(const std::string& in) {
  std::ostringstream& os = e_.os_;
  std::set<int> held = e_.v_.staged_rows ? std::set<int>{} : held_row_leaves();  // (staged: read from their slots)
  std::vector<int> scalars = per_row_leaves();
  if (e_.v_.staged_rows) os << in << "alloy_slot = alloy_slot == " << e_.v_.prefetch << "u ? 0u : alloy_slot + 1;\n";
  if (held.empty() && scalars.empty()) return;
  // each row's registers move one place nearer (where the loop goes on)
  os << in << "if (row + " << row_stride() << " < p.rows) {\n";
  for (int j = 0; j < e_.v_.prefetch; ++j) {
    if (!held.empty()) {
      os << in << "  #pragma unroll\n" << in << "  for (int it = 0; it < " << e_.v_.items << "; ++it) {";
      for (int k : held) os << " " << held_prefix(j) << k << "[it] = " << held_prefix(j + 1) << k << "[it];";
      os << " }\n";
    }
    for (int k : scalars) os << in << "  " << scalar_prefix(j) << k << " = " << scalar_prefix(j + 1) << k << ";\n";
  }
  os << in << "}\n";
}

// Row `row` (an expression; nothing where it is not below p.rows): its held leaves into
// <held>k[it], its per-row leaves into <scalar>k, at row offsets lo_.
void InnerOuterParts::load_row(const std::string& row, const std::string& held, const std::string& scalar, const std::string& in) {
  std::ostringstream& os = e_.os_;
  std::set<int> vectors = held_row_leaves();
  std::vector<int> scalars = per_row_leaves();
  if (vectors.empty() && scalars.empty()) return;
  std::vector<int> leaves(vectors.begin(), vectors.end());
  leaves.insert(leaves.end(), scalars.begin(), scalars.end());
  os << in << "if (" << row << " < p.rows) {\n";
  e_.emit_offsets(row, 0, e_.v_.outer_rank, "lo_", tensors_of(leaves), in + "  ");
  for (int k : scalars) os << in << "  " << scalar << k << " = " << load_convert(e_.a_.leaves[k]->dtype(), e_.leaf_raw(k, "lo_")) << ";\n";
  load_held_vectors(in + "  ", "lo_", held, vectors);
  os << in << "}\n";
}

// Staged rows ahead (KernelVariant::staged_rows): each held leaf's ring of prefetch + 1 row slots,
// [slot][it][thread of the block] (consecutive threads, consecutive vectors: no bank conflicts).
void InnerOuterParts::declare_row_slots(const std::string& in) {
  const KernelVariant& v = e_.v_;
  for (int k : held_row_leaves())
    e_.os_ << in << "__shared__ AlloyVec<" << storage_type(e_.a_.leaves[k]->dtype()) << ", " << v.vector << "> alloy_slots" << k << "["
           << (v.prefetch + 1) * v.items * v.threads * v.row_groups << "];\n";
}

std::string InnerOuterParts::slot_element(int k, const std::string& slot) const {
  const KernelVariant& v = e_.v_;
  return "alloy_slots" + std::to_string(k) + "[((" + slot + ") * " + std::to_string(v.items) + " + it) * " +
         std::to_string(v.threads * v.row_groups) + " + threadIdx.x]";
}

// Row `row` (an expression; nothing where it is not below p.rows, but the group is committed all
// the same): its per-row leaves into <scalar>k, and the thread's vectors of its held leaves copied
// into slot `slot` (an expression), one copy group.
void InnerOuterParts::stage_row(const std::string& row, const std::string& slot, const std::string& scalar, const std::string& in) {
  std::ostringstream& os = e_.os_;
  const KernelVariant& v = e_.v_;
  std::set<int> vectors = held_row_leaves();
  std::vector<int> scalars = per_row_leaves();
  std::vector<int> leaves(vectors.begin(), vectors.end());
  leaves.insert(leaves.end(), scalars.begin(), scalars.end());
  if (!leaves.empty()) {
    os << in << "if (" << row << " < p.rows) {\n";
    e_.emit_offsets(row, 0, v.outer_rank, "lo_", tensors_of(leaves), in + "  ");
    for (int k : scalars) os << in << "  " << scalar << k << " = " << load_convert(e_.a_.leaves[k]->dtype(), e_.leaf_raw(k, "lo_")) << ";\n";
    if (!vectors.empty()) os << in << "  const unsigned alloy_to = " << slot << ";\n";
    each_held_vector(in + "  ", "lo_", vectors, [&](const std::string& ind) {
      for (int k : vectors)
        os << ind << "alloy_cp_async<" << v.vector * int(dtype_size(e_.a_.leaves[k]->dtype())) << ">(&" << slot_element(k, "alloy_to") << ", "
           << e_.leaf_pointer(k, "co_") << ");\n";
    });
    os << in << "}\n";
  }
  os << in << "alloy_cp_commit();\n";
}

// Leaves `which` of the thread's vectors into <held>k[it], as the row kernel loads its held row
// (no bounds check where every vector is inside the row: KernelVariant::full_rows), at row offsets
// <row_offsets> ("": none, for the leaves that vary only along the columns).
void InnerOuterParts::load_held_vectors(const std::string& in, const std::string& row_offsets, const std::string& held, const std::set<int>& which) {
  each_held_vector(in, row_offsets, which, [&](const std::string& ind) { e_.emit_leaf_loads(held, "[it]", "co_", ind, which); });
}

// The loop over the thread's vectors (`it`, at col0, inside the row where not full_rows) with the
// offsets co_<tensor> of leaves `which` (plus <row_offsets><tensor> where given), `body` in it.
void InnerOuterParts::each_held_vector(const std::string& in, const std::string& row_offsets, const std::set<int>& which,
                                       const std::function<void(const std::string&)>& body) {
  std::ostringstream& os = e_.os_;
  const KernelVariant& v = e_.v_;
  if (which.empty()) return;
  std::vector<std::string> tensors = tensors_of(std::vector<int>(which.begin(), which.end()));
  os << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << v.items << "; ++it) {\n";
  os << in << "  [[maybe_unused]] const long long slot = (long long)it * " << v.threads << " + tid, col0 = slot * " << v.vector << ";\n";
  os << in << "  " << (v.full_rows ? "{" : "if (col0 < p.cols) {") << "\n";
  e_.emit_offsets("col0", v.outer_rank, v.inner_rank, "co_", tensors, in + "    ");
  if (!row_offsets.empty())
    for (auto& t : tensors) os << in << "    co_" << t << " += " << row_offsets << t << ";\n";
  body(in + "    ");
  os << in << "  }\n" << in << "}\n";
}

void InnerOuterParts::accumulate(const std::string& in, const std::string& element) {
  for (const Op* r : e_.a_.outer_reductions) {
    std::string x = "((" + partial_type(r) + ")" + e_.ref(r->inputs[0], element) + ")", slot = partial_name(r) + element + "[e]";
    e_.os_ << in << slot << " = " << combine(r, slot, x) << ";\n";
  }
}

std::string InnerOuterParts::first_row() const { return e_.v_.row_groups > 1 ? "alloy_row_first" : "(long long)blockIdx.x"; }
std::string InnerOuterParts::row_stride() const { return e_.v_.row_groups > 1 ? "alloy_row_stride" : "gridDim.x"; }
std::string InnerOuterParts::block_thread() const { return e_.v_.row_groups > 1 ? "threadIdx.x" : "tid"; }

void InnerOuterParts::in_group_zero(const std::string& in, const std::function<void(const std::string&)>& body) {
  if (e_.v_.row_groups == 1) return body(in);
  e_.os_ << in << "if (alloy_group == 0) {\n";
  body(in + "  ");
  e_.os_ << in << "}\n";
}

// Group g > 0 stores its partials in its part of a shared array a reduction ([g - 1][it][e][tid]:
// consecutive threads, consecutive words), and after a barrier of the block group 0 adds groups
// 1, 2, ... to its own in that order (so the bits depend on the groups and the grid alone).
void InnerOuterParts::combine_groups() {
  std::ostringstream& os = e_.os_;
  const KernelVariant& v = e_.v_;
  const int G = v.row_groups, T = v.threads, I = v.items, V = v.vector;
  os << "  // the row groups' column partials into group 0's, in group order\n";
  for (const Op* r : e_.a_.outer_reductions)
    os << "  __shared__ " << partial_type(r) << " alloy_groups_" << partial_name(r) << "[" << (G - 1) * I * V * T << "];\n";
  const std::string at = "(((long long)(g - 1) * " + std::to_string(I) + " + it) * " + std::to_string(V) + " + e) * " + std::to_string(T) + " + tid";
  auto each_element = [&](const std::string& in, const std::function<void(const std::string&)>& body) {
    os << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << I << "; ++it)\n" << in << "  #pragma unroll\n" << in
       << "  for (int e = 0; e < " << V << "; ++e) {\n";
    body(in + "    ");
    os << in << "  }\n";
  };
  os << "  if (alloy_group > 0) {\n    const int g = alloy_group;\n";
  each_element("    ", [&](const std::string& in) {
    for (const Op* r : e_.a_.outer_reductions) os << in << "alloy_groups_" << partial_name(r) << "[" << at << "] = " << partial_name(r) << "[it][e];\n";
  });
  os << "  }\n  __syncthreads();\n";
  os << "  if (alloy_group == 0)\n    for (int g = 1; g < " << G << "; ++g) {\n";
  each_element("      ", [&](const std::string& in) {
    for (const Op* r : e_.a_.outer_reductions) {
      std::string O = partial_name(r) + "[it][e]";
      os << in << O << " = " << combine(r, O, "alloy_groups_" + partial_name(r) + "[" + at + "]") << ";\n";
    }
  });
  os << "    }\n";
}

void InnerOuterParts::combine_and_store() {
  e_.os_ << "  if (gridDim.x > 1) {\n";
  if (e_.v_.combine_levels == 0) combine_over_the_grid();
  else combine_partials();
  e_.os_ << "  }\n";
  store_columns();
}

// Each outer reduction's region of the workspace: W<id>, `rows` (an expression) rows of every
// column's partials, the regions in workspace_order.
void InnerOuterParts::declare_workspace(const std::string& in, const std::string& rows) {
  std::string before = "0";
  for (const Op* r : workspace_order(e_.a_)) {
    std::string T = partial_type(r);
    e_.os_ << in << T << "* W" << r->outputs[0]->id << " = reinterpret_cast<" << T << "*>(reinterpret_cast<char*>(p.ws) + (long long)("
           << rows << ") * p.cols * (" << before << "));\n";
    before += T == "double" ? " + 8" : " + 4";
  }
}

// Opens, at `in`, the loop over the thread's vectors of columns (`col0`, its first column, inside
// the row) that `body` fills; closes it.
namespace {
void each_vector(std::ostringstream& os, const KernelVariant& v, const std::string& in, const std::function<void(const std::string&)>& body) {
  os << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << v.items << "; ++it) {\n";
  os << in << "  const long long col0 = ((long long)it * " << v.threads << " + tid) * " << v.vector << ";\n";
  os << in << "  if (col0 < p.cols) {\n";
  body(in + "    ");
  os << in << "  }\n" << in << "}\n";
}
}  // namespace

void InnerOuterParts::combine_partials() {
  std::ostringstream& os = e_.os_;
  const KernelVariant& v = e_.v_;
  const std::string in = "    ";
  // the tree (inner_outer_tree): nodes of S children, S the least with S^L >= gridDim.x; its rows
  // of partials, each block's then each level's nodes' below the root
  os << in << "unsigned S = 1;\n";
  os << in << "for (;; ++S) { unsigned long long reach = 1; for (int l = 0; l < " << v.combine_levels
     << " && reach < gridDim.x; ++l) reach *= S; if (reach >= gridDim.x) break; }\n";
  os << in << "unsigned long long tree_rows = 0;\n";
  os << in << "for (unsigned n = gridDim.x; n > 1; n = (n + S - 1) / S) tree_rows += n;\n";
  declare_workspace(in, "tree_rows");
  os << in << "// this block's partial; then, level by level, the last child of a node to arrive sums its\n";
  os << in << "// children's partials in order into the node's (stored for the level above, but the root's)\n";
  in_group_zero(in, [&](const std::string& i1) { each_vector(os, v, i1, [&](const std::string& ind) { store_partials(ind, "blockIdx.x"); }); });
  os << in << "unsigned n = gridDim.x, node = blockIdx.x, rows_below = 0, counters_below = 0;\n";
  os << in << "while (n > 1) {\n";
  const std::string in2 = in + "  ";
  os << in2 << "const unsigned parent = node / S, first = parent * S, members = n - first < S ? n - first : S, parents = (n + S - 1) / S;\n";
  os << in2 << "__syncthreads();\n";  // the block's stores before one thread's fence (alloy_grid_barrier's pattern)
  os << in2 << "if (" << block_thread() << " == 0) {\n" << in2 << "  __threadfence();\n"
     << in2 << "  alloy_last = atomicAdd(p.counters + counters_below + parent, 1u) == members - 1;\n"
     << in2 << "  if (alloy_last) __threadfence();  // the children's partials acquired, for every thread past the barrier\n" << in2 << "}\n";
  os << in2 << "__syncthreads();\n" << in2 << "if (!alloy_last) return;\n";
  in_group_zero(in2, [&](const std::string& i1) {
    each_vector(os, v, i1, [&](const std::string& ind) {
      reset_partials(ind);
      os << ind << "#pragma unroll 4\n" << ind << "for (unsigned b = first; b < first + members; ++b) {\n";
      add_partials(ind + "  ", "rows_below + b");
      os << ind << "}\n";
    });
  });
  os << in2 << "if (" << block_thread() << " == 0) p.counters[counters_below + parent] = 0;  // for the next launch on this stream\n";
  os << in2 << "rows_below += n;\n" << in2 << "counters_below += parents;\n" << in2 << "n = parents;\n" << in2 << "node = parent;\n";
  os << in2 << "if (n > 1) {\n";
  in_group_zero(in2 + "  ", [&](const std::string& i1) { each_vector(os, v, i1, [&](const std::string& ind) { store_partials(ind, "rows_below + node"); }); });
  os << in2 << "}\n";
  os << in << "}\n";
}

// The thread's partials of its vector `it` at col0 (O<id>[it]): set to the reductions' identities;
// row `at` (an expression) of the workspace's added to them; stored in row `at`.
void InnerOuterParts::reset_partials(const std::string& ind) {
  for (const Op* r : workspace_order(e_.a_))
    e_.os_ << ind << "#pragma unroll\n" << ind << "for (int e = 0; e < " << e_.v_.vector << "; ++e) " << partial_name(r) << "[it][e] = "
           << KernelEmitter::identity_of(*r, partial_type(r)) << ";\n";
}

void InnerOuterParts::add_partials(const std::string& ind, const std::string& at) {
  const int V = e_.v_.vector;
  for (const Op* r : workspace_order(e_.a_)) {
    std::string T = partial_type(r), O = partial_name(r);
    e_.os_ << ind << "{ " << T << " q[" << V << "];\n" << ind << "  alloy_load_partials<" << T << ", " << V << ">(q, W" << r->outputs[0]->id
           << " + (long long)(" << at << ") * p.cols + col0);\n"
           << ind << "  #pragma unroll\n" << ind << "  for (int e = 0; e < " << V << "; ++e) " << O << "[it][e] = " << combine(r, O + "[it][e]", "q[e]")
           << "; }\n";
  }
}

void InnerOuterParts::store_partials(const std::string& ind, const std::string& at) {
  const int V = e_.v_.vector;
  for (const Op* r : workspace_order(e_.a_)) {
    std::string T = partial_type(r), O = partial_name(r);
    e_.os_ << ind << "{ AlloyVec<" << T << ", " << V << "> w;\n" << ind << "  #pragma unroll\n" << ind << "  for (int e = 0; e < " << V
           << "; ++e) w.v[e] = " << O << "[it][e];\n"
           << ind << "  *reinterpret_cast<AlloyVec<" << T << ", " << V << ">*>(W" << r->outputs[0]->id << " + (long long)(" << at
           << ") * p.cols + col0) = w; }\n";
  }
}

// Each column's results: the outer reductions' values (rounded to their dtypes), the pointwise
// ops on them, and the stores of the values returned per column.
void InnerOuterParts::store_columns() {
  in_group_zero("  ", [&](const std::string& i1) { each_vector(e_.os_, e_.v_, i1, [&](const std::string& ind) { store_column_vector(ind); }); });
}

// The columns of the vector at col0 from the combined partials O<id>[it]: their results and stores.
void InnerOuterParts::store_column_vector(const std::string& ind) {
  std::ostringstream& os = e_.os_;
  const KernelAnalysis& a = e_.a_;
  const KernelVariant& v = e_.v_;
  std::vector<std::string> stored;
  for (size_t k = 0; k < a.outputs.size(); ++k)
    if (a.at(a.outputs[k]).per_column) stored.push_back("o" + std::to_string(k));
  {
    os << ind << "#pragma unroll\n" << ind << "for (int e = 0; e < " << v.vector << "; ++e) {\n";
    const std::string body = ind + "  ";
    for (const Op* r : a.outer_reductions) {
      std::string T = partial_type(r), value = "(" + T + ")" + partial_name(r) + "[it][e]";
      if (r->kind == OpKind::mean) value = "(" + value + " / (" + T + ")p.rows)";
      os << body << T << " v" << r->outputs[0]->id << " = " << round_to_dtype(r->outputs[0]->dtype(), value) << ";\n";
    }
    for (const Op* op : a.compute_ops)
      if (op_row(op->kind).op_class != OpClass::reduction && a.at(op->outputs[0]).per_column) e_.emit_op(*op, "", body);
    e_.emit_offsets("col0 + e", v.outer_rank, v.inner_rank, "cc_", stored, body);
    for (size_t k = 0; k < a.outputs.size(); ++k)
      if (a.at(a.outputs[k]).per_column)
        os << body << "p.o" << k << "[cc_o" << k << "] = " << store_convert(a.outputs[k]->dtype(), e_.ref(a.outputs[k], "")) << ";\n";
    os << ind << "}\n";
  }
}

// The combine over the whole grid (KernelVariant::combine_levels 0; a cooperative launch): every
// block stores its partials in its row of the workspace and waits at a barrier of the grid; then
// warp w of block b takes the vectors of columns w * gridDim.x + b, + gridDim.x * warps, ... (the
// first warps of every block, where the vectors are fewer than the grid's warps): its lane
// l sums the partials of blocks l, l + 32, ... in order, the lanes are summed in a fixed butterfly,
// and lane 0 computes and stores the columns. No block waits for one chain of others' combines
// (a tree's last block reads levels * S partials one after another); the order of every sum is
// fixed by the grid alone. The row loop and the partials' stores run where ALLOY_GRID_FIRST_PHASE
// holds (always on the GPU; the CPU emulation runs the blocks twice, the barrier ending the first
// run, and skips them in the second).
void InnerOuterParts::combine_over_the_grid() {
  std::ostringstream& os = e_.os_;
  const KernelVariant& v = e_.v_;
  const std::vector<const Op*> order = workspace_order(e_.a_);
  const std::string in = "    ";
  const int V = v.vector;
  declare_workspace(in, "gridDim.x");
  os << in << "if (ALLOY_GRID_FIRST_PHASE) {\n";
  in_group_zero(in + "  ", [&](const std::string& i1) { each_vector(os, v, i1, [&](const std::string& ind) { store_partials(ind, "blockIdx.x"); }); });
  os << in << "}\n";
  os << in << "ALLOY_GRID_BARRIER(p.counters);\n";
  os << in << "const unsigned lane = " << block_thread() << " & 31u, warps = blockDim.x >> 5;\n";
  os << in << "for (long long slot = (long long)(" << block_thread() << " >> 5) * gridDim.x + blockIdx.x; slot * " << V << " < p.cols; slot += (long long)gridDim.x * warps) {\n";
  const std::string in2 = in + "  ";
  os << in2 << "const int it = 0;\n" << in2 << "const long long col0 = slot * " << V << ";\n";
  reset_partials(in2);
  // (eight rows' loads in flight a lane: a grid of a thousand blocks gives a lane 33 rows)
  os << in2 << "#pragma unroll 8\n" << in2 << "for (unsigned b = lane; b < gridDim.x; b += 32) {\n";
  add_partials(in2 + "  ", "b");
  os << in2 << "}\n";
  for (const Op* r : order) {
    std::string O = partial_name(r);
    os << in2 << "#pragma unroll\n" << in2 << "for (int e = 0; e < " << V << "; ++e)\n" << in2 << "  #pragma unroll\n" << in2
       << "  for (int o = 16; o > 0; o >>= 1) " << O << "[it][e] = " << combine(r, O + "[it][e]", "__shfl_xor_sync(0xffffffffu, " + O + "[it][e], o)")
       << ";\n";
  }
  os << in2 << "if (lane == 0) {\n";
  store_column_vector(in2 + "  ");
  os << in2 << "}\n";
  os << in << "}\n" << in << "return;\n";
}

}  // namespace alloy::cuda
