#include "alloy/backend/cuda/launch_plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "alloy/backend/cpu/reference_indexing.h"
#include "alloy/backend/cpu/views.h"
#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/launch_inner_outer.h"
#include "alloy/backend/cuda/launch_vectors.h"
#include "alloy/common/settings.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {
namespace {

// Drops size-1 axes and merges neighbours that every tensor walks contiguously.
std::vector<Axis> collapse(std::vector<Axis> axes) {
  std::vector<Axis> out;
  for (Axis& a : axes) {
    if (a.size == 1) continue;
    if (!out.empty() && a.cat_axis < 0 && out.back().cat_axis < 0) {
      Axis& prev = out.back();
      bool mergeable = true;
      for (size_t t = 0; t < a.strides.size(); ++t)
        if (prev.strides[t] != a.strides[t] * a.size) mergeable = false;
      if (mergeable) {
        prev.size *= a.size;
        prev.strides = a.strides;
        continue;
      }
    }
    out.push_back(a);
  }
  return out;
}

std::vector<Slot> launch_slots(const KernelAnalysis& a) {
  std::vector<Slot> slots;
  for (size_t k = 0; k < a.leaves.size(); ++k) {
    const CatLeaf* cat = a.cat_leaf(a.leaves[k]);
    Slot::Kind kind = a.is_position(a.leaves[k]) ? Slot::Kind::position : Slot::Kind::leaf;
    for (size_t r = 0; r < (cat ? cat->sources.size() : 1); ++r) slots.push_back({a.leaves[k], int(k), kind});
  }
  for (size_t j = 0; j < a.gathers.size(); ++j) {
    const Value* out = a.gathers[j].op->outputs[0];
    slots.push_back({out, -1, Slot::Kind::gather_source, int(j)});
    slots.push_back({out, -1, Slot::Kind::gather_positions, int(j)});
  }
  for (const Value* out : a.outputs) slots.push_back({out, -1, Slot::Kind::output});
  return slots;
}

std::vector<CatSources> cat_sources(const KernelAnalysis& a, const std::vector<Slot>& slots, const std::vector<const Tensor*>& tensors) {
  std::vector<CatSources> cats;
  for (size_t t = 0; t < slots.size(); ++t) {
    const Slot& s = slots[t];
    const CatLeaf* cat = s.leaf >= 0 ? a.cat_leaf(s.laid_out_as) : nullptr;
    if (!cat) continue;
    if (t == 0 || slots[t - 1].leaf != s.leaf) cats.push_back({a.cat_domain_axis(s.laid_out_as), {}, {}, {}});
    CatSources& c = cats.back();
    int64_t start = c.starts.empty() ? 0 : c.starts.back() + tensors[c.slots.back()]->size(cat->axis);
    if (!c.starts.empty()) c.ends.push_back(start);
    c.slots.push_back(int(t));
    c.starts.push_back(start);
  }
  return cats;
}

// The address each launch tensor is passed at: a cat source's moved back by its start along the
// cat's axis, so that every source of the leaf is addressed with the leaf's own position (only
// positions inside a source are ever read from it).
std::vector<uintptr_t> launch_addresses(const KernelAnalysis& a, const std::vector<Slot>& slots, const std::vector<const Tensor*>& tensors,
                                        const std::vector<CatSources>& cats) {
  std::vector<uintptr_t> addresses;
  for (size_t t = 0; t < tensors.size(); ++t)  // a position tensor passes its first element's value
    addresses.push_back(slots[t].is_position() ? uintptr_t(tensors[t]->offset()) : reinterpret_cast<uintptr_t>(tensors[t]->data()));
  for (const CatSources& c : cats) {
    if (c.domain_axis < 0) continue;
    for (size_t r = 0; r < c.slots.size(); ++r) {
      int t = c.slots[r];
      int64_t stride = domain_stride(a, slots[t], *tensors[t], c.domain_axis);
      addresses[t] -= uintptr_t(c.starts[r] * stride * int64_t(dtype_size(tensors[t]->dtype())));
    }
  }
  return addresses;
}


// Every output is a value per row (a reduction whose row-shaped values are not stored).
bool only_row_outputs(const KernelAnalysis& a) {
  for (const Value* out : a.outputs)
    if (!a.at(out).per_row) return false;
  return true;
}

// The first tensor of the first leaf read per element (-1: none): it decides the memory order.
int main_slot(const KernelAnalysis& a, const std::vector<Slot>& slots) {
  for (size_t t = 0; t < slots.size(); ++t)
    if (slots[t].kind == Slot::Kind::leaf && !a.at(slots[t].laid_out_as).per_row) return int(t);
  return -1;
}

// Column kernels hold vector x (one a sum, max or min; three a var_mean) accumulators a thread:
// at most 8, and vectors of at most 4 (H100, bf16: a var_mean's column statistics of [4096, 8192]
// at 8 elements a vector took 186 registers and 128 us for the permuted layer norm, at 2 62
// registers and 119 us, and 112 us once the column pass issued 16 loads ahead at that width; a
// column sum 43.9 us at 8, 42.1 at 4).
int column_max_vector(const KernelAnalysis& a) {
  int words = std::max(1, column_workspace_words(a)), vector = 4;
  while (vector > 1 && vector * words > 8) vector /= 2;
  return vector;
}

// A single-pass reduction runs as a column kernel when its kept axes are the contiguous ones
// (a row kernel would read strided), or when a few long rows would leave most SMs idle.
bool use_column_kernel(const KernelAnalysis& a, const std::vector<Slot>& slots, const std::vector<Axis>& outer,
                       const std::vector<Axis>& inner, int64_t rows, int64_t cols, const LaunchTarget& target) {
  // positions and gathers are emitted for the element layouts of pointwise and row kernels
  if (!a.single_pass || !target.column_kernels || a.has_indexing()) return false;
  if (inner.empty() || cols <= 1) return false;
  int main = main_slot(a, slots);
  if (main < 0) return false;
  int64_t kept_stride = outer.empty() ? 0 : std::llabs(outer.back().strides[main]);
  int64_t reduced_stride = std::llabs(inner.back().strides[main]);
  if (!outer.empty() && kept_stride != 0 && kept_stride < reduced_stride) return true;
  return rows < target.sm_count && cols >= 8192;
}

// The blocks of grid_threads an SM holds: the tuning's grid_blocks_per_sm, within 2048 threads.
int grid_blocks_per_sm(const KernelTuning& t) { return std::min(t.grid_blocks_per_sm, std::max(1, 2048 / t.grid_threads)); }

// Grid reductions (KernelVariant::grid): a single-pass reduction that stores only values per row,
// whose first leaf read per element walks the innermost reduced axis contiguously, and whose rows
// are too few and too long for a block (or a warp) each. Each row is split over
//   splits = min(SMs * grid_blocks_per_sm / rows, vectors of a row / (grid_threads * grid_min_vectors))
// blocks (one full wave over every row, each thread loading at least grid_min_vectors vectors),
// taken where that is at least 2. The split depends on the sizes, the SM count and the tuning
// table only, never on timing, so one device gives the same bits on every run.
// grid_blocks_per_sm 0 turns grid reductions off (few long rows run as column kernels, as before).
// Returns the split (0: not a grid reduction).
int64_t grid_splits(const KernelAnalysis& a, const std::vector<Slot>& slots, const std::vector<Axis>& inner, int64_t rows, int64_t cols,
                    int vector, const LaunchTarget& target) {
  const KernelTuning& t = target.tuning;
  // positions and gathers are emitted for the element layouts of pointwise and row kernels only
  if (!a.is_reduction() || !a.single_pass || a.has_indexing() || t.grid_blocks_per_sm <= 0 || !only_row_outputs(a)) return 0;
  int main = main_slot(a, slots);
  if (main < 0 || inner.empty() || std::llabs(inner.back().strides[main]) != 1 || rows < 1) return 0;
  int64_t vectors = (cols + vector - 1) / vector;
  int64_t by_wave = int64_t(target.sm_count) * grid_blocks_per_sm(t) / rows;
  int64_t by_work = vectors / (int64_t(t.grid_threads) * t.grid_min_vectors);
  int64_t splits = std::min(by_wave, by_work);
  return splits >= 2 ? splits : 0;
}

// The first leaf read per element walks the innermost kept axis contiguously and the innermost
// reduced axis not: a block per row would read each row strided.
bool rows_across_memory(const KernelAnalysis& a, const std::vector<Slot>& slots, const std::vector<Axis>& outer,
                        const std::vector<Axis>& inner) {
  int main = main_slot(a, slots);
  if (main < 0 || outer.empty() || inner.empty()) return false;
  return std::llabs(outer.back().strides[main]) == 1 && std::llabs(inner.back().strides[main]) != 1;
}

// Column tile: up to kColumnTile threads (each `vector` kept elements wide) along the kept axes,
// the rest of a 256-thread block along the reduced axes. 32: on an H100 64 and 128 were slower
// (column_sum [8192, 6400] 40.7 us at 32, 42.2 at 64, 45.0 at 128;
// bench/results/2026-11-25-NVIDIA_H100_80GB_HBM3-issue17-session23-notes.md).
constexpr int kColumnTile = 32;
void choose_tile(const KernelAnalysis& a, const std::vector<Slot>& launch, KernelVariant& v, const std::vector<Axis>& outer,
                 const std::vector<Axis>& inner, int64_t rows) {
  v.threads = 256;
  int64_t slots = (rows + v.vector - 1) / v.vector;
  int tile = 1;
  while (tile < kColumnTile && tile < slots) tile *= 2;
  v.tile_x = tile;
  int main = std::max(0, main_slot(a, launch));
  // Where the reduced axis is the contiguous one (few long rows), a block takes one kept index
  // and consecutive threads take consecutive reduced indices.
  v.ty_fast = !inner.empty() && std::llabs(inner.back().strides[main]) == 1 &&
              (outer.empty() || std::llabs(outer.back().strides[main]) != 1);
  if (v.ty_fast) v.tile_x = 1;
}

// Blocks along the kept axes; `splits` gets the blocks along the reduced axes: as many as fit
// on the GPU at once with the kept-axis blocks (one full wave, no half-empty second one), with
// at least target.tuning.column_min_steps reduced indices per thread.
int64_t column_grid(const KernelAnalysis& a, const KernelVariant& v, int64_t rows, int64_t cols, const LaunchTarget& target,
                    int64_t& splits, int64_t& most) {
  int64_t slots = (rows + v.vector - 1) / v.vector;
  int64_t blocks_x = (slots + v.tile_x - 1) / v.tile_x;
  int ty = v.threads / v.tile_x;
  int64_t per_sm = 2048 / v.threads;
  if (int shared = column_shared_bytes(a, v); shared > 0) per_sm = std::min<int64_t>(per_sm, target.shared_per_sm / shared);
  if (target.tuning.column_blocks_per_sm > 0) per_sm = target.tuning.column_blocks_per_sm;
  int64_t wave = int64_t(target.sm_count) * std::max<int64_t>(1, per_sm);
  most = std::clamp<int64_t>(cols / (int64_t(ty) * target.tuning.column_min_steps), 1, 65535);
  splits = std::clamp<int64_t>(wave / blocks_x, 1, most);
  return blocks_x;
}

// KernelVariant::shared_row where the held leaves fit KernelTuning::row_shared_bytes (and the SM):
// of row_shared_threads and half as many a block, the one whose blocks an SM's shared memory holds
// more of (more rows in flight), else the wider (H100 softmax [2048, 65536] bf16: 206.4 us at 1024
// threads, 227.8 at 512, one block an SM each; [2048, 50257] bf16 181.5 at 512, two blocks an SM,
// 196.7 at 1024, one); the blocks an SM are launch bounds' minimum, so that ptxas leaves them the
// registers.
// Returns the dynamic shared memory taken (0: v unchanged).
int64_t hold_row_in_shared_memory(const KernelAnalysis& a, int64_t cols, KernelVariant& v, const LaunchTarget& target) {
  KernelVariant shared = v;
  shared.shared_row = true;
  shared.recompute = false;
  const int64_t slots = (cols + v.vector - 1) / v.vector;
  // the held leaves' bytes a vector slot (which leaves are held does not depend on the block)
  shared.threads = 1;
  shared.items = 1;
  const int64_t slot_bytes = int64_t(row_shared_bytes(a, shared));
  if (slot_bytes == 0) return 0;
  std::optional<KernelVariant> best;
  int64_t best_bytes = 0;
  const int widest = std::max(32, target.tuning.row_shared_threads / 32 * 32);
  for (int threads : {widest, std::max(32, widest / 64 * 32)}) {
    shared.threads = threads;
    shared.items = int((slots + threads - 1) / threads);
    const int64_t bytes = int64_t(shared.items) * threads * slot_bytes;
    const int64_t per_block = bytes + 4096;  // the static reduction regions (1584 bytes) and the block's reserve (1024)
    if (bytes > target.tuning.row_shared_bytes || per_block > target.shared_per_sm) continue;
    shared.min_blocks = int(std::clamp<int64_t>(target.shared_per_sm / per_block, 1, 2048 / threads));
    if (!best || shared.min_blocks > best->min_blocks) {
      best = shared;
      best_bytes = bytes;
    }
  }
  if (best) v = *best;
  return best_bytes;
}

// The widest element read per element (not a per-row operand or a position): what a held row
// takes of a thread's registers.
int element_bytes(const KernelAnalysis& a) {
  int bytes = 1;
  for (const Value* leaf : a.leaves)
    if (!a.at(leaf).per_row && !a.is_position(leaf)) bytes = std::max(bytes, int(dtype_size(leaf->dtype())));
  return bytes;
}

// Threads per row and how many vectors each keeps in registers (0: re-read each pass).
void choose_block(const KernelAnalysis& a, KernelVariant& v, int64_t rows, int64_t cols, const LaunchTarget& target) {
  int64_t slots = (cols + v.vector - 1) / v.vector;
  // The tuning caps the block size; the built-in 256 favours several vectors per thread in flight
  // over wide blocks.
  const int max_threads = target.tuning.row_threads / 32 * 32;
  int threads = int(std::min<int64_t>(max_threads, std::max<int64_t>(32, (slots + 31) / 32 * 32)));
  int64_t items = (slots + threads - 1) / threads;
  if (items > 8) {
    threads = 1024;
    items = (slots + threads - 1) / threads;
  }
  v.threads = threads;
  // registers per thread for one cached leaf; only leaves read by several passes are cached
  const bool fits = threads == 1024 ? items * v.vector * element_bytes(a) <= target.tuning.row_held_bytes : items * v.vector <= 64;
  v.items = fits ? int(std::max<int64_t>(items, 1)) : 0;
  v.min_blocks = target.tuning.row_min_blocks;
  // Short rows (up to 8 vectors a lane): a warp per row, 8 rows a block, no block barriers.
  int64_t lane_items = (slots + 31) / 32;
  if (lane_items <= 8 && rows >= 64 && target.warp_rows) {
    v.rows_per_block = 8;
    v.threads = 256;
    v.items = int(std::max<int64_t>(lane_items, 1));
  }
}

}  // namespace

