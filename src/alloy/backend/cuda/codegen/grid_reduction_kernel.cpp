// The grid reduction (KernelVariant::grid): single-pass reductions of a few long rows whose reduced
// axis is contiguous — a gradient norm's sum of squares of 10^8 elements to one value, [4, 25M]
// over its last axis, var_mean of a long vector. A row is split over gridDim.x blocks
// (gridDim.y = the rows); each block reduces a contiguous stretch of the row's aligned vectors
// (16-byte loads, several in flight a thread) into a partial, and the last block of the row to
// arrive combines the row's partials and stores the results.
//
// Deterministic: every thread accumulates its elements in an order fixed by its block and thread
// index; lanes, threads and blocks are combined in fixed orders (lane by lane, the block reductions'
// fixed shuffle trees, partial y by thread y % blockDim.x in increasing y, then a block reduction).
// The last block to arrive only does the combining; which block that is changes nothing in the
// arithmetic. The launch plan fixes gridDim from the sizes, the SM count and the tuning table, so
// one device and one size give the same bits on every run.
//
// Last-block combine, not a second kernel: one launch (a second kernel costs a launch and a
// dependent-launch gap of a few microseconds, a tenth of the time of a 10^8-element bf16 sum on an
// H100), and the partials are read back from L2 by one block while they are still there. The
// arrival counters live in the stream's zeroed scratch and the combining block resets its row's
// counter, as the column kernels' do.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"

namespace alloy::cuda {
namespace {

class GridEmitter final : public KernelEmitter {
 public:
  using KernelEmitter::KernelEmitter;

  std::string run() {
    emit_header();
    emit_kernel();
    return os_.str();
  }

 private:
  // One reduction's registers: `name`[V] for a sum, mean, max or min (a lane a vector element);
  // var_mean: the thread's running name_n, name_mean, name_m2 and, per step, name_s1[V], name_s2[V].
  struct Acc {
    const Op* op;
    std::string name;
    std::string ct;  // accumulator type (bool reductions accumulate in alloy_i64)
    bool welford() const { return op->kind == OpKind::var_mean; }
    // the words of a partial, as written to the workspace
    std::vector<std::string> words() const {
      if (welford()) return {name + "_n", name + "_mean", name + "_m2"};
      return {name};
    }
  };

  std::vector<Acc> accs() const {
    std::vector<Acc> out;
    for (const Op* r : a_.stages.at(0)) {
      std::string T = compute_type(r->outputs[0]->dtype());
      out.push_back(Acc{r, "acc" + std::to_string(r->outputs[0]->id), T == "bool" ? "alloy_i64" : T});
    }
    return out;
  }

  const char* combine_fn(const Acc& acc) const {
    return acc.op->kind == OpKind::max ? "AlloyMax()" : acc.op->kind == OpKind::min ? "AlloyMin()" : "AlloySum()";
  }
  std::string combine(const Acc& acc, const std::string& a, const std::string& b) const {
    if (acc.op->kind == OpKind::max) return "ax_max(" + a + ", " + b + ")";
    if (acc.op->kind == OpKind::min) return "ax_min(" + a + ", " + b + ")";
    return a + " + " + b;
  }

  // Vectors a thread loads before it uses any: up to 4, within 64 bytes (one bf16 or f32 leaf:
  // four 16-byte vectors; a dot product's two leaves: two each); within the variant's step_bytes
  // where those are more (128: up to 8).
  int unroll(const std::set<int>& leaves) const {
    int bytes = 0;
    for (int k : leaves) bytes += v_.vector * dtype_size(a_.leaves[size_t(k)]->dtype());
    int u = std::max(4, v_.step_bytes / 16);
    while (u > 1 && bytes * u > v_.step_bytes) u /= 2;
    return u;
  }

