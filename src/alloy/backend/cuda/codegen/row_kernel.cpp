// The row kernel (reductions and normalizations): one block (or one warp) per row of the kept
// axes; each reduction stage a pass over the row ended by a block reduction, the per-row values
// after it, then a final pass storing the per-element outputs. Rows that fit stay in registers.
// An inner-outer kernel (inner_outer_kernel.cpp) is this kernel with its column work added.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/kernel_emitter.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {
namespace {

class RowEmitter final : public KernelEmitter {
 public:
  using KernelEmitter::KernelEmitter;

  std::string run() {
    element_offsets_ = "co_";
    emit_header();
    emit_row_kernel();
    return os_.str();
  }

  // KernelVariant::shared_row: the bytes of the held leaves in shared memory.
  size_t shared_row_bytes() {
    if (!v_.shared_row || v_.items == 0) return 0;
    plan_value_cache();
    detect_online_softmax();
    plan_cached_leaves();
    size_t bytes = 0;
    for (int k : cached_) bytes += size_t(v_.items) * v_.threads * v_.vector * dtype_size(a_.leaves[k]->dtype());
    return bytes;
  }

 private:
  // Row kernels with the row in registers fuse softmax's two passes (max, then the sum of
  // exp(x - max)) into one: each thread keeps its own max and sums exp against it; then the row's
  // max and the sum of each thread's sum rescaled to it; the exp values held in registers are
  // rescaled by exp(thread max - row max) where read later. Taken only when the max feeds nothing
  // but exp(x - max) (through views), and that exp is held in registers from the sum's pass.
  void detect_online_softmax() {
    online_stage_ = -1;
    online_exp_ = nullptr;
    if (v_.streaming_online) {  // nothing held: the max and the sum share one pass
      std::vector<OnlineSoftmaxStage> found = online_softmax_stages(a_);
      if (found.empty()) internal_error("a streaming online row kernel without a max, then a sum of exp(x - max)");
      online_stage_ = found[0].stage;
      online_chain_ = found[0].chain;
      return;
    }
    // (edge elements are recomputed in later passes: none hold exp values to rescale)
    if (v_.items == 0 || v_.edge_elements) return;
    for (const OnlineSoftmaxStage& o : online_softmax_stages(a_)) {
      if (o.max_read_elsewhere) continue;  // later values would read the thread's max
      auto held = cache_pass_.find(o.exp_value);
      bool cached = held != cache_pass_.end() && held->second == o.stage + 1;
      if (!cached && cache_pass_.count(o.exp_value)) continue;
      online_stage_ = o.stage;
      online_exp_ = cached ? o.exp_value : nullptr;  // not held: later passes recompute it from the row max
      online_chain_ = o.chain;
      return;
    }
  }

  // Values computed by costly ops (exp, tanh, ...) in one pass over the row and read again by a
  // later pass are kept in registers instead of recomputed (softmax's exp).
  void plan_value_cache() {
    cache_pass_.clear();
    if (v_.items == 0 || v_.recompute || v_.shared_row) return;
    static const std::set<OpKind> costly = {OpKind::exp, OpKind::log, OpKind::tanh, OpKind::sigmoid, OpKind::silu,
                                            OpKind::erf, OpKind::gelu, OpKind::pow, OpKind::gelu_backward};
    std::map<const Value*, int> first_pass;
    int budget = 64 / (v_.items * v_.vector);  // cached values that fit in about 64 registers
    for (int pass = 0; pass <= int(a_.stages.size()); ++pass) {
      current_pass_ = pass;
      for (const Op* op : element_ops_for(pass_targets(pass))) {
        const Value* v = op->outputs[0];
        auto it = first_pass.find(v);
        if (it == first_pass.end()) first_pass[v] = pass;
        else if (it->second < pass && costly.count(op->kind) && !cache_pass_.count(v) && budget-- > 0) cache_pass_[v] = it->second;
      }
    }
    current_pass_ = 0;
  }

  std::vector<const Value*> pass_targets(int pass) const {
    if (pass == int(a_.stages.size())) return final_targets();
    std::vector<const Value*> targets;
    for (const Op* r : a_.stages[pass]) targets.push_back(r->inputs[0]);
    return targets;
  }

  // The final pass computes the values stored per element and the outer reductions' inputs.
  std::vector<const Value*> final_targets() const {
    std::vector<const Value*> targets = element_outputs();
    for (const Op* r : a_.outer_reductions) targets.push_back(r->inputs[0]);
    return targets;
  }

  struct Acc {
    const Op* op;
    std::string name;  // register prefix
    const char* ct;
  };

