// The column kernel: single-pass reductions over outer axes (bias gradients, sums over dim 0),
// a block of threads along the kept axes by threads along the reduced axes, split further over
// blocks whose partials the last block of each column tile combines.
#include <functional>
#include <string>
#include <vector>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"

namespace alloy::cuda {
namespace {

class ColumnEmitter final : public KernelEmitter {
 public:
  using KernelEmitter::KernelEmitter;

  std::string run() {
    // positions and gathers address elements of rows (launch_plan gives such kernels no other shape)
    ALLOY_CHECK(!a_.has_indexing(), "a column kernel with positions or gathers");
    emit_header();
    emit_column_kernel();
    return os_.str();
  }

 private:
  // `name` is the register array prefix; words: 1 (sum, mean, max, min) or 3 (var_mean: n, mean, m2).
  struct ColumnAcc {
    const Op* op;
    std::string name;
    std::string ct;
    std::vector<std::string> words;  // register arrays, one per word
  };

  std::vector<ColumnAcc> column_accs() const {
    std::vector<ColumnAcc> accs;
    for (const Op* r : a_.stages.at(0)) {
      ColumnAcc acc{r, "acc" + std::to_string(r->outputs[0]->id), reduction_ct(*r), {}};
      if (r->kind == OpKind::var_mean) acc.words = {acc.name + "_n", acc.name + "_mean", acc.name + "_m2"};
      else acc.words = {acc.name};
      accs.push_back(acc);
    }
    return accs;
  }

  static std::string reduction_ct(const Op& r) {
    std::string T = compute_type(r.outputs[0]->dtype());
    return T == "bool" ? "alloy_i64" : T;
  }


  void emit_column_identity(const std::vector<ColumnAcc>& accs, const std::string& in, bool declare) {
    int V = v_.vector;
    for (auto& acc : accs)
      for (auto& w : acc.words) {
        std::string init = acc.op->kind == OpKind::var_mean ? acc.ct + "(0)" : identity_of(*acc.op, acc.ct);
        if (declare) os_ << in << acc.ct << " " << w << "[" << V << "];\n";
        os_ << in << "#pragma unroll\n" << in << "for (int e = 0; e < " << V << "; ++e) " << w << "[e] = " << init << ";\n";
      }
  }

  // acc[e] = combine(acc[e], sources...) where source(w) is the text of word w's other value.
  void emit_column_merge(const ColumnAcc& acc, const std::string& in, const std::function<std::string(int)>& source) {
    const std::string& a = acc.words[0];
    switch (acc.op->kind) {
      case OpKind::max: os_ << in << a << "[e] = ax_max(" << a << "[e], " << source(0) << ");\n"; break;
      case OpKind::min: os_ << in << a << "[e] = ax_min(" << a << "[e], " << source(0) << ");\n"; break;
      case OpKind::var_mean:
        os_ << in << "alloy_welford_merge(" << acc.words[0] << "[e], " << acc.words[1] << "[e], " << acc.words[2] << "[e], " << source(0)
            << ", " << source(1) << ", " << source(2) << ");\n";
        break;
      default: os_ << in << a << "[e] += " << source(0) << ";\n";
    }
  }

  // Tree-combines the block's partials across its reduced-axis threads; thread ty == 0 ends with
  // the block's result in registers.
  void emit_column_block_combine(const std::vector<ColumnAcc>& accs, const std::string& in) {
    int TY = v_.threads / v_.tile_x, V = v_.vector;
    if (TY == 1) return;
    // slot (ty, e, tx): consecutive threads of a warp touch consecutive words
    std::string slot = "((ty * " + std::to_string(V) + " + e) * " + std::to_string(v_.tile_x) + " + tx)";
    std::string partner = "(((ty + s) * " + std::to_string(V) + " + e) * " + std::to_string(v_.tile_x) + " + tx)";
    os_ << in << "#pragma unroll\n" << in << "for (int e = 0; e < " << V << "; ++e) {\n";
    for (auto& acc : accs)
      for (auto& w : acc.words) os_ << in << "  " << w << "_s[" << slot << "] = " << w << "[e];\n";
    os_ << in << "}\n" << in << "__syncthreads();\n";
    os_ << in << "for (int s = " << TY / 2 << "; s > 0; s >>= 1) {\n";
    os_ << in << "  if (ty < s) {\n" << in << "    #pragma unroll\n" << in << "    for (int e = 0; e < " << V << "; ++e) {\n";
    for (auto& acc : accs) {
      emit_column_merge(acc, in + "      ", [&](int w) { return acc.words[w] + "_s[" + partner + "]"; });
      for (auto& w : acc.words) os_ << in << "      " << w << "_s[" << slot << "] = " << w << "[e];\n";
    }
    os_ << in << "    }\n" << in << "  }\n" << in << "  __syncthreads();\n" << in << "}\n";
  }