// Every offset a kernel computes (with slack for the lanes past the end) fits in an int.
bool small_offsets(const std::vector<Axis>& axes, int64_t numel) {
  const int64_t limit = int64_t(1) << 30;
  if (numel >= limit) return false;
  size_t tensors = axes.empty() ? 0 : axes[0].strides.size();
  for (size_t t = 0; t < tensors; ++t) {
    int64_t span = 0;
    for (const Axis& a : axes) span += (a.size - 1) * std::llabs(a.strides[t]);
    if (span >= limit) return false;
  }
  return true;
}

std::vector<uint64_t> scalar_words(const KernelAnalysis& a, const std::function<const Tensor&(const Value*)>& value_of) {
  return scalar_words(a.scalar_inputs, value_of);
}

std::vector<uint64_t> scalar_words(const std::vector<Value*>& scalars, const std::function<const Tensor&(const Value*)>& value_of) {
  std::vector<uint64_t> words;
  for (const Value* s : scalars) {
    const Tensor& t = value_of(s);
    if (is_floating(s->dtype())) {
      double x = load_as_double(t.data(), t.dtype(), 0);
      uint64_t w;
      std::memcpy(&w, &x, 8);
      words.push_back(w);
    } else {
      words.push_back(uint64_t(load_as_int(t.data(), t.dtype(), 0)));
    }
  }
  return words;
}