  // KernelVariant::streaming_online: stage online_stage_'s max and the next stage's sum of
  // exp(x - max) in one pass over the row. Each thread keeps its running max M and S, the sum of
  // exp(x - g) for g its max (0 while that is -inf, so -inf elements add 0 as against the row's
  // max); per vector, the vector's max first, S rescaled by exp(g - g') when g grows, then the
  // vector's exps against g'. The pairs then merge over the block (as online softmax's), and the
  // row's max replaces the thread's in every value read after these stages.
  void emit_streaming_online(const std::string& in, const Acc& top, const Acc& total) {
    const Value* m = top.op->outputs[0];
    const Value* x = top.op->inputs[0];
    const Value* e = total.op->inputs[0];
    const std::string& M = top.name;
    const std::string& S = total.name;
    const int V = v_.vector;
    std::vector<std::string> row_tensors = tensor_names(true, true, false);
    std::set<int> leaves = leaves_for({x, e});
    os_ << in << "{\n";
    const std::string b = in + "  ";
    os_ << b << "float alloy_g = 0.0f, alloy_vmax;\n";
    os_ << b << "float v" << m->id << " = 0.0f;\n";
    for (const Value* c : online_chain_) os_ << b << "float v" << c->id << " = 0.0f;\n";
    // the max of the elements the loop body emitted (`max_ops`), then the sum of their exps
    auto vector_step = [&](const std::string& ind, int elements) {
      auto each = [&](const std::function<void(const std::string&)>& body) {
        if (elements > 1) {
          os_ << ind << "#pragma unroll\n" << ind << "for (int e = 0; e < " << elements << "; ++e) {\n";
          body(ind + "  ");
          os_ << ind << "}\n";
        } else {
          os_ << ind << "{\n" << ind << "  const int e = 0;\n";
          body(ind + "  ");
          os_ << ind << "}\n";
        }
      };
      os_ << ind << "alloy_vmax = -__uint_as_float(0x7f800000u);  // -inf\n";
      each([&](const std::string& i2) {
        for (const Op* op : element_ops_for({x})) emit_op(*op, "", i2);
        os_ << i2 << "alloy_vmax = ax_max(alloy_vmax, (float)" << ref(x, "") << ");\n";
      });
      os_ << ind << "{\n";
      os_ << ind << "  const float top = ax_max(" << M << ", alloy_vmax), g = top < -3.402823466e38f ? 0.0f : top;\n";
      os_ << ind << "  if (g != alloy_g) { " << S << " = " << S << " == 0.0f ? 0.0f : " << S << " * ax_exp(alloy_g - g); alloy_g = g; }\n";
      os_ << ind << "  " << M << " = top;\n" << ind << "}\n";
      os_ << ind << "v" << m->id << " = alloy_g;\n";
      const Value* previous = m;
      for (auto it = online_chain_.rbegin(); it != online_chain_.rend(); ++it) {
        os_ << ind << "v" << (*it)->id << " = v" << previous->id << ";\n";
        previous = *it;
      }
      each([&](const std::string& i2) {
        for (const Op* op : element_ops_for({e})) emit_op(*op, "", i2);
        os_ << i2 << S << " += (float)" << ref(e, "") << ";\n";
      });
    };
    os_ << b << "#pragma unroll 4\n";
    if (v_.edge_elements) os_ << b << "for (long long q = tid; q < row_vectors; q += " << lanes() << ") {\n";
    else os_ << b << "for (long long q = tid; q * " << V << " < p.cols; q += " << lanes() << ") {\n";
    os_ << b << "  const long long col0 = " << (v_.edge_elements ? "row_head + " : "") << "q * " << V << ";\n";
    emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", row_tensors, b + "  ");
    for (auto& t : row_tensors) os_ << b << "  co_" << t << " += ro_" << t << ";\n";
    emit_leaf_arrays("U", "", b + "  ", leaves);
    emit_leaf_loads("U", "", "co_", b + "  ", leaves);
    vector_step(b + "  ", V);
    os_ << b << "}\n";
    if (v_.edge_elements) {
      os_ << b << "if (tid < row_edges) {\n";
      os_ << b << "  const long long col0 = tid < row_head ? (long long)tid : row_vectors * " << V << " + tid;\n";
      emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", row_tensors, b + "  ");
      for (auto& t : row_tensors) os_ << b << "  co_" << t << " += ro_" << t << ";\n";
      for (int k : leaves)
        os_ << b << "  AlloyVec<" << storage_type(a_.leaves[k]->dtype()) << ", " << V << "> U" << k << " = {};\n"
            << b << "  U" << k << ".v[0] = " << leaf_raw(k, "co_") << ";\n";
      vector_step(b + "  ", 1);
      os_ << b << "}\n";
    }
    os_ << in << "}\n";
    emit_online_merge(in, M, S);
    // a row of -inf: exp(-inf - -inf) is NaN for every element, as the reference computes it
    os_ << in << "if (p.cols > 0 && alloy_online_max < -3.402823466e38f) alloy_online_sum = __uint_as_float(0x7fc00000u);\n";
    os_ << in << "float v" << m->id << " = alloy_online_max;\n";
    os_ << in << "float v" << total.op->outputs[0]->id << " = alloy_online_sum;\n";
    for (Value* out : top.op->outputs) emitted_per_row_.insert(out);
    for (Value* out : total.op->outputs) emitted_per_row_.insert(out);
  }