  // What the parts of a column kernel share.
  struct ColumnKernel {
    int tx = 32, ty = 8;
    std::vector<ColumnAcc> accs;
    std::vector<int> per_row_leaves;
    bool welford = false;            // some var_mean: a count of reduced indices per thread
    std::string count_type = "float";
  };

  // Element e of a thread's vector runs along the innermost kept axis.
  std::string along_kept(const std::string& tensor) const {
    int R = v_.outer_rank;
    return (R > 0 && v_.vector > 1) ? " + e * p." + tensor + "_stride[" + std::to_string(R - 1) + "]" : std::string();
  }

  void emit_column_per_row_registers(const ColumnKernel& ck, const std::string& indent) {
    for (int k : ck.per_row_leaves) os_ << indent << compute_type(a_.leaves[k]->dtype()) << " P" << k << " = PV" << k << "[e];\n";
  }

  void emit_column_kernel() {
    ColumnKernel ck;
    ck.tx = v_.tile_x;
    ck.ty = v_.threads / v_.tile_x;
    ck.accs = column_accs();
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      if (a_.at(a_.leaves[k]).per_row) ck.per_row_leaves.push_back(int(k));
    for (auto& acc : ck.accs)
      if (acc.op->kind == OpKind::var_mean) {
        ck.welford = true;
        if (acc.ct == "double") ck.count_type = "double";
      }
    // var_mean's kernels run close to 64 registers a thread: held there, so an SM keeps 1024 threads
    // (the loads in flight are what a column kernel's speed depends on)
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads;
    if (ck.welford && v_.threads <= 256) os_ << ", " << 1024 / v_.threads;
    os_ << ") " << name_ << "(const Params p) {\n";
    emit_column_setup(ck);
    emit_column_pass(ck);
    emit_column_block_combine(ck.accs, "  ");
    emit_column_grid_combine(ck);
    emit_column_results(ck);
    os_ << "}\n";
  }

  // Shared arrays, this thread's kept index, per-column leaves, accumulators.
  void emit_column_setup(const ColumnKernel& ck) {
    const int V = v_.vector;
    const std::string in = "  ";
    if (ck.ty > 1)
      for (auto& acc : ck.accs)
        for (auto& w : acc.words) os_ << in << "__shared__ " << acc.ct << " " << w << "_s[" << ck.ty * ck.tx * V << "];\n";
    os_ << in << "__shared__ bool alloy_last;\n";
    if (v_.ty_fast) os_ << in << "const int ty = threadIdx.x % " << ck.ty << ", tx = threadIdx.x / " << ck.ty << ";\n";
    else os_ << in << "const int tx = threadIdx.x % " << ck.tx << ", ty = threadIdx.x / " << ck.tx << ";\n";
    os_ << in << "const long long k0 = ((long long)blockIdx.x * " << ck.tx << " + tx) * " << V << ";\n";
    os_ << in << "const bool active = k0 < p.rows;\n";
    std::vector<std::string> all = tensor_names(true, true, false), per_row_tensors = tensor_names(true, true, true);
    all.insert(all.end(), per_row_tensors.begin(), per_row_tensors.end());
    emit_offsets("k0", 0, v_.outer_rank, "ro_", all, in);
    for (int k : ck.per_row_leaves) {
      os_ << in << compute_type(a_.leaves[k]->dtype()) << " PV" << k << "[" << V << "] = {};\n";
      os_ << in << "if (active) {\n" << in << "  #pragma unroll\n" << in << "  for (int e = 0; e < " << V << "; ++e) PV" << k << "[e] = "
          << load_convert(a_.leaves[k]->dtype(), leaf_raw(k, "ro_", [&](const std::string& t) { return along_kept(t); })) << ";\n" << in << "}\n";
    }
    emit_column_identity(ck.accs, in, true);
    if (ck.welford) os_ << in << ck.count_type << " alloy_n = 0;\n";
  }