Tensor position_tensor(DType dtype, const std::vector<int64_t>& sizes) {
  return Tensor(std::make_shared<Buffer>(), dtype, sizes, contiguous_strides(sizes), 0);
}

std::vector<const Tensor*> launch_tensors(const KernelAnalysis& a, const std::function<const Tensor&(const Value*)>& value_of,
                                          const std::function<std::vector<int64_t>(const Value*)>& shape_of, std::deque<Tensor>& made) {
  std::map<const Value*, const Tensor*> positions;
  for (const Op* iota : a.iotas)
    positions[iota->outputs[0]] = &made.emplace_back(position_tensor(iota->outputs[0]->dtype(), shape_of(iota->outputs[0])));
  for (const Op* view : a.position_views) {
    Tensor t = apply_view(*view, *positions.at(view->inputs[0]), shape_of(view->outputs[0]));
    ALLOY_CHECK(t.defined(), "the view ", view->outputs[0]->name, " of a position needs a copy");
    positions[view->outputs[0]] = &made.emplace_back(std::move(t));
  }
  std::vector<const Tensor*> tensors;
  for (Value* leaf : a.leaves) {
    if (a.is_position(leaf)) {
      tensors.push_back(positions.at(leaf));
    } else if (const CatLeaf* cat = a.cat_leaf(leaf)) {
      for (Value* source : cat->sources) tensors.push_back(&value_of(source));
    } else {
      tensors.push_back(&value_of(leaf));
    }
  }
  for (const GatherLoad& g : a.gathers) {
    const Tensor& x = value_of(g.source);
    std::vector<int64_t> index = shape_of(g.op->outputs[0]);
    reference::check_gather_extents(*g.op, index, x.sizes(), g.axis);
    tensors.push_back(&x);
    tensors.push_back(&made.emplace_back(position_tensor(g.op->outputs[0]->dtype(), std::move(index))));
  }
  for (Value* out : a.outputs) tensors.push_back(&value_of(out));
  return tensors;
}