  // Online softmax's statistics from each thread's max M and sum S of exp(x - M): the row's max,
  // then the sum of each thread's S rescaled to it (alloy_thread_scale), two plain reductions
  // rather than one (max, sum) merge whose every step takes two exps (on an H200 softmax at
  // [8192, 8192] bf16 77.2 against 82.0 us; bench/results/2026-11-24-NVIDIA_H200-notes.md).
  void emit_online_merge(const std::string& in, const std::string& M, const std::string& S) {
    os_ << in << "float alloy_online_max = " << reduce_fn() << "(" << M << ", AlloyMax(), reinterpret_cast<float*>(" << smem_region()
        << "));\n";
    os_ << in << "const float alloy_thread_scale = " << M << " < -3.402823466e38f ? 0.0f : ax_exp(" << M << " - alloy_online_max);\n";
    os_ << in << "float alloy_online_sum = " << reduce_fn() << "(" << S << " * alloy_thread_scale, AlloySum(), reinterpret_cast<float*>("
        << smem_region() << "));\n";
  }

  void emit_row_kernel() {
    plan_value_cache();
    detect_online_softmax();
    plan_cached_leaves();
    const int groups = v_.row_groups;
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads * groups;
    if (v_.min_blocks > 0) os_ << ", " << v_.min_blocks;
    os_ << ") " << name_ << "(const Params p) {\n";
    if (groups > 1) {  // (each row group its own two regions)
      os_ << "  __shared__ double alloy_smem_groups[" << groups << " * 2 * 99];\n";
      os_ << "  const int alloy_group = (int)threadIdx.x / " << v_.threads << ";\n";
      os_ << "  double* const alloy_smem = alloy_smem_groups + 2 * 99 * alloy_group;  // two regions, alternated by consecutive reductions\n";
    } else {
      os_ << "  __shared__ double alloy_smem[2 * 99];  // two regions, alternated by consecutive reductions\n";
    }
    std::optional<InnerOuterParts> columns;
    if (v_.inner_outer) {
      if (v_.rows_per_block > 0 || v_.items == 0 || v_.edge_elements) internal_error("an inner-outer kernel holds its rows, a block per row");
      columns.emplace(*this);
      columns->declare_partials("  ");
    }
    if (v_.rows_per_block > 0) {  // one warp per row: reductions are shuffles, no block barrier
      os_ << "  const int tid = threadIdx.x & 31;\n";
      os_ << "  for (long long row = (long long)blockIdx.x * " << v_.rows_per_block << " + (threadIdx.x >> 5); row < p.rows; row += (long long)gridDim.x * "
          << v_.rows_per_block << ") {\n";
    } else {
      if (groups > 1) {
        os_ << "  const int tid = (int)threadIdx.x - alloy_group * " << v_.threads << ";  // in the row group\n";
        os_ << "  const long long alloy_row_first = (long long)blockIdx.x * " << groups << " + alloy_group, alloy_row_stride = (long long)gridDim.x * "
            << groups << ";\n";
      } else {
        os_ << "  const int tid = threadIdx.x;\n";
      }
      if (v_.prefetch) {
        columns->load_rows_ahead("  ");
        os_ << "  unsigned alloy_region = 0;  // the shared region of the row's first reduction (no barrier ends a row)\n";
      }
      // (a combine over the grid: the CPU emulation's second run of the blocks skips the rows)
      if (v_.inner_outer && v_.combine_levels == 0) os_ << "  if (ALLOY_GRID_FIRST_PHASE)\n";
      if (groups > 1) os_ << "  for (long long row = alloy_row_first; row < p.rows; row += alloy_row_stride) {\n";
      else os_ << "  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {\n";
    }
    std::string in = "    ";
    std::vector<std::string> row_tensors = tensor_names(true, true, false), per_row_tensors = tensor_names(true, true, true);
    std::vector<std::string> all = row_tensors;
    all.insert(all.end(), per_row_tensors.begin(), per_row_tensors.end());
    emit_offsets("row", 0, v_.outer_rank, "ro_", all, in);
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      if (a_.at(a_.leaves[k]).per_row && !v_.prefetch)
        os_ << in << compute_type(a_.leaves[k]->dtype()) << " P" << k << " = "
            << load_convert(a_.leaves[k]->dtype(), leaf_raw(int(k), "ro_")) << ";\n";
    for (auto& [v, pass] : cache_pass_)
      os_ << in << "AlloyVec<" << compute_type(v->dtype()) << ", " << v_.vector << "> C" << v->id << "[" << v_.items << "];\n";
    if (v_.edge_elements) {  // the row's aligned vectors, and the elements before and after them
      emit_edge_head("row_head", "ro_" + edge_reference().first, "p.cols", in);
      os_ << in << "const long long row_vectors = (p.cols - row_head) / " << v_.vector << ";\n";
      os_ << in << "const int row_edges = (int)(p.cols - row_vectors * " << v_.vector << ");\n";
    }
    if (v_.prefetch) columns->load_next_row(in);
    else emit_cached_row(in);
    emitted_per_row_.clear();
    emit_ready_per_row_ops(in);
    for (auto& stage : a_.stages) {
      current_pass_ = int(&stage - &a_.stages[0]);
      // streaming online: the sum's stage went with the max's
      if (v_.streaming_online && current_pass_ == online_stage_ + 1) continue;
      two_pass_ = v_.items > 0;  // with the row in registers, var_mean is mean first, then squares
      std::vector<Acc> accs;
      for (const Op* r : stage) accs.push_back(declare_acc(*r, in));
      if (v_.streaming_online && current_pass_ == online_stage_) {
        emit_streaming_online(in, accs[0], declare_acc(*a_.stages[current_pass_ + 1][0], in));
        emit_ready_per_row_ops(in);
        continue;
      }
      std::vector<const Value*> targets;
      for (auto& acc : accs) targets.push_back(acc.op->inputs[0]);
      emit_column_loop(in, targets, [&](const std::string& indent, const std::string& element) {
        for (auto& acc : accs) accumulate(acc, indent, element);
      });
      if (two_pass_ && stage_has_var_mean(stage)) emit_var_mean_deviations(accs, in);
      finish_stage(accs, in);
      emit_ready_per_row_ops(in);
    }
    current_pass_ = int(a_.stages.size());
    auto outs = final_targets();
    if (!outs.empty())
      emit_column_loop(in, outs, columns ? [&](const std::string& indent, const std::string& element) { columns->accumulate(indent, element); }
                                         : std::function<void(const std::string&, const std::string&)>{}, true);
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      if (a_.at(a_.outputs[k]).per_row)
        os_ << in << "if (tid == 0) p.o" << k << "[ro_o" << k
            << "] = " << store_convert(a_.outputs[k]->dtype(), ref(a_.outputs[k], "")) << ";\n";
    // A barrier ends the row so that the next one's reductions may reuse the shared regions; with
    // rows loaded ahead, the regions alternate across rows too (the next row's first reduction
    // takes the region this row's last did not; the barrier inside that last one keeps every
    // thread's reads of the other region before any write of the next row).
    if (v_.prefetch) {
      if (reductions_in_row_ % 2) os_ << in << "alloy_region ^= 1u;\n";
    } else if (v_.rows_per_block == 0) {
      os_ << in << (groups > 1 ? "ALLOY_RED_SYNC();  // the row group's barrier" : "__syncthreads();") << "\n";
    }
    if (v_.prefetch) columns->next_row_becomes_current(in);
    os_ << "  }\n";
    if (columns && groups > 1) columns->combine_groups();
    if (columns) columns->combine_and_store();
    os_ << "}\n";
  }