  void emit_kernel() {
    const std::vector<Acc> all = accs();
    std::vector<const Value*> targets;
    for (const Acc& acc : all) targets.push_back(acc.op->inputs[0]);
    const std::set<int> leaves = leaves_for(targets);
    const int V = v_.vector, U = unroll(leaves);
    const std::string in = "  ";
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads;
    if (v_.min_blocks > 0) os_ << ", " << v_.min_blocks;
    os_ << ") " << name_ << "(const Params p) {\n";
    os_ << in << "__shared__ double alloy_smem[2 * 99];  // two regions, alternated by consecutive block reductions\n";
    os_ << in << "__shared__ bool alloy_last;\n";
    os_ << in << "const int tid = threadIdx.x;\n";
    os_ << in << "const long long row = blockIdx.y;\n";
    std::vector<std::string> row_tensors = tensor_names(true, true, false), per_row_tensors = tensor_names(true, true, true);
    std::vector<std::string> every = row_tensors;
    every.insert(every.end(), per_row_tensors.begin(), per_row_tensors.end());
    emit_offsets("row", 0, v_.outer_rank, "ro_", every, in);
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      if (a_.at(a_.leaves[k]).per_row)
        os_ << in << compute_type(a_.leaves[k]->dtype()) << " P" << k << " = " << load_convert(a_.leaves[k]->dtype(), leaf_raw(int(k), "ro_"))
            << ";\n";
    emitted_per_row_.clear();
    emit_ready_per_row_ops(in);
    // the row's aligned vectors (edge elements: from its first aligned element), and this block's
    // contiguous stretch of them
    if (v_.edge_elements) {
      emit_edge_head("row_head", "ro_" + edge_reference().first, "p.cols", in);
      os_ << in << "const long long row_vectors = (p.cols - row_head) / " << V << ";\n";
      os_ << in << "const int row_edges = (int)(p.cols - row_vectors * " << V << ");\n";
    } else {
      os_ << in << "const long long row_head = 0, row_vectors = p.cols / " << V << ";\n";
    }
    // a whole number of warps' loads (32 vectors), so every block's warps start on the same
    // alignment as the row's first vector
    os_ << in << "const long long chunk = ((row_vectors + gridDim.x - 1) / gridDim.x + 31) / 32 * 32;\n";
    os_ << in << "const long long first = (long long)blockIdx.x * chunk;\n";
    os_ << in << "const long long last = first + chunk < row_vectors ? first + chunk : row_vectors;\n";
    for (const Acc& acc : all) {
      if (acc.welford())
        os_ << in << acc.ct << " " << acc.name << "_n = 0, " << acc.name << "_mean = 0, " << acc.name << "_m2 = 0;\n";
      else
        os_ << in << acc.ct << " " << acc.name << "[" << V << "];\n" << in << "#pragma unroll\n" << in << "for (int e = 0; e < " << V
            << "; ++e) " << acc.name << "[e] = " << identity_of(*acc.op, acc.ct) << ";\n";
    }
    emit_stretch(all, targets, leaves, U);
    emit_edges(all, targets);
    // the lanes of each sum/max/min, in order
    for (const Acc& acc : all)
      if (!acc.welford())
        os_ << in << "#pragma unroll\n" << in << "for (int e = 1; e < " << V << "; ++e) " << acc.name << "[0] = "
            << combine(acc, acc.name + "[0]", acc.name + "[e]") << ";\n";
    emit_block_combine(all, in);
    emit_grid_combine(all);
    emit_results(all, in);
    os_ << "}\n";
  }