  // The pass over this thread's share of the reduced axes, `unroll` reduced indices a step (their
  // loads all issued before any is used), storing per-element outputs as it goes.
  void emit_column_pass(const ColumnKernel& ck) {
    const std::string in = "  ";
    std::vector<const Value*> targets = element_outputs();
    for (auto& acc : ck.accs) targets.push_back(acc.op->inputs[0]);
    std::set<int> leaves = leaves_for(targets);
    // loads a thread issues before it uses any: 4, or up to 16 while they stay within 64 bytes
    // (narrow vectors: a var_mean's 2 bf16s a load would leave too few bytes in flight)
    int load_bytes = 0;
    for (int k : leaves) load_bytes += v_.vector * dtype_size(a_.leaves[size_t(k)]->dtype());
    int unroll = 4;
    while (unroll < 16 && load_bytes * unroll * 2 <= 64) unroll *= 2;
    std::vector<std::string> leaf_tensors, output_tensors;
    for (int k : leaves) {
      std::vector<std::string> leaf = leaf_tensor_names(k);
      leaf_tensors.insert(leaf_tensors.end(), leaf.begin(), leaf.end());
    }
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      if (!a_.at(a_.outputs[k]).per_row) output_tensors.push_back("o" + std::to_string(k));
    cached_ = leaves;  // ref() reads them as L<k>[u]
    os_ << in << "if (active) {\n";
    os_ << in << "  const long long alloy_step = (long long)gridDim.y * " << ck.ty << ";\n";
    os_ << in << "  for (long long r0 = (long long)blockIdx.y * " << ck.ty << " + ty; r0 < p.cols; r0 += " << unroll << " * alloy_step) {\n";
    std::string body = in + "    ";
    emit_leaf_arrays("L", "[" + std::to_string(unroll) + "]", body, leaves);
    auto unrolled = [&](const std::function<void(const std::string&)>& emit) {
      os_ << body << "#pragma unroll\n" << body << "for (int u = 0; u < " << unroll << "; ++u) {\n";
      os_ << body << "  const long long r = r0 + u * alloy_step;\n" << body << "  if (r < p.cols) {\n";
      emit(body + "    ");
      os_ << body << "  }\n" << body << "}\n";
    };
    unrolled([&](const std::string& indent) {
      emit_offsets("r", v_.outer_rank, v_.inner_rank, "co_", leaf_tensors, indent);
      for (auto& t : leaf_tensors) os_ << indent << "co_" << t << " += ro_" << t << ";\n";
      emit_leaf_loads("L", "[u]", "co_", indent, leaves);
    });
    auto ops = element_ops_for(targets);
    // var_mean a step at a time: the step's count, and per element the sum of the values less the
    // running mean and of their squares, merged into the running (count, mean, squared deviations)
    // once a step (Chan et al.). Three operations an element, no division. The first value a thread
    // reads is its first mean (count 0), so every step's values are taken less a mean of values
    // already read: the squares' rounding is within a few ulps of what the merge adds.
    if (ck.welford) os_ << body << ck.count_type << " alloy_c = 0;\n";
    for (auto& acc : ck.accs)
      if (acc.op->kind == OpKind::var_mean)
        os_ << body << acc.ct << " " << acc.name << "_s1[" << v_.vector << "] = {}, " << acc.name << "_s2[" << v_.vector << "] = {};\n";
    unrolled([&](const std::string& indent) {
      emit_offsets("r", v_.outer_rank, v_.inner_rank, "co_", output_tensors, indent);
      for (auto& t : output_tensors) os_ << indent << "co_" << t << " += ro_" << t << ";\n";
      if (ck.welford) os_ << indent << "alloy_c += 1;\n";
      emit_vector_stores("co_", indent, "[u]", [&](const std::string& inner) {
        emit_column_per_row_registers(ck, inner);
        emitted_per_row_.clear();
        emit_ready_per_row_ops(inner);
        for (const Op* op : ops) emit_op(*op, "[u]", inner);
        for (auto& acc : ck.accs) {
          std::string x = "((" + acc.ct + ")" + ref(acc.op->inputs[0], "[u]") + ")";
          const std::string &a = acc.name, &mean = acc.words[1];
          if (acc.op->kind == OpKind::var_mean)
            os_ << inner << "{ " << acc.ct << " x = " << x << "; if (u == 0 && alloy_n == 0) " << mean << "[e] = alloy_shift_of(x); " << acc.ct << " d = x - "
                << mean << "[e]; " << a << "_s1[e] += d; " << a << "_s2[e] += d * d; }\n";
          else
            emit_column_merge(acc, inner, [&](int) { return x; });
        }
      });
    });
    for (auto& acc : ck.accs) {
      if (acc.op->kind != OpKind::var_mean) continue;
      const std::string& a = acc.name;
      const std::string& T = acc.ct;
      os_ << body << "#pragma unroll\n" << body << "for (int e = 0; e < " << v_.vector << "; ++e) {\n";
      os_ << body << "  const " << T << " c = (" << T << ")alloy_c, shift = " << a << "_s1[e] / c;\n";
      os_ << body << "  " << T << " m2_c = " << a << "_s2[e] - " << a << "_s1[e] * shift;\n";
      os_ << body << "  if (m2_c < " << T << "(0)) m2_c = " << T << "(0);  // rounding (NaN stays)\n";
      os_ << body << "  " << T << " n = (" << T << ")alloy_n;\n";
      os_ << body << "  alloy_welford_merge(n, " << acc.words[1] << "[e], " << acc.words[2] << "[e], c, " << acc.words[1] << "[e] + shift, m2_c);\n";
      os_ << body << "}\n";
    }
    if (ck.welford) os_ << body << "alloy_n += alloy_c;\n";
    cached_.clear();
    os_ << in << "  }\n" << in << "}\n";
    for (auto& acc : ck.accs)
      if (acc.op->kind == OpKind::var_mean)
        os_ << in << "#pragma unroll\n" << in << "for (int e = 0; e < " << v_.vector << "; ++e) " << acc.words[0] << "[e] = (" << acc.ct
            << ")alloy_n;\n";
  }