  // Leaves read by more than one pass over the row stay in registers (when the row fits).
  void plan_cached_leaves() {
    cached_.clear();
    if (v_.items == 0) return;
    std::map<int, int> passes;
    for (size_t stage = 0; stage < a_.stages.size(); ++stage) {
      current_pass_ = int(stage);
      for (int k : leaves_for(pass_targets(int(stage)))) passes[k] += stage_has_var_mean(a_.stages[stage]) ? 2 : 1;
    }
    current_pass_ = int(a_.stages.size());
    std::set<int> final_pass = leaves_for(final_targets());
    for (int k : final_pass) passes[k] += 1;
    current_pass_ = 0;
    for (auto [k, n] : passes)
      if (n > 1 || (v_.prefetch && along_columns_only(a_, a_.leaves[k]))) cached_.insert(k);
    // early loads: the final pass's other leaves too, while the row's registers stay in budget
    if (!v_.early_loads || a_.stages.empty()) return;
    auto words = [&](int k) { return v_.items * v_.vector * int(dtype_size(a_.leaves[k]->dtype())) / 4; };
    int held = 0;
    for (int k : cached_) held += words(k);
    for (int k : final_pass)
      if (!cached_.count(k) && held + words(k) <= kEarlyLoadWords) {
        cached_.insert(k);
        held += words(k);
      }
  }
  // 32-bit registers a lane may give to the leaves it holds (the row's, and the early loads)
  static constexpr int kEarlyLoadWords = 96;