  // This thread's vectors of the block's stretch: U of them loaded a step (all issued before any
  // is used), then each element computed and accumulated, lane e into accumulator e. var_mean: a
  // step's values less the running mean summed with their squares per lane, then merged into the
  // running (count, mean, squared deviations) once a step (Chan et al.), as the column kernels do;
  // the thread's first value is its first mean.
  void emit_stretch(const std::vector<Acc>& all, const std::vector<const Value*>& targets, const std::set<int>& leaves, int U) {
    const int V = v_.vector;
    const std::string in = "  ", body = "    ";
    std::vector<std::string> leaf_tensors;
    for (int k : leaves) {
      std::vector<std::string> names = leaf_tensor_names(k);
      leaf_tensors.insert(leaf_tensors.end(), names.begin(), names.end());
    }
    bool welford = false;
    for (const Acc& acc : all) welford |= acc.welford();
    cached_ = leaves;  // ref() reads them as L<k>[u]
    // var_mean merging every M steps (KernelVariant::welford_steps): a window of M steps, its
    // deviations from the running mean at its start summed, then one merge
    const int M = welford ? v_.welford_steps : 1;
    std::string in_steps = in;
    if (M > 1) {
      os_ << in << "for (long long w0 = first + tid; w0 < last; w0 += " << M * U << " * (long long)blockDim.x) {\n";
      in_steps = in + "  ";
      emit_window_sums(all, welford, in_steps);
      os_ << in_steps << "for (int m = 0; m < " << M << "; ++m) {\n";
      os_ << in_steps << "  const long long q0 = w0 + (long long)m * " << U << " * blockDim.x;\n";
      os_ << in_steps << "  if (q0 >= last) break;\n";
    }
    const std::string held = "[" + std::to_string(U) + "]";
    // (at `at`: the U vectors from `base` on, each where it is inside the stretch)
    auto each_vector_at = [&](const std::string& at, const std::string& base, const std::function<void(const std::string&)>& emit) {
      os_ << at << "#pragma unroll\n" << at << "for (int u = 0; u < " << U << "; ++u) {\n";
      os_ << at << "  const long long q = " << base << " + u * (long long)blockDim.x;\n" << at << "  if (q < last) {\n";
      emit(at + "    ");
      os_ << at << "  }\n" << at << "}\n";
    };
    auto each_vector = [&](const std::function<void(const std::string&)>& emit) { each_vector_at(body, "q0", emit); };
    auto load_step = [&](const std::string& at, const std::string& base, const std::string& prefix) {
      each_vector_at(at, base, [&](const std::string& ind) {
        os_ << ind << "const long long col0 = row_head + q * " << V << ";\n";
        emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", leaf_tensors, ind);
        for (auto& t : leaf_tensors) os_ << ind << "co_" << t << " += ro_" << t << ";\n";
        emit_leaf_loads(prefix, "[u]", "co_", ind, leaves);
      });
    };
    if (v_.loads_ahead) {  // the first step's vectors before the loop; each step then loads the next's
      os_ << in << "// the thread's first step; each step loads the next one's before it computes\n";
      emit_leaf_arrays("L", held, in, leaves);
      load_step(in, "first + tid", "L");
    }
    if (M == 1) os_ << in << "for (long long q0 = first + tid; q0 < last; q0 += " << U << " * (long long)blockDim.x) {\n";
    if (v_.loads_ahead) {
      emit_leaf_arrays("N", held, body, leaves);
      load_step(body, "q0 + " + std::to_string(U) + " * (long long)blockDim.x", "N");
    } else {
      emit_leaf_arrays("L", held, body, leaves);
      load_step(body, "q0", "L");
    }
    if (M == 1) emit_window_sums(all, welford, body);
    auto ops = element_ops_for(targets);
    each_vector([&](const std::string& ind) {
      if (welford) os_ << ind << "alloy_c += " << V << ";\n";
      os_ << ind << "#pragma unroll\n" << ind << "for (int e = 0; e < " << V << "; ++e) {\n";
      const std::string lane = ind + "  ";
      for (const Op* op : ops) emit_op(*op, "[u]", lane);
      for (const Acc& acc : all) {
        std::string x = "((" + acc.ct + ")" + ref(acc.op->inputs[0], "[u]") + ")";
        const std::string& a = acc.name;
        if (acc.welford())
          os_ << lane << "{ " << acc.ct << " x = " << x << "; if (" << (M > 1 ? "m == 0 && " : "") << "u == 0 && e == 0 && " << a << "_n == 0) " << a << "_mean = alloy_shift_of(x); "
              << acc.ct << " d = x - " << a << "_mean; " << a << "_s1[e] += d; " << a << "_s2[e] += d * d; }\n";
        else
          os_ << lane << a << "[e] = " << combine(acc, a + "[e]", x) << ";\n";
      }
      os_ << ind << "}\n";
    });
    if (M > 1) os_ << in_steps << "}\n";  // the window's steps
    for (const Acc& acc : all) {
      if (!acc.welford()) continue;
      const std::string& a = acc.name;
      const std::string& T = acc.ct;
      os_ << body << "{\n";
      os_ << body << "  " << T << " s1 = " << a << "_s1[0], s2 = " << a << "_s2[0];\n";
      os_ << body << "  #pragma unroll\n" << body << "  for (int e = 1; e < " << V << "; ++e) { s1 += " << a << "_s1[e]; s2 += " << a
          << "_s2[e]; }\n";
      os_ << body << "  const " << T << " c = (" << T << ")alloy_c, shift = s1 / c;\n";
      os_ << body << "  " << T << " m2_c = s2 - s1 * shift;\n";
      os_ << body << "  if (m2_c < " << T << "(0)) m2_c = " << T << "(0);  // rounding (NaN stays)\n";
      os_ << body << "  alloy_welford_merge(" << a << "_n, " << a << "_mean, " << a << "_m2, c, " << a << "_mean + shift, m2_c);\n";
      os_ << body << "}\n";
    }
    if (v_.loads_ahead && !leaves.empty()) {  // the next step's vectors become this one's
      os_ << body << "#pragma unroll\n" << body << "for (int u = 0; u < " << U << "; ++u) {";
      for (int k : leaves) os_ << " L" << k << "[u] = N" << k << "[u];";
      os_ << " }\n";
    }
    os_ << in << "}\n";
    cached_.clear();
  }