LaunchTarget LaunchTarget::from_environment(int sm_major, int sm_minor, int sm_count, int64_t shared_per_sm) {
  LaunchTarget t;
  t.sm_count = sm_count;
  t.shared_per_sm = shared_per_sm;
  t.tuning = kernel_tuning(sm_major, sm_minor);
  // common/settings.h: each switch means one thing at 1 (the defaults are the fields' own)
  t.early_loads = !settings::flag("ALLOY_NO_EARLY_LOADS");
  t.column_kernels = !settings::flag("ALLOY_NO_COLUMN_KERNELS");
  t.warp_rows = !settings::flag("ALLOY_NO_WARP_ROWS");
  t.tile_transposes = !settings::flag("ALLOY_NO_TILE_TRANSPOSES");
  t.edge_elements = !settings::flag("ALLOY_NO_EDGE_ELEMENTS");
  t.split_stages = !settings::flag("ALLOY_NO_SPLIT_STAGES");
  t.streaming_online = !settings::flag("ALLOY_NO_STREAMING_ONLINE");
  return t;
}

namespace {

// The launch's axes as the kernel walks them (LaidOut, launch_vectors.h).
LaidOut lay_out(const KernelAnalysis& a, const std::vector<int64_t>& domain, const LaunchTensors& lt) {
  LaidOut l;
  for (int d = 0; d < int(domain.size()); ++d) {
    Axis axis{domain[d], {}};
    for (size_t t = 0; t < lt.tensors.size(); ++t) axis.strides.push_back(domain_stride(a, lt.slots[t], *lt.tensors[t], d));
    for (const CatSources& c : lt.cats)
      if (c.domain_axis == d) axis.cat_axis = d;
    bool reduced = std::find(a.reduced_axes.begin(), a.reduced_axes.end(), d) != a.reduced_axes.end();
    (reduced ? l.inner : l.outer).push_back(axis);
  }
  for (int64_t n : domain) l.numel *= n;
  l.outer = collapse(l.outer);
  l.inner = collapse(l.inner);
  if (a.is_reduction() && l.inner.empty()) l.inner.push_back(Axis{1, std::vector<int64_t>(lt.tensors.size(), 0)});
  for (auto& ax : l.outer) l.rows *= ax.size;
  for (auto& ax : l.inner) l.cols *= ax.size;
  return l;
}

// Where each cat leaf's concatenated axis is among the launch's axes (-1: dropped, extent 1).
std::vector<int> cat_axes_of(const std::vector<CatSources>& cats, const std::vector<Axis>& axes) {
  std::vector<int> positions;
  for (const CatSources& c : cats) {
    int at = -1;
    for (size_t i = 0; i < axes.size(); ++i)
      if (c.domain_axis >= 0 && axes[i].cat_axis == c.domain_axis) at = int(i);
    positions.push_back(at);
  }
  return positions;
}


// The kernel shape and its launch-time choices; `columns` says whether it is a column kernel,
// `splits` the blocks a row of a grid reduction is split over (0: not one).
KernelVariant choose_variant(const KernelAnalysis& a, LaidOut& l, const LaunchTensors& lt, const LaunchTarget& target, bool& columns,
                             std::vector<Axis>& axes, int64_t& splits, int64_t& shared_row_bytes) {
  splits = 0;
  shared_row_bytes = 0;
  // the launch's axes (kept, then reduced) and a variant of their ranks, before any choice
  auto start = [&] {
    axes = l.outer;
    axes.insert(axes.end(), l.inner.begin(), l.inner.end());
    KernelVariant v;
    v.outer_rank = int(l.outer.size());
    v.inner_rank = int(l.inner.size());
    v.cat_axes = cat_axes_of(lt.cats, axes);
    return v;
  };
  if (a.has_outer_reductions()) {  // a persistent row kernel: its blocks go into `splits`
    columns = false;
    KernelVariant v = start();
    splits = choose_inner_outer(a, l, lt, target, axes, v);
    return v;
  }
  if (a.is_reduction()) {  // few long rows read along the reduced axis: a grid reduction
    KernelVariant g = start();
    choose_vector(a, lt.slots, g, axes, int(axes.size()) - 1, lt.tensors, lt.addresses, lt.cats, target.edge_elements);
    splits = grid_splits(a, lt.slots, l.inner, l.rows, l.cols, g.vector, target);
    if (splits > 0) {
      columns = false;
      g.grid = true;
      g.threads = target.tuning.grid_threads / 32 * 32;
      g.min_blocks = grid_blocks_per_sm(target.tuning);
      for (const Op* op : a.compute_ops)
        if (op->kind == OpKind::var_mean) g.welford_steps = target.tuning.grid_welford_steps;
      g.loads_ahead = target.tuning.grid_loads_ahead && g.welford_steps == 1;
      g.step_bytes = target.tuning.grid_step_bytes;
      g.index32 = small_offsets(axes, l.numel);
      return g;
    }
  }
  columns = a.is_reduction() && use_column_kernel(a, lt.slots, l.outer, l.inner, l.rows, l.cols, target);
  if (columns && l.outer.empty()) l.outer.push_back(Axis{1, std::vector<int64_t>(lt.tensors.size(), 0)});
  KernelVariant v = start();
  if (target.tile_transposes && choose_transpose(a, lt.slots, v, axes, lt.tensors, lt.addresses)) {
    v.early_loads = target.early_loads;
    v.index32 = small_offsets(axes, l.numel);
    return v;
  }
  choose_vector(a, lt.slots, v, axes, columns ? v.outer_rank - 1 : int(axes.size()) - 1, lt.tensors, lt.addresses, lt.cats,
                target.edge_elements && !columns, columns ? column_max_vector(a) : 8);
  if (columns) choose_tile(a, lt.slots, v, l.outer, l.inner, l.rows);
  else if (a.is_reduction()) choose_block(a, v, l.rows, l.cols, target);
  else v.threads = 256;
  // many accumulators: fewer threads along the reduced axes, down to 2 a column; else a row kernel
  while (columns && column_shared_bytes(a, v) > kMaxColumnSharedBytes && v.threads / v.tile_x > 2) v.threads /= 2;
  if (columns && column_shared_bytes(a, v) > kMaxColumnSharedBytes) {
    columns = false;
    v = start();
    choose_vector(a, lt.slots, v, axes, int(axes.size()) - 1, lt.tensors, lt.addresses, lt.cats, target.edge_elements);
    choose_block(a, v, l.rows, l.cols, target);
  }
  int lanes = v.rows_per_block ? 32 : v.threads;
  v.full_rows = a.is_reduction() && !columns && !v.edge_elements && v.items > 0 && l.cols == int64_t(v.items) * lanes * v.vector;
  v.recompute = target.tuning.recompute_values && a.is_reduction() && !columns;
  v.index32 = small_offsets(axes, l.numel);
  // a warp per row only: a block per row (layer norm over 8192 columns) lost occupancy to the
  // registers (H100: 105 us against 95.7 loading late; a warp per row, 6.2 us against 8.2)
  v.early_loads = target.early_loads && a.is_reduction() && !columns && v.items > 0 && v.rows_per_block > 0;
  // Rows too long for a block's registers whose leaves more than one pass reads: held in shared
  // memory where a block's share of it (KernelTuning::row_shared_bytes) holds them (not a
  // log-sum-exp, whose streaming pass reads the row once)
  const bool streams_once = target.streaming_online && only_row_outputs(a) && !online_softmax_stages(a).empty();
  if (a.is_reduction() && !columns && v.rows_per_block == 0 && v.threads == 1024 && v.items == 0 && !streams_once &&
      target.tuning.row_shared_bytes > 0)
    shared_row_bytes = hold_row_in_shared_memory(a, l.cols, v, target);
  // Log-sum-exp over rows so long that a block of 1024 threads holds one in registers (one block an
  // SM, whose loads stop while it reduces): one streaming pass with a running max instead. A
  // softmax (values stored per element) over rows too long to hold: the max and the sum in that
  // one pass, then the pass that stores (two reads of the row, not three).
  if (a.is_reduction() && !columns && target.streaming_online && v.rows_per_block == 0 && v.threads == 1024 &&
      (only_row_outputs(a) || v.items == 0) && !online_softmax_stages(a).empty()) {
    v.streaming_online = true;
    v.items = 0;
    v.full_rows = false;
    const int threads = only_row_outputs(a) ? target.tuning.streaming_threads : target.tuning.reread_threads;
    v.threads = std::max(32, threads / 32 * 32);
  }
  return v;
}

}  // namespace