  // Loads the row's cached leaves once, into L<k>[it].
  void emit_cached_row(const std::string& in) {
    if (v_.items == 0 || cached_.empty()) return;
    std::vector<std::string> row_tensors = tensor_names(true, true, false);
    if (v_.shared_row) {  // each leaf's [items][threads] vectors, one after another
      os_ << in << "ALLOY_DYNAMIC_SHARED(alloy_row_shared);\n";
      size_t at = 0;
      for (int k : cached_) {
        std::string vec = std::string("AlloyVec<") + storage_type(a_.leaves[k]->dtype()) + ", " + std::to_string(v_.vector) + ">";
        os_ << in << "const AlloySharedRow<" << vec << "> L" << k << "{reinterpret_cast<" << vec << "*>(alloy_row_shared + " << at
            << ") + tid, " << lanes() << "};\n";
        at += size_t(v_.items) * v_.threads * v_.vector * dtype_size(a_.leaves[k]->dtype());
      }
    } else {
      emit_leaf_arrays("L", "[" + std::to_string(v_.items) + "]", in, cached_);
    }
    os_ << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << v_.items << "; ++it) {\n";
    os_ << in << "  " << declare_slot_col("(long long)it * " + std::to_string(lanes()) + " + tid") << "\n";
    os_ << in << "  " << open_col_guard() << "\n";
    emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", row_tensors, in + "    ");
    for (auto& t : row_tensors) os_ << in << "    co_" << t << " += ro_" << t << ";\n";
    emit_leaf_loads("L", "[it]", "co_", in + "    ", cached_);
    os_ << in << "  }\n" << in << "}\n";
  }

  // The stage's block reductions. With rows loaded ahead (an inner-outer kernel) its sums and
  // means of one type share one (alloy_block_reduce_n: one barrier for them all; the layer norm
  // backward's two row sums), each result the bits its own reduction would give.
  void finish_stage(const std::vector<Acc>& accs, const std::string& in) {
    std::set<const Acc*> together;
    if (v_.prefetch) {
      // a shared region (99 doubles) holds 6 x 32 floats or 3 x 32 doubles
      for (auto [type, most] : {std::pair<std::string, size_t>{"float", 6}, {"double", 3}}) {
        std::vector<const Acc*> sums;
        for (const Acc& acc : accs)
          if ((acc.op->kind == OpKind::sum || acc.op->kind == OpKind::mean) && acc.ct == type && sums.size() < most) sums.push_back(&acc);
        if (sums.size() < 2) continue;
        emit_sums_together(sums, in);
        together.insert(sums.begin(), sums.end());
      }
    }
    for (const Acc& acc : accs)
      if (!together.count(&acc)) finish_acc(acc, in);
  }

  void emit_sums_together(const std::vector<const Acc*>& sums, const std::string& in) {
    std::string T = sums[0]->ct, name = "alloy_sums" + std::to_string(sums[0]->op->outputs[0]->id);
    os_ << in << T << " " << name << "[" << sums.size() << "] = {";
    for (const Acc* acc : sums) os_ << (acc == sums[0] ? "" : ", ") << acc->name;
    os_ << "};\n";
    os_ << in << "alloy_block_reduce_n(" << name << ", AlloySum(), reinterpret_cast<" << T << "*>(" << smem_region() << "));\n";
    for (size_t i = 0; i < sums.size(); ++i) {
      emit_reduced(*sums[i], name + "[" + std::to_string(i) + "]", in);
      for (Value* out : sums[i]->op->outputs) emitted_per_row_.insert(out);
    }
  }

  // The row is in registers: var_mean's mean first, from a block reduction, then the squared
  // deviations from it, summed by another (one barrier more than a Welford merge of each thread's
  // own statistics, but no divisions in the merge steps: on an H200 layer norm at [8192, 8192]
  // bf16 took 74.7 us against 88.2; bench/results/2026-11-24-NVIDIA_H200-notes.md).
  void emit_var_mean_deviations(const std::vector<Acc>& accs, const std::string& in) {
    std::vector<const Value*> var_targets;
    for (auto& acc : accs) {
      if (acc.op->kind != OpKind::var_mean) continue;
      std::string T = acc.ct;
      os_ << in << T << " " << acc.name << "_mean = " << reduce_fn() << "(" << acc.name << "_sum, AlloySum(), reinterpret_cast<" << T
          << "*>(" << smem_region() << ")) / (" << T << ")p.count;\n";
      os_ << in << T << " " << acc.name << "_m2 = 0;\n";
      var_targets.push_back(acc.op->inputs[0]);
    }
    emit_column_loop(in, var_targets, [&](const std::string& indent, const std::string& element) {
      for (auto& acc : accs) {
        if (acc.op->kind != OpKind::var_mean) continue;
        os_ << indent << "{ " << acc.ct << " d = ((" << acc.ct << ")" << ref(acc.op->inputs[0], element) << ") - " << acc.name
            << "_mean; " << acc.name << "_m2 += d * d; }\n";
      }
    });
  }

