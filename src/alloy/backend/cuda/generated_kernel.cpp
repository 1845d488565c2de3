#include "alloy/backend/cuda/generated_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/kernel_cache.h"
#include "alloy/backend/cuda/strided_copy.h"
#include "alloy/runtime/views.h"

namespace alloy::cuda {
namespace {

// One axis of the launch: its size and every tensor's stride along it.
struct Axis {
  int64_t size;
  std::vector<int64_t> strides;  // leaves, then outputs
};

// Drops size-1 axes and merges neighbours that every tensor walks contiguously.
std::vector<Axis> collapse(std::vector<Axis> axes) {
  std::vector<Axis> out;
  for (Axis& a : axes) {
    if (a.size == 1) continue;
    if (!out.empty()) {
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

class GeneratedKernel final : public host_ir::SegmentExecutable {
 public:
  GeneratedKernel(const Segment& segment, KernelAnalysis analysis) : a_(std::move(analysis)), id_(segment.id) {}

  void run(host_ir::RunState& state) override {
    for (const Op* view : a_.host_views) make_host_view(*view, state);
    std::vector<const Tensor*> tensors;
    for (Value* leaf : a_.leaves) tensors.push_back(&state.at(leaf));
    for (Value* out : a_.outputs) tensors.push_back(&state.at(out));
    Stream stream = Stream::current(state.device.index);

    std::vector<int64_t> domain;
    for (const Extent& e : a_.domain) domain.push_back(*e.evaluate(state.bindings));
    // axes in kernel order: kept then reduced (pointwise: all, in order)
    std::vector<Axis> outer, inner;
    for (int d = 0; d < int(domain.size()); ++d) {
      Axis axis{domain[d], {}};
      for (size_t t = 0; t < tensors.size(); ++t) axis.strides.push_back(domain_stride(t, *tensors[t], d));
      bool reduced = std::find(a_.reduced_axes.begin(), a_.reduced_axes.end(), d) != a_.reduced_axes.end();
      (reduced ? inner : outer).push_back(axis);
    }
    int64_t numel = 1;
    for (int64_t n : domain) numel *= n;
    if (numel == 0 && !a_.is_reduction()) return;
    outer = collapse(outer);
    inner = collapse(inner);
    if (a_.is_reduction() && inner.empty()) inner.push_back(Axis{1, std::vector<int64_t>(tensors.size(), 0)});
    int64_t rows = 1, cols = 1;
    for (auto& ax : outer) rows *= ax.size;
    for (auto& ax : inner) cols *= ax.size;
    if (a_.is_reduction() && rows == 0) return;

    bool columns = a_.is_reduction() && use_column_kernel(outer, inner, rows, cols, state.device.index);
    if (columns && outer.empty()) outer.push_back(Axis{1, std::vector<int64_t>(tensors.size(), 0)});
    std::vector<Axis> axes = outer;
    axes.insert(axes.end(), inner.begin(), inner.end());
    KernelVariant v;
    v.outer_rank = int(outer.size());
    v.inner_rank = int(inner.size());
    choose_vector(v, axes, columns ? v.outer_rank - 1 : int(axes.size()) - 1, tensors);
    if (columns) choose_tile(v, outer, inner, rows);
    else if (a_.is_reduction()) choose_block(v, rows, cols);
    else v.threads = 256;
    if (columns && column_shared_bytes(a_, v) > kMaxColumnSharedBytes) {  // too many accumulators: row kernel
      columns = false;
      v = KernelVariant{};
      v.outer_rank = int(outer.size());
      v.inner_rank = int(inner.size());
      choose_vector(v, axes, int(axes.size()) - 1, tensors);
      choose_block(v, rows, cols);
    }
    static const bool lean = std::getenv("ALLOY_LEAN_KERNELS") && std::string(std::getenv("ALLOY_LEAN_KERNELS")) == "1";
    v.lean = lean;
    v.index32 = lean && small_offsets(axes, numel);

    const LoadedKernel* kernel = kernel_for(v, state.device.index);
    std::vector<uint64_t> words;
    auto push_i = [&](int64_t x) { words.push_back(uint64_t(x)); };
    auto push_d = [&](double x) { uint64_t w; std::memcpy(&w, &x, 8); words.push_back(w); };
    Dim3 grid;
    if (a_.is_reduction()) {
      push_i(rows);
      push_i(cols);
      push_d(double(cols));
    } else {
      push_i(numel);
    }
    if (columns) {
      int64_t splits = 1;
      int64_t blocks_x = column_grid(v, rows, cols, state.device.index, splits);
      grid = Dim3{unsigned(blocks_x), unsigned(splits)};
      size_t ws_bytes = splits > 1 ? size_t(splits) * size_t(rows) * size_t(column_workspace_words(a_)) * 8 : 0;
      push_i(ws_bytes ? int64_t(reinterpret_cast<uintptr_t>(stream.scratch(ws_bytes))) : 0);
      push_i(splits > 1 ? int64_t(reinterpret_cast<uintptr_t>(stream.zeroed_scratch(size_t(blocks_x) * 4))) : 0);
    }
    int dims = std::max(1, int(axes.size()));
    for (int d = 0; d < dims; ++d) push_i(d < int(axes.size()) ? axes[d].size : 1);
    for (size_t t = 0; t < tensors.size(); ++t) {
      push_i(int64_t(reinterpret_cast<uintptr_t>(tensors[t]->data())));
      for (int d = 0; d < dims; ++d) push_i(d < int(axes.size()) ? axes[d].strides[t] : 0);
    }
    for (Value* s : a_.scalar_inputs) {
      const Tensor& t = state.at(s);
      if (is_floating(s->dtype())) push_d(load_as_double(t.data(), t.dtype(), 0));
      else push_i(load_as_int(t.data(), t.dtype(), 0));
    }
    if (!columns) {
      int64_t rows_per_block = std::max(1, v.rows_per_block);
      int64_t blocks = a_.is_reduction() ? std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, 2147483647)
                                         : std::min<int64_t>((numel / v.vector + v.threads - 1) / v.threads, 2147483647);
      if (blocks == 0) return;
      grid = Dim3{unsigned(blocks)};
    }
    void* args[] = {words.data()};
    kernel->launch(grid, Dim3{unsigned(v.threads)}, 0, stream, args);
  }

  std::string source() const override {
    std::string out;
    for (auto& [key, entry] : variants_) out += "// segment " + std::to_string(id_) + ", variant " + key + "\n" + entry.source + "\n";
    return out;
  }

 private:
  struct Variant {
    std::string source;
    const LoadedKernel* kernel = nullptr;
  };

  void make_host_view(const Op& view, host_ir::RunState& state) {
    const Tensor& in = state.at(view.inputs[0]);
    std::vector<int64_t> sizes = state.concrete_shape(view.outputs[0]);
    Tensor t = apply_view(view, in, sizes);
    if (!t.defined()) {
      // a reshape across non-contiguous axes: make the input contiguous first
      t = contiguous(in, Stream::current(state.device.index)).view(sizes);
    }
    state.values[view.outputs[0]->id] = t;
  }

  // The stride of tensor t (leaf or output) along domain axis d; 0 where it is broadcast.
  int64_t domain_stride(size_t t, const Tensor& tensor, int d) const {
    bool is_leaf = t < a_.leaves.size();
    const Value* v = is_leaf ? a_.leaves[t] : a_.outputs[t - a_.leaves.size()];
    const ValueLayout& l = a_.at(v);
    const std::vector<int>& map = is_leaf ? l.axis_map : l.store_axes;
    for (size_t i = 0; i < map.size(); ++i)
      if (map[i] == d) return tensor.size(int(i)) == 1 ? 0 : tensor.stride(int(i));
    return 0;
  }

  // The widest vector (up to 16 bytes for the narrowest type) every pointer and stride allows,
  // along axis `va` (the innermost reduced axis of a row kernel, the innermost kept axis of a
  // column kernel, the innermost axis of a pointwise kernel).
  void choose_vector(KernelVariant& v, const std::vector<Axis>& axes, int va, const std::vector<const Tensor*>& tensors) const {
    v.vector = 1;
    if (axes.empty() || va < 0) return;
    int min_size = 8;
    for (const Tensor* t : tensors) min_size = std::min(min_size, dtype_size(t->dtype()));
    const Axis& along = axes[va];
    size_t leaves = a_.leaves.size();
    for (int vec = std::min(8, 16 / min_size); vec > 1; vec /= 2) {
      if (along.size % vec != 0) continue;
      bool ok = true;
      std::string modes;
      for (size_t t = 0; t < tensors.size() && ok; ++t) {
        bool per_row_leaf = t < leaves && a_.is_reduction() && a_.at(a_.leaves[t]).per_row;
        bool per_row_out = t >= leaves && a_.is_reduction() && a_.at(a_.outputs[t - leaves]).per_row;
        if (per_row_leaf || per_row_out) { if (t < leaves) modes += 's'; continue; }
        int64_t inner = along.strides[t];
        if (inner == 0 && t < leaves) { modes += 'b'; continue; }
        if (inner != 1) { ok = false; break; }
        uintptr_t address = reinterpret_cast<uintptr_t>(tensors[t]->data());
        if (address % (uintptr_t(vec) * dtype_size(tensors[t]->dtype())) != 0) ok = false;
        for (size_t d = 0; d < axes.size(); ++d)
          if (int(d) != va && axes[d].strides[t] % vec != 0) ok = false;
        if (t < leaves) modes += 'v';
      }
      if (ok) {
        v.vector = vec;
        v.leaf_modes = modes;
        return;
      }
    }
  }

  // Every offset a kernel computes (with slack for the lanes past the end) fits in an int.
  static bool small_offsets(const std::vector<Axis>& axes, int64_t numel) {
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

  // A single-pass reduction runs as a column kernel when its kept axes are the contiguous ones
  // (a row kernel would read strided), or when a few long rows would leave most SMs idle.
  bool use_column_kernel(const std::vector<Axis>& outer, const std::vector<Axis>& inner, int64_t rows, int64_t cols,
                         int device) const {
    if (!a_.single_pass || std::getenv("ALLOY_NO_COLUMN_KERNELS")) return false;
    if (inner.empty() || cols <= 1) return false;
    int main = -1;  // the first leaf read per element decides the memory order
    for (size_t k = 0; k < a_.leaves.size() && main < 0; ++k)
      if (!a_.at(a_.leaves[k]).per_row) main = int(k);
    if (main < 0) return false;
    int64_t kept_stride = outer.empty() ? 0 : std::llabs(outer.back().strides[main]);
    int64_t reduced_stride = std::llabs(inner.back().strides[main]);
    if (!outer.empty() && kept_stride != 0 && kept_stride < reduced_stride) return true;
    int sms = device_props(device).sm_count;
    return rows < sms && cols >= 8192;
  }

  // Column tile: up to 32 threads (each `vector` kept elements wide) along the kept axes, the
  // rest of a 256-thread block along the reduced axes.
  void choose_tile(KernelVariant& v, const std::vector<Axis>& outer, const std::vector<Axis>& inner, int64_t rows) const {
    v.threads = 256;
    int64_t slots = (rows + v.vector - 1) / v.vector;
    int tile = 1;
    while (tile < 32 && tile < slots) tile *= 2;
    v.tile_x = tile;
    int main = 0;
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      if (!a_.at(a_.leaves[k]).per_row) { main = int(k); break; }
    // Where the reduced axis is the contiguous one (few long rows), a block takes one kept index
    // and consecutive threads take consecutive reduced indices.
    v.ty_fast = !inner.empty() && std::llabs(inner.back().strides[main]) == 1 &&
                (outer.empty() || std::llabs(outer.back().strides[main]) != 1);
    if (v.ty_fast) v.tile_x = 1;
  }

  // Blocks along the kept axes; `splits` gets the blocks along the reduced axes: as many as fit
  // on the GPU at once with the kept-axis blocks (one full wave, no half-empty second one), with
  // at least 16 reduced indices per thread.
  int64_t column_grid(const KernelVariant& v, int64_t rows, int64_t cols, int device, int64_t& splits) const {
    int64_t slots = (rows + v.vector - 1) / v.vector;
    int64_t blocks_x = (slots + v.tile_x - 1) / v.tile_x;
    int ty = v.threads / v.tile_x;
    const DeviceProps& props = device_props(device);
    int64_t per_sm = 2048 / v.threads;
    if (int shared = column_shared_bytes(a_, v); shared > 0) per_sm = std::min<int64_t>(per_sm, props.shared_per_sm / shared);
    int64_t wave = int64_t(props.sm_count) * std::max<int64_t>(1, per_sm);
    int64_t most = std::max<int64_t>(1, cols / (int64_t(ty) * 16));
    splits = std::clamp<int64_t>(wave / blocks_x, 1, std::min<int64_t>(most, 65535));
    return blocks_x;
  }

  // Threads per row and how many vectors each keeps in registers (0: re-read each pass).
  void choose_block(KernelVariant& v, int64_t rows, int64_t cols) const {
    int64_t slots = (cols + v.vector - 1) / v.vector;
    // ALLOY_ROW_THREADS caps the block size (tuning experiments); the default favours several
    // vectors per thread in flight over wide blocks.
    static const int max_threads = [] {
      const char* env = std::getenv("ALLOY_ROW_THREADS");
      return env ? std::clamp(std::atoi(env), 32, 1024) / 32 * 32 : 256;
    }();
    int threads = int(std::min<int64_t>(max_threads, std::max<int64_t>(32, (slots + 31) / 32 * 32)));
    int64_t items = (slots + threads - 1) / threads;
    if (items > 8) {
      threads = 1024;
      items = (slots + threads - 1) / threads;
    }
    v.threads = threads;
    // registers per thread for one cached leaf; only leaves read by several passes are cached
    v.items = (items * v.vector <= 64) ? int(std::max<int64_t>(items, 1)) : 0;
    static const int min_blocks = [] {
      const char* env = std::getenv("ALLOY_ROW_MIN_BLOCKS");
      return env ? std::clamp(std::atoi(env), 0, 16) : 0;
    }();
    v.min_blocks = min_blocks;
    // Short rows (up to 8 vectors a lane): a warp per row, 8 rows a block, no block barriers.
    int64_t lane_items = (slots + 31) / 32;
    if (lane_items <= 8 && rows >= 64 && !std::getenv("ALLOY_NO_WARP_ROWS")) {
      v.rows_per_block = 8;
      v.threads = 256;
      v.items = int(std::max<int64_t>(lane_items, 1));
    }
  }

  const LoadedKernel* kernel_for(const KernelVariant& v, int device) {
    // the cached run path: the same variant as last time costs one comparison
    if (last_kernel_ && v == last_variant_ && device == last_device_) return last_kernel_;
    last_variant_ = v;
    last_device_ = device;
    last_kernel_ = lookup_or_compile(v, device);
    return last_kernel_;
  }

  const LoadedKernel* lookup_or_compile(const KernelVariant& v, int device) {
    std::string key = v.key() + "@" + std::to_string(device);
    auto it = variants_.find(key);
    if (it != variants_.end()) return it->second.kernel;
    Variant entry;
    std::string name = "alloy_segment" + std::to_string(id_);
    entry.source = generate_kernel(a_, v, name);
    entry.kernel = &get_kernel(entry.source, name, device);
    return variants_.emplace(key, std::move(entry)).first->second.kernel;
  }

  KernelAnalysis a_;
  int id_;
  std::map<std::string, Variant> variants_;
  KernelVariant last_variant_;
  int last_device_ = -1;
  const LoadedKernel* last_kernel_ = nullptr;
};

}  // namespace

std::unique_ptr<host_ir::SegmentExecutable> make_generated_kernel(const Segment& segment, KernelAnalysis analysis) {
  return std::make_unique<GeneratedKernel>(segment, std::move(analysis));
}

}  // namespace alloy::cuda
