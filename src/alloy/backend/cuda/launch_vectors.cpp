#include "alloy/backend/cuda/launch_vectors.h"

#include <algorithm>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"

namespace alloy::cuda {
namespace {

// The leaf modes (KernelVariant::leaf_modes) of vectors of `vec` elements along axis `va` where
// every pointer and stride allows them whole: every vector starts at an aligned address and ends
// inside the axis. A vector never straddles two sources of a cat: along a cat's axis, it divides
// where every source ends. Empty where they do not fit.
std::string whole_vectors(const KernelAnalysis& a, const std::vector<Slot>& slots, const KernelVariant& v, const std::vector<Axis>& axes,
                          int va, int vec, const std::vector<const Tensor*>& tensors, const std::vector<uintptr_t>& addresses,
                          const std::vector<CatSources>& cats) {
  const Axis& along = axes[va];
  if (along.size % vec != 0) return "";
  for (size_t j = 0; j < cats.size(); ++j)
    if (v.cat_axes[j] == va)
      for (int64_t end : cats[j].ends)
        if (end % vec != 0) return "";
  std::string modes(a.leaves.size(), '?');
  for (size_t t = 0; t < tensors.size(); ++t) {
    int leaf = slots[t].leaf;
    if (a.is_reduction() && !a.per_element(slots[t].laid_out_as)) {  // per row, or per column (stored one by one)
      if (leaf >= 0) modes[leaf] = 's';
      continue;
    }
    if (slots[t].kind == Slot::Kind::position) {  // computed, any layout: 'p'
      modes[leaf] = 'p';
      continue;
    }
    if (!slots[t].in_vectors()) continue;
    char mode = 'v';
    int64_t inner = along.strides[t];
    if (inner == 0 && leaf >= 0) {
      mode = 'b';
    } else if (inner != 1) {
      return "";
    } else {
      if (addresses[t] % (uintptr_t(vec) * dtype_size(tensors[t]->dtype())) != 0) return "";
      for (size_t d = 0; d < axes.size(); ++d)
        if (int(d) != va && axes[d].strides[t] % vec != 0) return "";
    }
    // every source of a cat leaf is read the same way
    if (leaf >= 0 && modes[leaf] != '?' && modes[leaf] != mode) return "";
    if (leaf >= 0) modes[leaf] = mode;
  }
  return modes;
}

// The leaf modes of vectors of `vec` elements along the one axis `va` (a pointwise kernel's only
// axis, a row kernel's only reduced one) of a size or alignment that whole vectors do not fit, with
// edge elements (KernelVariant::edge_elements): each line along `va` starts its vectors at the
// first aligned element and computes the elements before it and after the last whole vector one
// at a time. That first element must be the same for every tensor read or written in vectors: the
// outputs stored per element (or else the first leaf read per element) fix the element offsets'
// residues mod `vec` (the pointer's and every other axis' stride); a leaf with other residues is
// read element by element ('u'). No cats. Empty where that does not fit either.
std::string vectors_with_edges(const KernelAnalysis& a, const std::vector<Slot>& slots, const KernelVariant& v, const std::vector<Axis>& axes,
                               int va, int vec, const std::vector<const Tensor*>& tensors, const std::vector<uintptr_t>& addresses) {
  if (!a.cat_leaves.empty() || (a.is_reduction() ? v.inner_rank != 1 : axes.empty())) return "";
  auto residues = [&](size_t t) {
    std::vector<int64_t> r{int64_t(addresses[t] / dtype_size(tensors[t]->dtype()) % uintptr_t(vec))};
    for (size_t d = 0; d < axes.size(); ++d)
      if (int(d) != va) r.push_back(((axes[d].strides[t] % vec) + vec) % vec);
    return r;
  };
  std::vector<size_t> order;  // the outputs stored per element first: they set the residues
  for (size_t t = 0; t < tensors.size(); ++t)
    if (slots[t].kind == Slot::Kind::output) order.push_back(t);
  for (size_t t = 0; t < tensors.size(); ++t)
    if (slots[t].kind == Slot::Kind::leaf || slots[t].kind == Slot::Kind::position) order.push_back(t);
  std::string modes(a.leaves.size(), 's');
  std::vector<int64_t> reference;
  for (size_t t : order) {
    int leaf = slots[t].leaf;
    if (a.is_reduction() && !a.per_element(slots[t].laid_out_as)) continue;
    if (slots[t].kind == Slot::Kind::position) {
      modes[leaf] = 'p';
      continue;
    }
    int64_t inner = axes[size_t(va)].strides[t];
    if (addresses[t] % uintptr_t(dtype_size(tensors[t]->dtype())) != 0) return "";
    if (inner == 0 && leaf >= 0) {
      modes[leaf] = 'b';
    } else if (inner != 1) {
      return "";
    } else if (reference.empty() || residues(t) == reference) {
      if (reference.empty()) reference = residues(t);
      if (leaf >= 0) modes[leaf] = 'v';
    } else if (leaf >= 0) {
      modes[leaf] = 'u';
    } else {
      return "";  // an output out of step with the others
    }
  }
  return reference.empty() ? "" : modes;
}

}  // namespace

int64_t domain_stride(const KernelAnalysis& a, const Slot& slot, const Tensor& tensor, int d) {
  const ValueLayout& l = a.at(slot.laid_out_as);
  const std::vector<int>& map = slot.kind == Slot::Kind::output ? l.store_axes : l.axis_map;
  int gathered = slot.kind == Slot::Kind::gather_source ? a.gathers[size_t(slot.gather)].axis : -1;
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i] == d && int(i) != gathered) return tensor.size(int(i)) == 1 ? 0 : tensor.stride(int(i));
  return 0;
}