  // Loops over this thread's columns: from registers (items > 0) or re-reading memory.
  void emit_column_loop(const std::string& in, const std::vector<const Value*>& targets,
                        const std::function<void(const std::string&, const std::string&)>& body, bool store = false) {
    auto ops = element_ops_for(targets);
    auto element = [&](const std::string& indent, const std::string& leaf_element) {
      for (const Op* op : ops) emit_op(*op, leaf_element, indent);
    };
    std::vector<std::string> row_tensors = tensor_names(true, true, false);
    std::set<int> uncached;
    for (int k : leaves_for(targets))
      if (!cached_.count(k)) uncached.insert(k);
    if (v_.items > 0) {
      os_ << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << v_.items << "; ++it) {\n";
      os_ << in << "  " << declare_slot_col("(long long)it * " + std::to_string(lanes()) + " + tid") << "\n";
      os_ << in << "  " << open_col_guard() << "\n";
      std::vector<std::string> addressed;
      if (store) addressed = tensor_names(false, true, false);
      for (int k : uncached) {
        std::vector<std::string> leaf = leaf_tensor_names(k);
        addressed.insert(addressed.end(), leaf.begin(), leaf.end());
      }
      if (std::any_of(ops.begin(), ops.end(), [](const Op* op) { return op->kind == OpKind::gather; })) {
        std::vector<std::string> gathers = gather_tensor_names(false);  // their sources are read at these columns
        addressed.insert(addressed.end(), gathers.begin(), gathers.end());
      }
      if (!addressed.empty()) {
        emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", addressed, in + "    ");
        for (auto& t : addressed) os_ << in << "    co_" << t << " += ro_" << t << ";\n";
      }
      emit_leaf_arrays("U", "", in + "    ", uncached);
      emit_leaf_loads("U", "", "co_", in + "    ", uncached);
      if (store) {  // (an inner-outer kernel's `body` adds to the column partials)
        emit_vector_stores("co_", in + "    ", "[it]", [&](const std::string& indent) {
          element(indent, "[it]");
          if (body) body(indent, "[it]");
        });
      } else {
        os_ << in << "    #pragma unroll\n" << in << "    for (int e = 0; e < " << v_.vector << "; ++e) {\n";
        element(in + "      ", "[it]");
        body(in + "      ", "[it]");
        os_ << in << "    }\n";
      }
      os_ << in << "  }\n" << in << "}\n";
      emit_edge_columns(in, targets, body, store);
      return;
    }
    if (v_.edge_elements) os_ << in << "for (long long q = tid; q < row_vectors; q += " << lanes() << ") {\n";
    else os_ << in << "for (long long q = tid; q * " << v_.vector << " < p.cols; q += " << lanes() << ") {\n";
    os_ << in << "  const long long col0 = " << (v_.edge_elements ? "row_head + " : "") << "q * " << v_.vector << ";\n";
    emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", row_tensors, in + "  ");
    for (auto& t : row_tensors) os_ << in << "  co_" << t << " += ro_" << t << ";\n";
    emit_leaf_arrays("U", "", in + "  ", uncached);
    emit_leaf_loads("U", "", "co_", in + "  ", uncached);
    if (store) {
      emit_vector_stores("co_", in + "  ", "", [&](const std::string& indent) { element(indent, ""); });
    } else {
      os_ << in << "  #pragma unroll\n" << in << "  for (int e = 0; e < " << v_.vector << "; ++e) {\n";
      element(in + "    ", "");
      body(in + "    ", "");
      os_ << in << "  }\n";
    }
    os_ << in << "}\n";
    emit_edge_columns(in, targets, body, store);
  }

  // Edge elements: the row's columns before its first aligned vector and after its last whole one,
  // one a thread, read from memory and computed again in every pass (nothing held in registers).
  void emit_edge_columns(const std::string& in, const std::vector<const Value*>& targets,
                         const std::function<void(const std::string&, const std::string&)>& body, bool store) {
    if (!v_.edge_elements) return;
    std::vector<std::string> row_tensors = tensor_names(true, true, false);
    os_ << in << "if (tid < row_edges) {\n";
    os_ << in << "  const long long col0 = tid < row_head ? (long long)tid : row_vectors * " << v_.vector << " + tid;\n";
    emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", row_tensors, in + "  ");
    for (auto& t : row_tensors) os_ << in << "  co_" << t << " += ro_" << t << ";\n";
    std::set<int> cached = std::exchange(cached_, {});
    std::map<const Value*, int> held = std::exchange(cache_pass_, {});
    auto ops = element_ops_for(targets);
    emit_edge_element("co_", in + "  ", leaves_for(targets), [&](const std::string& indent) {
      for (const Op* op : ops) emit_op(*op, "", indent);
      if (store) emit_element_stores("co_", indent);
      else body(indent, "");
    });
    cached_ = std::move(cached);
    cache_pass_ = std::move(held);
    os_ << in << "}\n";
  }

  Acc declare_acc(const Op& r, const std::string& in) {
    Acc acc{&r, "acc" + std::to_string(r.outputs[0]->id), compute_type(r.outputs[0]->dtype())};
    std::string T = acc.ct;
    switch (r.kind) {
      case OpKind::sum: case OpKind::mean: case OpKind::max: case OpKind::min:
        os_ << in << T << " " << acc.name << " = " << identity_of(r, T) << ";\n";
        break;
      case OpKind::var_mean:
        if (two_pass_) os_ << in << T << " " << acc.name << "_sum = 0;\n";
        else os_ << in << T << " " << acc.name << "_n = 0, " << acc.name << "_mean = 0, " << acc.name << "_m2 = 0;\n";
        break;
      default: internal_error("not a reduction: ", op_name(r.kind));
    }
    return acc;
  }