  // A var_mean's sums of a step (or window of steps): the elements counted, and per lane the
  // deviations from the running mean and their squares.
  void emit_window_sums(const std::vector<Acc>& all, bool welford, const std::string& in) {
    if (welford) os_ << in << "float alloy_c = 0;\n";
    for (const Acc& acc : all)
      if (acc.welford())
        os_ << in << acc.ct << " " << acc.name << "_s1[" << v_.vector << "] = {}, " << acc.name << "_s2[" << v_.vector << "] = {};\n";
  }

  // Edge elements (KernelVariant::edge_elements): the row's elements before its first aligned
  // vector and after its last whole one, one a thread of the row's first block.
  void emit_edges(const std::vector<Acc>& all, const std::vector<const Value*>& targets) {
    if (!v_.edge_elements) return;
    const std::string in = "  ";
    std::vector<std::string> row_tensors = tensor_names(true, true, false);
    os_ << in << "if (blockIdx.x == 0 && tid < row_edges) {\n";
    os_ << in << "  const long long col0 = tid < row_head ? (long long)tid : row_vectors * " << v_.vector << " + tid;\n";
    emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", row_tensors, in + "  ");
    for (auto& t : row_tensors) os_ << in << "  co_" << t << " += ro_" << t << ";\n";
    auto ops = element_ops_for(targets);
    emit_edge_element("co_", in + "  ", leaves_for(targets), [&](const std::string& ind) {
      for (const Op* op : ops) emit_op(*op, "", ind);
      for (const Acc& acc : all) {
        std::string x = "((" + acc.ct + ")" + ref(acc.op->inputs[0], "") + ")";
        const std::string& a = acc.name;
        if (acc.welford())
          os_ << ind << "alloy_welford_merge(" << a << "_n, " << a << "_mean, " << a << "_m2, (" << acc.ct << ")1, " << x << ", ("
              << acc.ct << ")0);\n";
        else
          os_ << ind << a << "[0] = " << combine(acc, a + "[0]", x) << ";\n";
      }
    });
    os_ << in << "}\n";
  }

  // Each reduction's thread values over the block (fixed shuffle trees); every thread gets them.
  void emit_block_combine(const std::vector<Acc>& all, const std::string& in) {
    for (const Acc& acc : all) {
      std::string smem = "reinterpret_cast<" + acc.ct + "*>(" + smem_region() + ")";
      if (acc.welford())
        os_ << in << "alloy_block_welford(" << acc.name << "_n, " << acc.name << "_mean, " << acc.name << "_m2, " << smem << ");\n";
      else
        os_ << in << acc.name << "[0] = alloy_block_reduce(" << acc.name << "[0], " << combine_fn(acc) << ", " << smem << ");\n";
    }
  }

