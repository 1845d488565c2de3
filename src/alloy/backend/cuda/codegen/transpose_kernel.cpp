// The tile-transpose kernel: a pointwise kernel whose leaves disagree on the contiguous axis (a
// permuted operand). Each block takes tiles of (the transpose axis Y, the innermost axis X): it
// reads every staged leaf's tile with consecutive threads along Y, the leaf's contiguous axis, into
// shared memory, then computes with consecutive threads along X, which the outputs and the other
// leaves walk. Both reads and the writes are coalesced, vectors of `vector` elements along each
// tensor's own contiguous axis.
//
// A staged tile is kept [x][y], in slots of `vector` elements along y (as read); slot s of row x
// is stored at s ^ (x / vector), so the reads of the compute step (a vector along x, one element of
// each of `vector` rows, the lanes of a warp on different rows) fall in different banks, and each
// row's slots are only permuted (the vector stores of the staging step stay conflict-free).
#include <set>
#include <string>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"

namespace alloy::cuda {
namespace {

class TransposeEmitter final : public KernelEmitter {
 public:
  using KernelEmitter::KernelEmitter;

  std::string run() {
    // positions and gathers address elements of rows (launch_plan gives such kernels no other shape)
    ALLOY_CHECK(!a_.has_indexing(), "a tile transpose with positions or gathers");
    emit_header();
    const int V = v_.vector, T = kTransposeTile, S = T / V, per_thread = T * S / v_.threads;
    const std::string X = std::to_string(v_.outer_rank - 1), Y = std::to_string(v_.transpose_axis);
    std::set<int> staged, direct;
    for (int k : element_leaves()) (v_.staged.at(size_t(k)) == 't' ? staged : direct).insert(k);
    // no minimum blocks an SM: on an H100 5 gained nothing, 6 and 8 spilled registers (the permuted
    // layer norm 88.9 -> 119.0 and 190.3 us; bench/results/*-issue17-session23-notes.md)
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads << ") " << name_ << "(const Params p) {\n";
    for (int k : staged)
      os_ << "  __shared__ AlloyVec<" << storage_type(a_.leaves[k]->dtype()) << ", " << V << "> t" << k << "[" << T * S << "];\n";
    os_ << "  const long long size_x = p.size[" << X << "], size_y = p.size[" << Y << "];\n";
    os_ << "  const long long tiles_x = (size_x + " << T - 1 << ") / " << T << ", tiles_y = (size_y + " << T - 1 << ") / " << T << ";\n";
    os_ << "  const long long tiles = p.numel / (size_x * size_y) * tiles_x * tiles_y;\n";
    os_ << "  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {\n";
    os_ << "    const long long x0 = tile % tiles_x * " << T << ", y0 = tile / tiles_x % tiles_y * " << T << ";\n";
    os_ << "    const int nx = (int)(size_x - x0 < " << T << " ? size_x - x0 : " << T << "), ny = (int)(size_y - y0 < " << T
        << " ? size_y - y0 : " << T << ");\n";
    emit_tile_base(X, Y);

    // the other leaves, read along x (they and the outputs walk it): with early loads issued with
    // the staged tiles' loads, before the barrier, so their latency overlaps the tiles'
    cached_ = element_leaves();
    std::vector<std::string> direct_tensors;
    for (int k : direct) direct_tensors.push_back("l" + std::to_string(k));
    auto load_direct = [&] {
      emit_leaf_arrays("L", "[" + std::to_string(per_thread) + "]", "    ", cached_);
      open_tile_loop(per_thread, "xv", "y", S, "xv * " + std::to_string(V) + " < nx && y < ny");
      emit_element_offsets(direct_tensors, X, Y);
      emit_leaf_loads("L", "[j]", "off_", "        ", direct);
      close_tile_loop();
    };

    // 1. each staged leaf's tile, read along y (its contiguous axis): loads first, then the stores
    if (!staged.empty()) {
      emit_leaf_arrays("R", "[" + std::to_string(per_thread) + "]", "    ", staged);
      open_tile_loop(per_thread, "yv", "x", S, "x < nx && yv * " + std::to_string(V) + " < ny");
      for (int k : staged) {
        std::string l = "l" + std::to_string(k), ptr = "p." + l + " + tb_" + l + " + (alloy_idx)x * (alloy_idx)p." + l + "_stride[" + X +
                                                        "] + (alloy_idx)(yv * " + std::to_string(V) + ")";
        std::string vec = "AlloyVec<" + std::string(storage_type(a_.leaves[k]->dtype())) + ", " + std::to_string(V) + ">";
        if (V > 1) os_ << "        R" << k << "[j] = *reinterpret_cast<const " << vec << "*>(" << ptr << ");\n";
        else os_ << "        R" << k << "[j].v[0] = *(" << ptr << ");\n";
      }
      close_tile_loop();
      if (v_.early_loads) load_direct();
      open_tile_loop(per_thread, "yv", "x", S, "x < nx && yv * " + std::to_string(V) + " < ny");
      for (int k : staged) os_ << "        t" << k << "[x * " << S << " + (yv ^ (x / " << V << "))] = R" << k << "[j];\n";
      close_tile_loop();
      os_ << "    __syncthreads();\n";
    }

    // 2. along x: the staged leaves from their tiles; compute and store
    if (staged.empty() || !v_.early_loads) load_direct();
    auto ops = element_ops_for(element_outputs());
    open_tile_loop(per_thread, "xv", "y", S, "xv * " + std::to_string(V) + " < nx && y < ny");
    for (int k : staged)
      os_ << "        #pragma unroll\n        for (int e = 0; e < " << V << "; ++e) L" << k << "[j].v[e] = t" << k << "[(xv * " << V
          << " + e) * " << S << " + ((y / " << V << ") ^ xv)].v[y % " << V << "];\n";
    emit_element_offsets(tensor_names(false, true, false), X, Y);
    emit_vector_stores("off_", "        ", "[j]", [&](const std::string& indent) {
      for (const Op* op : ops) emit_op(*op, "[j]", indent);
    });
    close_tile_loop();
    if (!staged.empty()) os_ << "    __syncthreads();  // the tiles are read before the next tile's are written\n";
    os_ << "  }\n}\n";
    return os_.str();
  }