  void accumulate(const Acc& acc, const std::string& in, const std::string& element) {
    std::string x = "((" + std::string(acc.ct) + ")" + ref(acc.op->inputs[0], element) + ")";
    switch (acc.op->kind) {
      case OpKind::sum: case OpKind::mean: os_ << in << acc.name << " += " << x << ";\n"; break;
      case OpKind::max: os_ << in << acc.name << " = ax_max(" << acc.name << ", " << x << ");\n"; break;
      case OpKind::min: os_ << in << acc.name << " = ax_min(" << acc.name << ", " << x << ");\n"; break;
      case OpKind::var_mean:
        if (two_pass_) {
          os_ << in << acc.name << "_sum += " << x << ";\n";
          break;
        }
        os_ << in << "{ " << acc.ct << " x = " << x << "; " << acc.name << "_n += 1; " << acc.ct << " d = x - " << acc.name << "_mean; "
            << acc.name << "_mean += d / " << acc.name << "_n; " << acc.name << "_m2 += d * (x - " << acc.name << "_mean); }\n";
        break;
      default: break;
    }
  }

  void finish_acc(const Acc& acc, const std::string& in) {
    std::string T = acc.ct;
    const Op& r = *acc.op;
    if (online_stage_ >= 0 && &r == a_.stages[online_stage_][0]) {
      // this thread's max (0 where it has no finite one: its exp values are then all 0)
      os_ << in << "float v" << r.outputs[0]->id << " = " << acc.name << " < -3.402823466e38f ? 0.0f : " << acc.name << ";\n";
      for (Value* out : r.outputs) emitted_per_row_.insert(out);
      return;
    }
    if (online_stage_ >= 0 && &r == a_.stages[online_stage_ + 1][0]) {
      std::string top = "acc" + std::to_string(a_.stages[online_stage_][0]->outputs[0]->id);
      emit_online_merge(in, top, acc.name);
      if (online_exp_) {
        os_ << in << "const float alloy_online_scale = alloy_thread_scale;\n";
      } else {
        // later passes recompute exp(x - max) against the row's max: the max and its views become it
        const Value* m = a_.stages[online_stage_][0]->outputs[0];
        os_ << in << "v" << m->id << " = alloy_online_max;\n";
        const Value* previous = m;
        for (auto it = online_chain_.rbegin(); it != online_chain_.rend(); ++it) {
          os_ << in << "v" << (*it)->id << " = v" << previous->id << ";\n";
          previous = *it;
        }
      }
      os_ << in << "float v" << r.outputs[0]->id << " = alloy_online_sum;\n";
      for (Value* out : r.outputs) emitted_per_row_.insert(out);
      return;
    }
    std::string region = smem_region();
    if (r.kind == OpKind::var_mean) {
      std::string smem = "reinterpret_cast<" + T + "*>(" + region + ")";
      if (two_pass_)  // the row in registers: the squared deviations' sum (emit_var_mean_deviations)
        os_ << in << acc.name << "_m2 = " << reduce_fn() << "(" << acc.name << "_m2, AlloySum(), " << smem << ");\n";
      else  // re-read from memory: each thread's Welford state, merged
        os_ << in << (v_.rows_per_block ? "alloy_warp_welford(" : "alloy_block_welford(")
            << acc.name << "_n, " << acc.name << "_mean, " << acc.name << "_m2, " << smem << ");\n";
      double correction = r.real_attr("correction");
      std::string var = acc.name + "_m2 / (" + T + ")fmax(0.0, p.count - " + std::to_string(correction) + ")";
      os_ << in << T << " v" << r.outputs[0]->id << " = " << round_to_dtype(r.outputs[0]->dtype(), var) << ";\n";
      os_ << in << T << " v" << r.outputs[1]->id << " = " << round_to_dtype(r.outputs[1]->dtype(), acc.name + "_mean") << ";\n";
    } else {
      const char* f = r.kind == OpKind::max ? "AlloyMax()" : r.kind == OpKind::min ? "AlloyMin()" : "AlloySum()";
      std::string ct_red = T == "bool" ? "alloy_i64" : T;
      emit_reduced(acc, reduce_fn() + std::string("((") + ct_red + ")" + acc.name + ", " + f + ", reinterpret_cast<" + ct_red + "*>(" + region + "))",
                   in);
    }
    for (Value* out : r.outputs) emitted_per_row_.insert(out);
  }