  // Several blocks along the reduced axes: partials meet in the workspace, and the last block of
  // the column tile combines them (and leaves its counter at zero for the next launch).
  void emit_column_grid_combine(const ColumnKernel& ck) {
    const int V = v_.vector;
    const std::string in = "  ";
    os_ << in << "if (gridDim.y > 1) {\n";
    int word = 0;
    for (auto& acc : ck.accs)
      for (auto& w : acc.words)
        os_ << in << "  " << acc.ct << "* " << w << "_ws = reinterpret_cast<" << acc.ct << "*>(p.ws + (long long)" << word++
            << " * gridDim.y * p.rows);\n";
    os_ << in << "  if (ty == 0 && active) {\n" << in << "    #pragma unroll\n" << in << "    for (int e = 0; e < " << V << "; ++e) {\n";
    for (auto& acc : ck.accs)
      for (auto& w : acc.words) os_ << in << "      " << w << "_ws[(long long)blockIdx.y * p.rows + k0 + e] = " << w << "[e];\n";
    os_ << in << "    }\n" << in << "  }\n";
    os_ << in << "  __syncthreads();\n";  // the block's stores before thread 0's fence (alloy_grid_barrier's pattern)
    os_ << in << "  if (threadIdx.x == 0) {\n" << in << "    __threadfence();\n"
        << in << "    alloy_last = atomicAdd(p.counters + blockIdx.x, 1u) == gridDim.y - 1;\n"
        << in << "    if (alloy_last) __threadfence();  // the others' partials acquired, for every thread past the barrier\n"
        << in << "  }\n";
    os_ << in << "  __syncthreads();\n" << in << "  if (!alloy_last) return;\n";
    emit_column_identity(ck.accs, in + "  ", false);
    // kGather partials a thread loaded at once (L2 reads, not through L1: other blocks wrote
    // them), then merged: the combine costs about one L2 latency per kGather partials, not one each
    constexpr int kGather = 4;
    os_ << in << "  if (active) {\n" << in << "    for (unsigned y0 = ty; y0 < gridDim.y; y0 += " << kGather * ck.ty << ") {\n";
    for (auto& acc : ck.accs)
      for (auto& w : acc.words) os_ << in << "      " << acc.ct << " " << w << "_g[" << kGather << "][" << V << "];\n";
    os_ << in << "      #pragma unroll\n" << in << "      for (int u = 0; u < " << kGather << "; ++u) {\n";
    os_ << in << "        const unsigned y = y0 + u * " << ck.ty << ";\n";
    os_ << in << "        #pragma unroll\n" << in << "        for (int e = 0; e < " << V << "; ++e) {\n";
    for (auto& acc : ck.accs)
      for (size_t w = 0; w < acc.words.size(); ++w) {
        std::string none = acc.op->kind == OpKind::var_mean ? acc.ct + "(0)" : identity_of(*acc.op, acc.ct);
        os_ << in << "          " << acc.words[w] << "_g[u][e] = y < gridDim.y ? __ldcg(" << acc.words[w]
            << "_ws + (long long)y * p.rows + k0 + e) : " << none << ";\n";
      }
    os_ << in << "        }\n" << in << "      }\n";
    os_ << in << "      #pragma unroll\n" << in << "      for (int u = 0; u < " << kGather << "; ++u) {\n";
    os_ << in << "        #pragma unroll\n" << in << "        for (int e = 0; e < " << V << "; ++e) {\n";
    for (auto& acc : ck.accs)
      emit_column_merge(acc, in + "          ", [&](int w) { return acc.words[w] + "_g[u][e]"; });
    os_ << in << "        }\n" << in << "      }\n" << in << "    }\n" << in << "  }\n";
    emit_column_block_combine(ck.accs, in + "  ");
    os_ << in << "  if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;\n" << in << "}\n";
  }