 private:
  // tb_<tensor>: the offset of the tile's first element: the batch coordinates (every axis but x
  // and y, from the tile index) and the tile's corner along x and y.
  void emit_tile_base(const std::string& X, const std::string& Y) {
    std::vector<std::string> tensors = tensor_names(true, true, false);
    for (auto& t : tensors)
      os_ << "    alloy_idx tb_" << t << " = (alloy_idx)x0 * (alloy_idx)p." << t << "_stride[" << X << "] + (alloy_idx)y0 * (alloy_idx)p." << t
          << "_stride[" << Y << "];\n";
    if (v_.outer_rank <= 2) return;
    os_ << "    { alloy_idx rem = (alloy_idx)(tile / tiles_x / tiles_y);\n";
    for (int d = v_.outer_rank - 2; d >= 0; --d) {
      if (d == v_.transpose_axis) continue;
      os_ << "      alloy_idx c" << d << " = rem % (alloy_idx)p.size[" << d << "]; rem /= (alloy_idx)p.size[" << d << "];\n";
      for (auto& t : tensors) os_ << "      tb_" << t << " += c" << d << " * (alloy_idx)p." << t << "_stride[" << d << "];\n";
    }
    os_ << "    }\n";
  }

  // off_<tensor> of the element (x0 + xv * vector, y0 + y)
  void emit_element_offsets(const std::vector<std::string>& tensors, const std::string& X, const std::string& Y) {
    for (auto& t : tensors)
      os_ << "        const alloy_idx off_" << t << " = tb_" << t << " + (alloy_idx)(xv * " << v_.vector << ") * (alloy_idx)p." << t
          << "_stride[" << X << "] + (alloy_idx)y * (alloy_idx)p." << t << "_stride[" << Y << "];\n";
  }

  // The `per_thread` steps of a thread over the tile's vector slots: slot i = j * threads + tid is
  // (fast, slow) = (i % slots_per_row, i / slots_per_row); the body runs where `in_tile` holds.
  void open_tile_loop(int per_thread, const std::string& fast, const std::string& slow, int slots_per_row, const std::string& in_tile) {
    os_ << "    #pragma unroll\n    for (int j = 0; j < " << per_thread << "; ++j) {\n";
    os_ << "      const int i = j * " << v_.threads << " + (int)threadIdx.x, " << fast << " = i % " << slots_per_row << ", " << slow << " = i / "
        << slots_per_row << ";\n";
    os_ << "      if (" << in_tile << ") {\n";
  }
  void close_tile_loop() { os_ << "      }\n    }\n"; }
};

}  // namespace

std::string emit_transpose_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  return TransposeEmitter(analysis, variant, name).run();
}

}  // namespace alloy::cuda