  // A row split over several blocks: each writes its partial to the workspace (word w of row r,
  // block b at ws + w * rows * gridDim.x, element r * gridDim.x + b), and the row's last block to
  // arrive combines them: thread t merges partials t, t + blockDim.x, ... in that order (four
  // loaded from L2 at once, then merged), then the block combines its threads as before.
  void emit_grid_combine(const std::vector<Acc>& all) {
    const std::string in = "  ", b = "    ";
    os_ << in << "if (gridDim.x > 1) {\n";
    int word = 0;
    for (const Acc& acc : all)
      for (const std::string& w : acc.words())
        os_ << b << acc.ct << "* " << w << "_ws = reinterpret_cast<" << acc.ct << "*>(p.ws + (long long)" << word++
            << " * p.rows * gridDim.x) + row * gridDim.x;\n";
    os_ << b << "if (tid == 0) {\n";
    for (const Acc& acc : all)
      for (const std::string& w : acc.words()) os_ << b << "  " << w << "_ws[blockIdx.x] = " << slot(acc, w) << ";\n";
    os_ << b << "}\n";
    os_ << b << "__syncthreads();\n";  // one fence a block, by the thread that stored (alloy_grid_barrier's pattern)
    os_ << b << "if (tid == 0) {\n" << b << "  __threadfence();\n" << b << "  alloy_last = atomicAdd(p.counters + row, 1u) == gridDim.x - 1;\n"
        << b << "  if (alloy_last) __threadfence();  // the others' partials acquired, for every thread past the barrier\n" << b << "}\n";
    os_ << b << "__syncthreads();\n" << b << "if (!alloy_last) return;\n";
    for (const Acc& acc : all) {
      if (acc.welford()) os_ << b << acc.name << "_n = 0; " << acc.name << "_mean = 0; " << acc.name << "_m2 = 0;\n";
      else os_ << b << acc.name << "[0] = " << identity_of(*acc.op, acc.ct) << ";\n";
    }
    constexpr int kGather = 4;
    os_ << b << "for (unsigned y0 = tid; y0 < gridDim.x; y0 += " << kGather << " * blockDim.x) {\n";
    for (const Acc& acc : all)
      for (const std::string& w : acc.words()) os_ << b << "  " << acc.ct << " " << w << "_g[" << kGather << "];\n";
    os_ << b << "  #pragma unroll\n" << b << "  for (int u = 0; u < " << kGather << "; ++u) {\n";
    os_ << b << "    const unsigned y = y0 + u * blockDim.x;\n";
    for (const Acc& acc : all)
      for (const std::string& w : acc.words()) {
        std::string none = acc.welford() ? acc.ct + "(0)" : identity_of(*acc.op, acc.ct);
        os_ << b << "    " << w << "_g[u] = y < gridDim.x ? __ldcg(" << w << "_ws + y) : " << none << ";\n";
      }
    os_ << b << "  }\n";
    os_ << b << "  #pragma unroll\n" << b << "  for (int u = 0; u < " << kGather << "; ++u) {\n";
    os_ << b << "    if (y0 + u * blockDim.x >= gridDim.x) break;\n";
    for (const Acc& acc : all) {
      const std::string& a = acc.name;
      if (acc.welford())
        os_ << b << "    alloy_welford_merge(" << a << "_n, " << a << "_mean, " << a << "_m2, " << a << "_n_g[u], " << a << "_mean_g[u], " << a
            << "_m2_g[u]);\n";
      else
        os_ << b << "    " << a << "[0] = " << combine(acc, a + "[0]", a + "_g[u]") << ";\n";
    }
    os_ << b << "  }\n" << b << "}\n";
    emit_block_combine(all, b);
    os_ << b << "if (tid == 0) p.counters[row] = 0;  // for the next launch on this stream\n";
    os_ << in << "}\n";
  }

  // The register holding partial word `w` of `acc`.
  static std::string slot(const Acc& acc, const std::string& w) { return acc.welford() ? w : w + "[0]"; }

  // The reductions' results, the per-row values computed from them, and the row's stores.
  void emit_results(const std::vector<Acc>& all, const std::string& in) {
    for (const Acc& acc : all) {
      const Op& r = *acc.op;
      std::string T = compute_type(r.outputs[0]->dtype());
      if (acc.welford()) {
        std::string var = acc.name + "_m2 / (" + T + ")fmax(0.0, p.count - " + std::to_string(r.real_attr("correction")) + ")";
        os_ << in << T << " v" << r.outputs[0]->id << " = " << round_to_dtype(r.outputs[0]->dtype(), var) << ";\n";
        os_ << in << T << " v" << r.outputs[1]->id << " = " << round_to_dtype(r.outputs[1]->dtype(), acc.name + "_mean") << ";\n";
      } else {
        std::string value = "(" + T + ")" + acc.name + "[0]";
        if (r.kind == OpKind::mean) value = "(" + value + " / (" + T + ")p.count)";
        os_ << in << T << " v" << r.outputs[0]->id << " = " << round_to_dtype(r.outputs[0]->dtype(), value) << ";\n";
      }
      for (Value* out : r.outputs) emitted_per_row_.insert(out);
    }
    emit_ready_per_row_ops(in);
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      os_ << in << "if (tid == 0) p.o" << k << "[ro_o" << k << "] = " << store_convert(a_.outputs[k]->dtype(), ref(a_.outputs[k], ""))
          << ";\n";
  }

  // Block reductions alternate between two shared regions (see alloy_block_reduce).
  int reductions_ = 0;
  std::string smem_region() { return "alloy_smem + " + std::to_string(99 * (reductions_++ % 2)); }
};

}  // namespace

std::string emit_grid_reduction_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  return GridEmitter(analysis, variant, name).run();
}

}  // namespace alloy::cuda