  // The results, the values computed from them, and the per-column stores.
  void emit_column_results(const ColumnKernel& ck) {
    const std::string in = "  ";
    os_ << in << "if (ty == 0 && active) {\n" << in << "  #pragma unroll\n" << in << "  for (int e = 0; e < " << v_.vector << "; ++e) {\n";
    std::string fin = in + "    ";
    emit_column_per_row_registers(ck, fin);
    emitted_per_row_.clear();
    for (auto& acc : ck.accs) {
      const Op& r = *acc.op;
      std::string T = compute_type(r.outputs[0]->dtype());
      if (r.kind == OpKind::var_mean) {
        std::string var = acc.words[2] + "[e] / (" + T + ")fmax(0.0, p.count - " + std::to_string(r.real_attr("correction")) + ")";
        os_ << fin << T << " v" << r.outputs[0]->id << " = " << round_to_dtype(r.outputs[0]->dtype(), var) << ";\n";
        os_ << fin << T << " v" << r.outputs[1]->id << " = " << round_to_dtype(r.outputs[1]->dtype(), acc.words[1] + "[e]") << ";\n";
      } else {
        std::string value = "(" + T + ")" + acc.words[0] + "[e]";
        if (r.kind == OpKind::mean) value = "(" + value + " / (" + T + ")p.count)";
        os_ << fin << T << " v" << r.outputs[0]->id << " = " << round_to_dtype(r.outputs[0]->dtype(), value) << ";\n";
      }
      for (Value* out : r.outputs) emitted_per_row_.insert(out);
    }
    emit_ready_per_row_ops(fin);
    for (size_t k = 0; k < a_.outputs.size(); ++k) {
      if (!a_.at(a_.outputs[k]).per_row) continue;
      std::string o = "o" + std::to_string(k);
      os_ << fin << "p." << o << "[ro_" << o << along_kept(o) << "] = " << store_convert(a_.outputs[k]->dtype(), ref(a_.outputs[k], ""))
          << ";\n";
    }
    os_ << in << "  }\n" << in << "}\n";
  }
};

}  // namespace

std::string emit_column_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  return ColumnEmitter(analysis, variant, name).run();
}

}  // namespace alloy::cuda