// The widest vector (up to 16 bytes for the narrowest type) along axis `va` (the innermost
// reduced axis of a row kernel, the innermost kept axis of a column kernel, the innermost axis of
// a pointwise kernel): whole vectors where they fit, else (`edges`: row and pointwise kernels)
// vectors with edge elements.
void choose_vector(const KernelAnalysis& a, const std::vector<Slot>& slots, KernelVariant& v, const std::vector<Axis>& axes, int va,
                   const std::vector<const Tensor*>& tensors, const std::vector<uintptr_t>& addresses,
                   const std::vector<CatSources>& cats, bool edges, int max_vector) {
  v.vector = 1;
  v.edge_elements = false;
  if (axes.empty() || va < 0) return;
  int min_size = 8;
  for (size_t t = 0; t < tensors.size(); ++t)
    if (slots[t].in_vectors()) min_size = std::min(min_size, dtype_size(tensors[t]->dtype()));
  for (int vec = std::min(max_vector, 16 / min_size); vec > 1; vec /= 2) {
    std::string modes = whole_vectors(a, slots, v, axes, va, vec, tensors, addresses, cats);
    if (modes.empty() && edges && axes[size_t(va)].size >= 2 * vec) {
      modes = vectors_with_edges(a, slots, v, axes, va, vec, tensors, addresses);
      v.edge_elements = !modes.empty();
    }
    if (!modes.empty()) {
      v.vector = vec;
      v.leaf_modes = modes;
      return;
    }
  }
}

// A pointwise kernel whose leaves disagree on the contiguous axis runs as a tile transpose
// (KernelVariant::transpose_axis): the leaves contiguous along another axis Y than the innermost
// one X are staged through shared memory. Taken where every output walks X contiguously, a leaf
// that does not walks Y contiguously, both axes span at least a quarter tile, and the staged
// tiles fit in shared memory; no cats (their position picks the source).
// The vector: the widest that divides both sides and that every tensor's address and other
// strides allow, read along X (outputs and direct leaves; 'b' for those broadcast along X) and
// along Y (staged leaves).
bool choose_transpose(const KernelAnalysis& a, const std::vector<Slot>& slots, KernelVariant& v, const std::vector<Axis>& axes,
                      const std::vector<const Tensor*>& tensors, const std::vector<uintptr_t>& addresses) {
  if (a.is_reduction() || !a.cat_leaves.empty() || a.has_indexing() || axes.size() < 2) return false;
  const int x = int(axes.size()) - 1, quarter = kTransposeTile / 4;
  if (axes[x].size < quarter) return false;
  auto along_x = [&](size_t t) { return axes[x].strides[t]; };
  int y = -1;
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t].leaf < 0 && along_x(t) != 1) return false;  // an output not contiguous along X
    if (slots[t].leaf < 0 || along_x(t) == 0 || along_x(t) == 1 || y >= 0) continue;
    for (int d = 0; d < x; ++d)
      if (axes[d].strides[t] == 1) y = d;
  }
  if (y < 0 || axes[y].size < quarter) return false;
  std::string staged(a.leaves.size(), '.');
  for (size_t t = 0; t < slots.size(); ++t)
    if (slots[t].leaf >= 0 && along_x(t) != 0 && along_x(t) != 1 && axes[y].strides[t] == 1) staged[slots[t].leaf] = 't';
  KernelVariant tiled = v;
  tiled.transpose_axis = y;
  tiled.staged = staged;
  tiled.threads = 256;
  if (transpose_shared_bytes(a, tiled) > kMaxColumnSharedBytes) return false;
  int min_size = 8;
  for (const Tensor* t : tensors) min_size = std::min(min_size, dtype_size(t->dtype()));
  tiled.vector = 1;
  tiled.leaf_modes.clear();
  for (int vec = std::min(8, 16 / min_size); vec > 1 && tiled.vector == 1; vec /= 2) {
    bool ok = axes[x].size % vec == 0 && axes[y].size % vec == 0;
    std::string modes(a.leaves.size(), 'v');
    for (size_t t = 0; t < slots.size() && ok; ++t) {
      int leaf = slots[t].leaf;
      int along = leaf >= 0 && staged[leaf] == 't' ? y : x;
      if (leaf >= 0 && along == x && along_x(t) == 0) {
        modes[leaf] = 'b';
        continue;
      }
      ok = axes[along].strides[t] == 1 && addresses[t] % (uintptr_t(vec) * dtype_size(tensors[t]->dtype())) == 0;
      for (size_t d = 0; d < axes.size() && ok; ++d)
        if (int(d) != along && axes[d].strides[t] % vec != 0) ok = false;
    }
    if (ok) {
      tiled.vector = vec;
      tiled.leaf_modes = modes;
    }
  }
  v = tiled;
  return true;
}

}  // namespace alloy::cuda