  // `T vN = (T)reduced;` for a sum, mean, max or min over the block: a mean divided by the count,
  // a 16-bit result rounded to its dtype.
  void emit_reduced(const Acc& acc, const std::string& reduced, const std::string& in) {
    std::string T = acc.ct, v = "v" + std::to_string(acc.op->outputs[0]->id);
    os_ << in << T << " " << v << " = (" << T << ")" << reduced << ";\n";
    if (acc.op->kind == OpKind::mean) os_ << in << v << " /= (" << T << ")p.count;\n";
    DType dt = acc.op->outputs[0]->dtype();
    if (dt == DType::bf16 || dt == DType::f16) os_ << in << v << " = " << round_to_dtype(dt, v) << ";\n";
  }

  int online_stage_ = -1;  // online softmax: the max's stage (the sum's is the next), or -1
  std::vector<const Value*> online_chain_;  // the views from the max to what exp(x - .) reads, last first
  bool two_pass_ = false;  // var_mean as a sum, then squared deviations, over cached rows

  // threads along a row: a warp (rows_per_block) or the block
  int lanes() const { return v_.rows_per_block ? 32 : v_.threads; }
  // The bounds check of a thread's vector at column `col` of the row, opening a block; none where
  // every vector a thread holds is inside the row (KernelVariant::full_rows).
  std::string open_col_guard() const {
    return v_.full_rows ? "{" : v_.edge_elements ? "if (slot < row_vectors) {" : "if (col0 < p.cols) {";
  }
  // `slot` (a thread's vector in the row) and `col0` (its first column): with edge elements the
  // vectors start at the row's first aligned column
  std::string declare_slot_col(const std::string& slot) const {
    return "[[maybe_unused]] const long long slot = " + slot + ", col0 = " + (v_.edge_elements ? "row_head + " : "") + "slot * " +
           std::to_string(v_.vector) + ";";
  }
  const char* reduce_fn() const {
    return v_.rows_per_block ? "alloy_warp_reduce" : "alloy_block_reduce";
  }
  // Block reductions alternate between two shared regions (see alloy_block_reduce); a barrier ends
  // each row, so the parity may restart there, or, with rows loaded ahead (no barrier at the row's
  // end), it goes on from the row before (alloy_region).
  int reductions_in_row_ = 0;
  std::string smem_region() {
    const int k = reductions_in_row_++ % 2;
    if (v_.prefetch) return "alloy_smem + 99 * (alloy_region ^ " + std::to_string(k) + "u)";
    return "alloy_smem + " + std::to_string(99 * k);
  }

  static bool stage_has_var_mean(const std::vector<const Op*>& stage) {
    for (const Op* r : stage)
      if (r->kind == OpKind::var_mean) return true;
    return false;
  }
};

}  // namespace

std::vector<OnlineSoftmaxStage> online_softmax_stages(const KernelAnalysis& a) {
  std::vector<OnlineSoftmaxStage> found;
  std::map<const Value*, int> uses;
  for (const Op* op : a.compute_ops)
    for (const Value* in : std::set<const Value*>(op->inputs.begin(), op->inputs.end())) ++uses[in];
  auto internal = [&](const Value* v) {
    return uses[v] == 1 && std::find(a.outputs.begin(), a.outputs.end(), v) == a.outputs.end();
  };
  for (size_t k = 0; k + 1 < a.stages.size(); ++k) {
    if (a.stages[k].size() != 1 || a.stages[k + 1].size() != 1) continue;
    const Op *top = a.stages[k][0], *total = a.stages[k + 1][0];
    if (top->kind != OpKind::max || total->kind != OpKind::sum) continue;
    if (top->outputs[0]->dtype() != DType::f32 || total->outputs[0]->dtype() != DType::f32) continue;
    const Value* e = total->inputs[0];
    const Op* exp_op = e->producer;
    if (!exp_op || exp_op->kind != OpKind::exp || e->dtype() != DType::f32) continue;
    const Value* d = exp_op->inputs[0];
    const Op* sub_op = d->producer;
    if (!sub_op || sub_op->kind != OpKind::sub || d->dtype() != DType::f32 || !internal(d)) continue;
    const Value* chain = sub_op->inputs[1];
    bool ok = sub_op->inputs[0] != chain;
    while (ok && chain != top->outputs[0]) {
      ok = internal(chain) && chain->producer && op_row(chain->producer->kind).op_class == OpClass::shape;
      if (ok) chain = chain->producer->inputs[0];
    }
    if (!ok) continue;
    OnlineSoftmaxStage o;
    o.stage = int(k);
    o.max_read_elsewhere = !internal(top->outputs[0]);
    o.exp_value = e;
    for (const Value* c = sub_op->inputs[1]; c != top->outputs[0]; c = c->producer->inputs[0]) o.chain.push_back(c);
    found.push_back(std::move(o));
  }
  return found;
}

std::string emit_row_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  return RowEmitter(analysis, variant, name).run();
}

size_t row_shared_bytes(const KernelAnalysis& a, const KernelVariant& v) { return RowEmitter(a, v, "k").shared_row_bytes(); }

}  // namespace alloy::cuda