void fit_column_grid(LaunchPlan& plan, int blocks_per_sm, const LaunchTarget& target) {
  if (plan.column_max_splits <= 1 || target.tuning.column_blocks_per_sm > 0 || blocks_per_sm < 1) return;
  int64_t wave = int64_t(target.sm_count) * blocks_per_sm;
  int64_t splits = std::clamp<int64_t>(wave / std::max<int64_t>(1, plan.grid_x), 1, plan.column_max_splits);
  plan.grid_y = unsigned(splits);
  plan.workspace_bytes = size_t(splits) * plan.workspace_bytes_per_split;
}

bool fit_cooperative_grid(LaunchPlan& plan, int blocks_per_sm, const LaunchTarget& target) {
  if (!plan.cooperative) return true;
  const int64_t resident = int64_t(std::max(1, target.sm_count)) * blocks_per_sm;
  if (resident < 1) return false;
  plan.grid_x = unsigned(std::min<int64_t>(plan.grid_x, resident));
  return true;
}

LaunchPlan plan_launch(const KernelAnalysis& a, const std::vector<int64_t>& domain, const std::vector<const Tensor*>& tensors,
                       const std::vector<uint64_t>& scalar_words, const LaunchTarget& target) {
  LaunchPlan plan;
  LaunchTensors lt{tensors, launch_slots(a), {}, {}};
  ALLOY_CHECK(lt.slots.size() == tensors.size(), "plan_launch got ", tensors.size(), " tensors; the kernel reads and writes ",
              lt.slots.size());
  lt.cats = cat_sources(a, lt.slots, tensors);
  lt.addresses = launch_addresses(a, lt.slots, tensors, lt.cats);
  LaidOut l = lay_out(a, domain, lt);
  if (l.numel == 0 && !a.is_reduction()) return plan;
  // (an inner-outer kernel of no rows still stores its column results: the reductions' identities)
  if (a.is_reduction() && l.rows == 0 && !a.has_outer_reductions()) return plan;
  if (a.has_outer_reductions() && l.cols == 0) return plan;
  bool columns = false;
  std::vector<Axis> axes;
  int64_t splits = 0;
  int64_t shared_row_bytes = 0;  // (KernelVariant::shared_row)
  KernelVariant v = choose_variant(a, l, lt, target, columns, axes, splits, shared_row_bytes);

  std::vector<uint64_t>& words = plan.words;
  auto push_i = [&](int64_t x) { words.push_back(uint64_t(x)); };
  auto push_d = [&](double x) { uint64_t w; std::memcpy(&w, &x, 8); words.push_back(w); };
  if (a.is_reduction()) {
    push_i(l.rows);
    push_i(l.cols);
    push_d(double(l.cols));
  } else {
    push_i(l.numel);
  }
  if (columns) {
    int64_t splits = 1, most = 1;
    int64_t blocks_x = column_grid(a, v, l.rows, l.cols, target, splits, most);
    plan.grid_x = unsigned(blocks_x);
    plan.grid_y = unsigned(splits);
    plan.column_max_splits = most;
    plan.workspace_bytes_per_split = size_t(l.rows) * size_t(column_workspace_words(a)) * 8;
    if (most > 1) {
      plan.workspace_bytes = size_t(splits) * plan.workspace_bytes_per_split;
      plan.counter_bytes = size_t(blocks_x) * 4;
      plan.workspace_word = int(words.size());
      plan.counters_word = int(words.size()) + 1;
    }
    push_i(0);  // the workspace and counters, filled in by the launcher
    push_i(0);
  }
  if (v.inner_outer) {  // the persistent grid, and where it has several blocks their column partials' workspace
    plan.grid_x = unsigned(splits);
    plan.workspace_bytes = inner_outer_workspace_bytes(a, splits, l.cols, v.combine_levels);
    plan.cooperative = v.combine_levels == 0 && splits > 1;
    plan.dynamic_shared = inner_outer_shared_partial_bytes(a, v);
    if (plan.workspace_bytes > 0) {
      plan.counter_bytes = size_t(inner_outer_tree(splits, v.combine_levels).counters) * 4;
      plan.workspace_word = int(words.size());
      plan.counters_word = int(words.size()) + 1;
    }
    push_i(0);  // the workspace and counters, filled in by the launcher
    push_i(0);
  }
  if (v.grid) {  // a block a stretch of a row (gridDim.x), a row a line of blocks (gridDim.y)
    plan.grid_x = unsigned(splits);
    plan.grid_y = unsigned(l.rows);
    plan.workspace_bytes = size_t(l.rows) * size_t(splits) * size_t(column_workspace_words(a)) * 8;
    plan.counter_bytes = size_t(l.rows) * 4;
    plan.workspace_word = int(words.size());
    plan.counters_word = int(words.size()) + 1;
    push_i(0);  // the workspace and counters, filled in by the launcher
    push_i(0);
  }
  int dims = std::max(1, int(axes.size()));
  for (int d = 0; d < dims; ++d) push_i(d < int(axes.size()) ? axes[d].size : 1);
  size_t cat = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    push_i(int64_t(lt.addresses[t]));
    for (int d = 0; d < dims; ++d) push_i(d < int(axes.size()) ? axes[d].strides[t] : 0);
    // after a cat leaf's last source: where its sources end along the cat's axis
    if (cat < lt.cats.size() && int(t) == lt.cats[cat].slots.back()) {
      for (int64_t end : lt.cats[cat].ends) push_i(end);
      ++cat;
    }
    // after a gather's positions: its source's stride and size along the gathered axis (a 0-dim
    // source: its one element, at index 0)
    if (lt.slots[t].kind == Slot::Kind::gather_positions) {
      const Tensor& x = *tensors[t - 1];
      int axis = a.gathers[size_t(lt.slots[t].gather)].axis;
      push_i(x.dim() == 0 ? 0 : x.stride(axis));
      push_i(x.dim() == 0 ? 1 : x.size(axis));
    }
  }
  words.insert(words.end(), scalar_words.begin(), scalar_words.end());
  if (!a.gathers.empty()) {  // the error flag, filled in by the launcher
    plan.error_word = int(words.size());
    push_i(0);
  }
  if (!columns && !v.grid && !v.inner_outer) {
    int64_t rows_per_block = std::max(1, v.rows_per_block);
    // pointwise edge elements over lines (several axes): a slot more a line than its whole vectors
    int64_t slots = v.edge_elements && axes.size() > 1 ? l.numel / axes.back().size * (axes.back().size / v.vector + 1) : l.numel / v.vector;
    int64_t blocks = a.is_reduction() ? (l.rows + rows_per_block - 1) / rows_per_block : (slots + v.threads - 1) / v.threads;
    if (v.transpose_axis >= 0) {  // a block a tile
      const int64_t size_x = axes.back().size, size_y = axes[size_t(v.transpose_axis)].size, tile = kTransposeTile;
      blocks = l.numel / (size_x * size_y) * ((size_x + tile - 1) / tile) * ((size_y + tile - 1) / tile);
    }
    blocks = std::min<int64_t>(blocks, 2147483647);
    if (blocks == 0) return plan;
    plan.grid_x = unsigned(blocks);
    plan.dynamic_shared = size_t(shared_row_bytes);
  }
  plan.variant = v;
  plan.block = unsigned(v.threads) * unsigned(v.row_groups);
  plan.launch = true;
  plan.split_stages = a.is_reduction() && !a.single_pass && !columns && target.split_stages && !a.has_indexing() && !a.has_outer_reductions() &&
                      rows_across_memory(a, lt.slots, l.outer, l.inner) && l.rows >= kTransposeTile / 2 &&
                      l.cols >= kTransposeTile / 2;
  return plan;
}

}  // namespace alloy::cuda
