#include "alloy/backend/cuda/codegen/kernel_codegen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/prelude.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {
namespace {

// ---- the generator ---------------------------------------------------------------------

class Generator {
 public:
  Generator(const KernelAnalysis& a, const KernelVariant& v, std::string name) : a_(a), v_(v), name_(std::move(name)) {
    for (size_t k = 0; k < a.leaves.size(); ++k) leaf_index_[a.leaves[k]] = int(k);
    for (size_t k = 0; k < a.scalar_inputs.size(); ++k) scalar_index_[a.scalar_inputs[k]] = int(k);
  }

  std::string run() {
    for (const Op* op : a_.compute_ops)
      for (Value* in : op->inputs) used_in_kernel_.insert(in);
    if (v_.lean) os_ << "#define ALLOY_LEAN 1\n";
    os_ << kKernelPrelude << "\n";
    emit_params();
    if (a_.is_reduction() && v_.tile_x > 0) emit_column_kernel();
    else if (a_.is_reduction()) emit_row_kernel();
    else emit_pointwise_kernel();
    return os_.str();
  }

 private:
  int dims() const { return v_.outer_rank + v_.inner_rank; }
  char mode_of_leaf(int k) const { return v_.vector > 1 && k < int(v_.leaf_modes.size()) ? v_.leaf_modes[k] : 's'; }

  void emit_params() {
    os_ << "typedef " << (v_.index32 ? "int" : "long long") << " alloy_idx;\n";
    os_ << "struct Params {\n";
    if (a_.is_reduction()) os_ << "  long long rows, cols;\n  double count;\n";
    else os_ << "  long long numel;\n";
    if (a_.is_reduction() && v_.tile_x > 0) os_ << "  unsigned long long* ws;\n  unsigned* counters;\n";
    os_ << "  long long size[" << std::max(1, dims()) << "];\n";
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      os_ << "  const " << storage_type(a_.leaves[k]->dtype()) << "* l" << k << "; long long l" << k << "_stride[" << std::max(1, dims()) << "];\n";
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      os_ << "  " << storage_type(a_.outputs[k]->dtype()) << "* o" << k << "; long long o" << k << "_stride[" << std::max(1, dims()) << "];\n";
    for (size_t k = 0; k < a_.scalar_inputs.size(); ++k)
      os_ << "  " << (is_floating(a_.scalar_inputs[k]->dtype()) ? "double" : "long long") << " s" << k << ";\n";
    os_ << "};\n";
    // the host fills Params word by word (param_words): the layouts must agree
    os_ << "static_assert(sizeof(Params) == " << param_words(a_, v_) << " * 8, \"Params layout\");\n\n";
  }

  // Offsets of every leaf and output for coordinates of axes [first, first + count) of `index`.
  void emit_offsets(const std::string& index, int first, int count, const std::string& prefix,
                    const std::vector<std::string>& tensors, const std::string& indent) {
    // alloy_idx: int where the host found every offset small (KernelVariant::index32)
    for (auto& t : tensors) os_ << indent << "alloy_idx " << prefix << t << " = 0;\n";
    if (count == 0) return;
    os_ << indent << "{ alloy_idx rem = (alloy_idx)(" << index << ");\n";
    for (int d = first + count - 1; d >= first; --d) {
      if (d == first) os_ << indent << "  alloy_idx c" << d << " = rem;\n";
      else os_ << indent << "  alloy_idx c" << d << " = rem % (alloy_idx)p.size[" << d << "]; rem /= (alloy_idx)p.size[" << d << "];\n";
      for (auto& t : tensors) os_ << indent << "  " << prefix << t << " += c" << d << " * (alloy_idx)p." << t << "_stride[" << d << "];\n";
    }
    os_ << indent << "}\n";
  }

  std::vector<std::string> tensor_names(bool leaves, bool outputs, bool per_row) const {
    std::vector<std::string> names;
    if (leaves)
      for (size_t k = 0; k < a_.leaves.size(); ++k)
        if (a_.at(a_.leaves[k]).per_row == per_row || !a_.is_reduction()) names.push_back("l" + std::to_string(k));
    if (outputs)
      for (size_t k = 0; k < a_.outputs.size(); ++k)
        if (a_.at(a_.outputs[k]).per_row == per_row || !a_.is_reduction()) names.push_back("o" + std::to_string(k));
    return names;
  }

  // The register expression of `v` (a leaf element, a scalar, a literal or a computed value).
  std::string ref(const Value* v, const std::string& element) const {
    if (v->literal) return literal_text(*v->literal, compute_type(v->dtype()));
    if (auto it = scalar_index_.find(v); it != scalar_index_.end())
      return "((" + std::string(compute_type(v->dtype())) + ")p.s" + std::to_string(it->second) + ")";
    if (auto it = leaf_index_.find(v); it != leaf_index_.end()) {
      if (a_.is_reduction() && a_.at(v).per_row) return "P" + std::to_string(it->second);
      // leaves stay in their storage type in registers (a bf16 vector is half the registers)
      std::string raw = cached_.count(it->second) ? "L" + std::to_string(it->second) + element : "U" + std::to_string(it->second);
      if (v->dtype() == DType::bf16 && v_.vector > 1) return "alloy_bf16_at(" + raw + ", e)";
      return load_convert(v->dtype(), raw + ".v[e]");
    }
    if (held_from_earlier_pass(v)) {
      std::string held = "C" + std::to_string(v->id) + element + ".v[e]";
      // online softmax: exp(x - this thread's max), rescaled to the row's max
      return v == online_exp_ ? "(" + held + " * alloy_online_scale)" : held;
    }
    return "v" + std::to_string(v->id);
  }

  // Lean row kernels with the row in registers fuse softmax's two block reductions (max, then the
  // sum of exp(x - max)) into one: each thread keeps its own max, sums exp against it, and the
  // (max, sum) pairs merge once; the exp values held in registers are rescaled by
  // exp(thread max - row max) where read later. Taken only when the max feeds nothing but
  // exp(x - max) (through views), and that exp is held in registers from the sum's pass.
  void detect_online_softmax() {
    online_stage_ = -1;
    online_exp_ = nullptr;
    if (!v_.lean || v_.items == 0) return;
    std::map<const Value*, int> uses;
    for (const Op* op : a_.compute_ops)
      for (const Value* in : std::set<const Value*>(op->inputs.begin(), op->inputs.end())) ++uses[in];
    auto internal = [&](const Value* v) {
      return uses[v] == 1 && std::find(a_.outputs.begin(), a_.outputs.end(), v) == a_.outputs.end();
    };
    for (size_t k = 0; k + 1 < a_.stages.size(); ++k) {
      if (a_.stages[k].size() != 1 || a_.stages[k + 1].size() != 1) continue;
      const Op *top = a_.stages[k][0], *total = a_.stages[k + 1][0];
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
      if (!ok || !internal(top->outputs[0])) continue;
      auto held = cache_pass_.find(e);
      bool cached = held != cache_pass_.end() && held->second == int(k + 1);
      if (!cached && cache_pass_.count(e)) continue;
      online_stage_ = int(k);
      online_exp_ = cached ? e : nullptr;  // not held: later passes recompute it from the row max
      online_chain_.clear();
      for (const Value* c = sub_op->inputs[1]; c != top->outputs[0]; c = c->producer->inputs[0]) online_chain_.push_back(c);
      return;
    }
  }

  bool held_from_earlier_pass(const Value* v) const {
    auto it = cache_pass_.find(v);
    return it != cache_pass_.end() && current_pass_ > it->second;
  }

  // Values computed by costly ops (exp, tanh, ...) in one pass over the row and read again by a
  // later pass are kept in registers instead of recomputed (softmax's exp).
  void plan_value_cache() {
    cache_pass_.clear();
    if (v_.items == 0 || v_.recompute) return;
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
    if (pass == int(a_.stages.size())) return element_outputs();
    std::vector<const Value*> targets;
    for (const Op* r : a_.stages[pass]) targets.push_back(r->inputs[0]);
    return targets;
  }

  // Emits `ct vN = expr;` for op's outputs; in-kernel views just alias their input.
  void emit_op(const Op& op, const std::string& element, const std::string& indent) {
    const Value* out = op.outputs[0];
    const char* out_ct = compute_type(out->dtype());
    if (op_row(op.kind).op_class == OpClass::shape) {
      os_ << indent << out_ct << " v" << out->id << " = " << ref(op.inputs[0], element) << ";\n";
      return;
    }
    DType cd = op_compute_dtype(op);
    const char* ct = compute_type(cd);
    std::vector<std::string> args;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const Value* in = op.inputs[i];
      bool condition = op.kind == OpKind::where && i == 0;
      std::string r = ref(in, element);
      if (in->literal) r = literal_text(*in->literal, condition ? "bool" : ct);
      else if (!condition && std::string(compute_type(in->dtype())) != ct) r = "((" + std::string(ct) + ")" + r + ")";
      args.push_back(r);
    }
    std::string expr;
    if (op.kind == OpKind::cast) {
      std::string to = compute_type(out->dtype());
      if (to == "alloy_i64" && std::string(ct) != "alloy_i64" && std::string(compute_type(op.inputs[0]->dtype())) != "alloy_i64" &&
          std::string(compute_type(op.inputs[0]->dtype())) != "bool")
        expr = "alloy_to_int((double)" + ref(op.inputs[0], element) + ")";
      else if (to == "bool") expr = "(" + ref(op.inputs[0], element) + " != 0)";
      else expr = "((" + to + ")" + ref(op.inputs[0], element) + ")";
    } else if (op.kind == OpKind::div && std::string(ct) == "float" && a_.is_reduction() && !op.inputs[1]->literal &&
               a_.layout.count(op.inputs[1]) && a_.at(op.inputs[1]).per_row && !a_.at(op.outputs[0]).per_row) {
      // x / row_value in the per-element loop: one reciprocal per row, a multiply per element
      // (within an f32 ulp of the quotient)
      expr = "(" + args[0] + " * (1.0f / " + args[1] + "))";
    } else {
      expr = pointwise_expr(op, args, ct);
    }
    // a value only stored is rounded by the store itself
    if (used_in_kernel_.count(out)) expr = round_to_dtype(out->dtype(), expr);
    os_ << indent << out_ct << " v" << out->id << " = (" << out_ct << ")(" << expr << ");\n";
    if (auto it = cache_pass_.find(out); it != cache_pass_.end() && it->second == current_pass_)
      os_ << indent << "C" << out->id << element << ".v[e] = v" << out->id << ";\n";
  }

  // Computed, per-element values that `targets` need, in definition order.
  std::vector<const Op*> element_ops_for(const std::vector<const Value*>& targets) const {
    std::set<const Value*> needed(targets.begin(), targets.end());
    std::vector<const Op*> ops;
    for (auto it = a_.compute_ops.rbegin(); it != a_.compute_ops.rend(); ++it) {
      const Op* op = *it;
      bool wanted = false;
      for (Value* out : op->outputs) wanted |= needed.count(out) > 0;
      if (!wanted || op_row(op->kind).op_class == OpClass::reduction) continue;
      if (a_.is_reduction() && a_.at(op->outputs[0]).per_row) continue;  // computed once per row
      if (held_from_earlier_pass(op->outputs[0])) continue;                // in registers already
      ops.push_back(op);
      for (Value* in : op->inputs) needed.insert(in);
    }
    std::reverse(ops.begin(), ops.end());
    return ops;
  }

  // Loads leaves `which` as raw vectors into <prefix>k<target> from p.lk + <offset_prefix>lk.
  void emit_leaf_loads(const std::string& prefix, const std::string& target, const std::string& offset_prefix,
                       const std::string& indent, const std::set<int>& which) {
    for (int k : which) {
      const Value* leaf = a_.leaves[k];
      std::string st = storage_type(leaf->dtype()), ptr = "p.l" + std::to_string(k) + " + " + offset_prefix + "l" + std::to_string(k);
      std::string dst = prefix + std::to_string(k) + target, vec = "AlloyVec<" + st + ", " + std::to_string(v_.vector) + ">";
      switch (mode_of_leaf(k)) {
        case 'v':
          os_ << indent << dst << " = *reinterpret_cast<const " << vec << "*>(" << ptr << ");\n";
          break;
        case 'b':
          os_ << indent << "{ " << st << " r = *(" << ptr << ");\n" << indent << "  #pragma unroll\n" << indent << "  for (int e = 0; e < "
              << v_.vector << "; ++e) " << dst << ".v[e] = r; }\n";
          break;
        default:
          os_ << indent << dst << ".v[0] = *(" << ptr << ");\n";
      }
    }
  }

  void emit_leaf_arrays(const std::string& prefix, const std::string& extent, const std::string& indent, const std::set<int>& which) {
    for (int k : which)
      os_ << indent << "AlloyVec<" << storage_type(a_.leaves[k]->dtype()) << ", " << v_.vector << "> " << prefix << k << extent << ";\n";
  }

  // Leaves (by index) that vary per element.
  std::set<int> element_leaves() const {
    std::set<int> out;
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      if (!a_.is_reduction() || !a_.at(a_.leaves[k]).per_row) out.insert(int(k));
    return out;
  }

  // Per-element leaves a pass computing `targets` reads.
  std::set<int> leaves_for(const std::vector<const Value*>& targets) const {
    std::set<int> out;
    auto add = [&](const Value* v) {
      auto it = leaf_index_.find(v);
      if (it != leaf_index_.end() && (!a_.is_reduction() || !a_.at(v).per_row)) out.insert(it->second);
    };
    for (const Value* t : targets) add(t);
    for (const Op* op : element_ops_for(targets))
      for (Value* in : op->inputs) add(in);
    return out;
  }

  // Stores outputs that vary per element; `values[k]` is the register name of output k at element e.
  void emit_vector_stores(const std::string& offset_prefix, const std::string& indent, const std::string& element,
                          const std::function<void(const std::string&)>& compute_element) {
    std::vector<int> stored;
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      if (!a_.is_reduction() || !a_.at(a_.outputs[k]).per_row) stored.push_back(int(k));
    for (int k : stored)
      os_ << indent << "AlloyVec<" << storage_type(a_.outputs[k]->dtype()) << ", " << v_.vector << "> w" << k << ";\n";
    os_ << indent << "#pragma unroll\n" << indent << "for (int e = 0; e < " << v_.vector << "; ++e) {\n";
    compute_element(indent + "  ");
    for (int k : stored)
      os_ << indent << "  w" << k << ".v[e] = " << store_convert(a_.outputs[k]->dtype(), ref(a_.outputs[k], element)) << ";\n";
    os_ << indent << "}\n";
    for (int k : stored) {
      std::string ptr = "p.o" + std::to_string(k) + " + " + offset_prefix + "o" + std::to_string(k);
      if (v_.vector > 1)
        os_ << indent << "*reinterpret_cast<AlloyVec<" << storage_type(a_.outputs[k]->dtype()) << ", " << v_.vector << ">*>(" << ptr
            << ") = w" << k << ";\n";
      else
        os_ << indent << "*(" << ptr << ") = w" << k << ".v[0];\n";
    }
  }

  std::vector<const Value*> element_outputs() const {
    std::vector<const Value*> outs;
    for (Value* o : a_.outputs)
      if (!a_.is_reduction() || !a_.at(o).per_row) outs.push_back(o);
    return outs;
  }

  void emit_pointwise_kernel() {
    int R = v_.outer_rank;
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads << ") " << name_ << "(const Params p) {\n";
    os_ << "  const long long slots = p.numel / " << v_.vector << ";\n";
    os_ << "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < slots; q += (long long)gridDim.x * blockDim.x) {\n";
    emit_offsets("q * " + std::to_string(v_.vector), 0, R, "off_", tensor_names(true, true, false), "    ");
    cached_ = element_leaves();
    emit_leaf_arrays("L", "", "    ", cached_);
    emit_leaf_loads("L", "", "off_", "    ", cached_);
    auto ops = element_ops_for(element_outputs());
    emit_vector_stores("off_", "    ", "", [&](const std::string& indent) {
      for (const Op* op : ops) emit_op(*op, "", indent);
    });
    os_ << "  }\n}\n";
  }

  // ---- column kernels: single-pass reductions over outer axes, split over blocks ----

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

  // The value a sum, mean, max or min starts from, in register type T.
  static std::string identity_of(const Op& r, const std::string& T) {
    switch (r.kind) {
      case OpKind::max:
        return T == "alloy_i64" ? "(long long)(-9223372036854775807LL - 1)" : T == "bool" ? "false" : "-" + T + "(__longlong_as_double(0x7ff0000000000000LL))";
      case OpKind::min:
        return T == "alloy_i64" ? "(long long)9223372036854775807LL" : T == "bool" ? "true" : T + "(__longlong_as_double(0x7ff0000000000000LL))";
      default:
        return T + "(0)";
    }
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
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads << ") " << name_ << "(const Params p) {\n";
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
      std::string l = "l" + std::to_string(k);
      os_ << in << compute_type(a_.leaves[k]->dtype()) << " PV" << k << "[" << V << "] = {};\n";
      os_ << in << "if (active) {\n" << in << "  #pragma unroll\n" << in << "  for (int e = 0; e < " << V << "; ++e) PV" << k << "[e] = "
          << load_convert(a_.leaves[k]->dtype(), "p." + l + "[ro_" + l + along_kept(l) + "]") << ";\n" << in << "}\n";
    }
    emit_column_identity(ck.accs, in, true);
    if (ck.welford) os_ << in << ck.count_type << " alloy_n = 0;\n";
  }

  // The pass over this thread's share of the reduced axes, four reduced indices a step (their
  // loads all issued before any is used), storing per-element outputs as it goes.
  void emit_column_pass(const ColumnKernel& ck) {
    constexpr int kUnroll = 4;
    const std::string in = "  ";
    std::vector<const Value*> targets = element_outputs();
    for (auto& acc : ck.accs) targets.push_back(acc.op->inputs[0]);
    std::set<int> leaves = leaves_for(targets);
    std::vector<std::string> leaf_tensors, output_tensors;
    for (int k : leaves) leaf_tensors.push_back("l" + std::to_string(k));
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      if (!a_.at(a_.outputs[k]).per_row) output_tensors.push_back("o" + std::to_string(k));
    cached_ = leaves;  // ref() reads them as L<k>[u]
    os_ << in << "if (active) {\n";
    os_ << in << "  const long long alloy_step = (long long)gridDim.y * " << ck.ty << ";\n";
    os_ << in << "  for (long long r0 = (long long)blockIdx.y * " << ck.ty << " + ty; r0 < p.cols; r0 += " << kUnroll << " * alloy_step) {\n";
    std::string body = in + "    ";
    emit_leaf_arrays("L", "[" + std::to_string(kUnroll) + "]", body, leaves);
    auto unrolled = [&](const std::function<void(const std::string&)>& emit) {
      os_ << body << "#pragma unroll\n" << body << "for (int u = 0; u < " << kUnroll << "; ++u) {\n";
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
    unrolled([&](const std::string& indent) {
      emit_offsets("r", v_.outer_rank, v_.inner_rank, "co_", output_tensors, indent);
      for (auto& t : output_tensors) os_ << indent << "co_" << t << " += ro_" << t << ";\n";
      if (ck.welford)
        os_ << indent << "alloy_n += 1; const " << ck.count_type << " alloy_inv_n = " << ck.count_type << "(1) / alloy_n;\n";
      emit_vector_stores("co_", indent, "[u]", [&](const std::string& inner) {
        emit_column_per_row_registers(ck, inner);
        emitted_per_row_.clear();
        emit_ready_per_row_ops(inner);
        for (const Op* op : ops) emit_op(*op, "[u]", inner);
        for (auto& acc : ck.accs) {
          std::string x = "((" + acc.ct + ")" + ref(acc.op->inputs[0], "[u]") + ")";
          if (acc.op->kind == OpKind::var_mean)
            os_ << inner << "{ " << acc.ct << " x = " << x << ", d = x - " << acc.words[1] << "[e]; " << acc.words[1] << "[e] += d * ("
                << acc.ct << ")alloy_inv_n; " << acc.words[2] << "[e] += d * (x - " << acc.words[1] << "[e]); }\n";
          else
            emit_column_merge(acc, inner, [&](int) { return x; });
        }
      });
    });
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
    os_ << in << "  __threadfence();\n" << in << "  __syncthreads();\n";
    os_ << in << "  if (threadIdx.x == 0) alloy_last = atomicAdd(p.counters + blockIdx.x, 1u) == gridDim.y - 1;\n";
    os_ << in << "  __syncthreads();\n" << in << "  if (!alloy_last) return;\n" << in << "  __threadfence();\n";
    emit_column_identity(ck.accs, in + "  ", false);
    os_ << in << "  if (active) {\n" << in << "    for (unsigned y = ty; y < gridDim.y; y += " << ck.ty << ") {\n";
    os_ << in << "      #pragma unroll\n" << in << "      for (int e = 0; e < " << V << "; ++e) {\n";
    for (auto& acc : ck.accs)
      emit_column_merge(acc, in + "        ", [&](int w) {
        return "*(volatile " + acc.ct + "*)(" + acc.words[w] + "_ws + (long long)y * p.rows + k0 + e)";
      });
    os_ << in << "      }\n" << in << "    }\n" << in << "  }\n";
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

  // ---- row kernels (reductions and normalizations) ----

  struct Acc {
    const Op* op;
    std::string name;  // register prefix
    const char* ct;
  };

  void emit_row_kernel() {
    plan_value_cache();
    detect_online_softmax();
    plan_cached_leaves();
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << v_.threads;
    if (v_.min_blocks > 0) os_ << ", " << v_.min_blocks;
    os_ << ") " << name_ << "(const Params p) {\n";
    if (v_.lean) os_ << "  __shared__ double alloy_smem[2 * 99];  // two regions, alternated by consecutive reductions\n";
    else os_ << "  __shared__ double alloy_smem[99];\n";
    if (v_.rows_per_block > 0) {  // one warp per row: reductions are shuffles, no block barrier
      os_ << "  const int tid = threadIdx.x & 31;\n";
      os_ << "  for (long long row = (long long)blockIdx.x * " << v_.rows_per_block << " + (threadIdx.x >> 5); row < p.rows; row += (long long)gridDim.x * "
          << v_.rows_per_block << ") {\n";
    } else {
      os_ << "  const int tid = threadIdx.x;\n";
      os_ << "  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {\n";
    }
    std::string in = "    ";
    std::vector<std::string> row_tensors = tensor_names(true, true, false), per_row_tensors = tensor_names(true, true, true);
    std::vector<std::string> all = row_tensors;
    all.insert(all.end(), per_row_tensors.begin(), per_row_tensors.end());
    emit_offsets("row", 0, v_.outer_rank, "ro_", all, in);
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      if (a_.at(a_.leaves[k]).per_row)
        os_ << in << compute_type(a_.leaves[k]->dtype()) << " P" << k << " = "
            << load_convert(a_.leaves[k]->dtype(), "p.l" + std::to_string(k) + "[ro_l" + std::to_string(k) + "]") << ";\n";
    for (auto& [v, pass] : cache_pass_)
      os_ << in << "AlloyVec<" << compute_type(v->dtype()) << ", " << v_.vector << "> C" << v->id << "[" << v_.items << "];\n";
    emit_cached_row(in);
    emitted_per_row_.clear();
    emit_ready_per_row_ops(in);
    for (auto& stage : a_.stages) {
      current_pass_ = int(&stage - &a_.stages[0]);
      two_pass_ = v_.items > 0;  // with the row in registers, var_mean is mean first, then squares
      std::vector<Acc> accs;
      for (const Op* r : stage) accs.push_back(declare_acc(*r, in));
      std::vector<const Value*> targets;
      for (auto& acc : accs) targets.push_back(acc.op->inputs[0]);
      emit_column_loop(in, targets, [&](const std::string& indent, const std::string& element) {
        for (auto& acc : accs) accumulate(acc, indent, element);
      });
      if (two_pass_ && stage_has_var_mean(stage)) emit_var_mean_deviations(accs, in);
      for (auto& acc : accs) finish_acc(acc, in);
      emit_ready_per_row_ops(in);
    }
    current_pass_ = int(a_.stages.size());
    auto outs = element_outputs();
    if (!outs.empty()) emit_column_loop(in, outs, {}, true);
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      if (a_.at(a_.outputs[k]).per_row)
        os_ << in << "if (tid == 0) p.o" << k << "[ro_o" << k << "] = " << store_convert(a_.outputs[k]->dtype(), ref(a_.outputs[k], "")) << ";\n";
    if (v_.rows_per_block == 0) os_ << in << "__syncthreads();\n";
    os_ << "  }\n}\n";
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
    for (int k : leaves_for(element_outputs())) passes[k] += 1;
    current_pass_ = 0;
    for (auto [k, n] : passes)
      if (n > 1) cached_.insert(k);
  }

  // Loads the row's cached leaves once, into L<k>[it].
  void emit_cached_row(const std::string& in) {
    if (v_.items == 0 || cached_.empty()) return;
    std::vector<std::string> row_tensors = tensor_names(true, true, false);
    emit_leaf_arrays("L", "[" + std::to_string(v_.items) + "]", in, cached_);
    os_ << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << v_.items << "; ++it) {\n";
    os_ << in << "  [[maybe_unused]] const long long col0 = ((long long)it * " << lanes() << " + tid) * " << v_.vector << ";\n";
    os_ << in << "  " << open_col_guard("col0") << "\n";
    emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", row_tensors, in + "    ");
    for (auto& t : row_tensors) os_ << in << "    co_" << t << " += ro_" << t << ";\n";
    emit_leaf_loads("L", "[it]", "co_", in + "    ", cached_);
    os_ << in << "  }\n" << in << "}\n";
  }

  // The row is in registers: var_mean's mean first, then the squared deviations from it. Lean
  // without cheap merges: each thread's own (count, mean, squared deviations), then one
  // block-wide Welford merge (one barrier); else the row's mean from a block reduction, and the
  // deviations' sum from another.
  void emit_var_mean_deviations(const std::vector<Acc>& accs, const std::string& in) {
    std::vector<const Value*> var_targets;
    for (auto& acc : accs) {
      if (acc.op->kind != OpKind::var_mean) continue;
      std::string T = acc.ct;
      if (v_.lean && !v_.cheap_merges) {
        os_ << in << T << " " << acc.name << "_n = 0;\n";
        os_ << in << "#pragma unroll\n" << in << "for (int it = 0; it < " << v_.items << "; ++it) " << open_col_guard("((long long)it * " + std::to_string(lanes())
            + " + tid) * " + std::to_string(v_.vector)) << " " << acc.name << "_n += " << T << "(" << v_.vector << "); }\n";
        os_ << in << T << " " << acc.name << "_mean = " << acc.name << "_n > " << T << "(0) ? " << acc.name << "_sum / " << acc.name
            << "_n : " << T << "(0);\n";
      } else {
        os_ << in << T << " " << acc.name << "_mean = " << reduce_fn() << "(" << acc.name << "_sum, AlloySum(), reinterpret_cast<" << T
            << "*>(" << smem_region() << ")) / (" << T << ")p.count;\n";
      }
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
      os_ << in << "  [[maybe_unused]] const long long col0 = ((long long)it * " << lanes() << " + tid) * " << v_.vector << ";\n";
      os_ << in << "  " << open_col_guard("col0") << "\n";
      std::vector<std::string> addressed;
      if (store) addressed = tensor_names(false, true, false);
      for (int k : uncached) addressed.push_back("l" + std::to_string(k));
      if (!addressed.empty()) {
        emit_offsets("col0", v_.outer_rank, v_.inner_rank, "co_", addressed, in + "    ");
        for (auto& t : addressed) os_ << in << "    co_" << t << " += ro_" << t << ";\n";
      }
      emit_leaf_arrays("U", "", in + "    ", uncached);
      emit_leaf_loads("U", "", "co_", in + "    ", uncached);
      if (store) {
        emit_vector_stores("co_", in + "    ", "[it]", [&](const std::string& indent) { element(indent, "[it]"); });
      } else {
        os_ << in << "    #pragma unroll\n" << in << "    for (int e = 0; e < " << v_.vector << "; ++e) {\n";
        element(in + "      ", "[it]");
        body(in + "      ", "[it]");
        os_ << in << "    }\n";
      }
      os_ << in << "  }\n" << in << "}\n";
      return;
    }
    os_ << in << "for (long long q = tid; q * " << v_.vector << " < p.cols; q += " << lanes() << ") {\n";
    os_ << in << "  const long long col0 = q * " << v_.vector << ";\n";
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
    std::string region = smem_region();
    if (online_stage_ >= 0 && &r == a_.stages[online_stage_ + 1][0]) {
      std::string top = "acc" + std::to_string(a_.stages[online_stage_][0]->outputs[0]->id);
      if (v_.cheap_merges) {
        // the row's max, then the sum of each thread's sum rescaled to it: two plain reductions
        // instead of one whose every step takes two exps
        os_ << in << "float alloy_online_max = " << reduce_fn() << "(" << top << ", AlloyMax(), reinterpret_cast<float*>(" << region
            << "));\n";
        os_ << in << "const float alloy_thread_scale = " << top << " < -3.402823466e38f ? 0.0f : ax_exp(" << top << " - alloy_online_max);\n";
        os_ << in << "float alloy_online_sum = " << reduce_fn() << "(" << acc.name << " * alloy_thread_scale, AlloySum(), reinterpret_cast<float*>("
            << smem_region() << "));\n";
      } else {
        os_ << in << "float alloy_online_max = " << top << ", alloy_online_sum = " << acc.name << ";\n";
        os_ << in << (v_.rows_per_block ? "alloy_warp_online" : "alloy_block_online") << "(alloy_online_max, alloy_online_sum, reinterpret_cast<float*>("
            << region << "));\n";
      }
      if (online_exp_ && v_.cheap_merges) {
        os_ << in << "const float alloy_online_scale = alloy_thread_scale;\n";
      } else if (online_exp_) {
        os_ << in << "const float alloy_online_scale = " << top << " < -3.402823466e38f ? 0.0f : ax_exp(" << top << " - alloy_online_max);\n";
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
    if (r.kind == OpKind::var_mean) {
      std::string smem = "reinterpret_cast<" + T + "*>(" + region + ")";
      if (two_pass_ && (!v_.lean || v_.cheap_merges))
        os_ << in << acc.name << "_m2 = " << reduce_fn() << "(" << acc.name << "_m2, AlloySum(), " << smem << ");\n";
      else
        os_ << in << (v_.rows_per_block ? "alloy_warp_welford(" : v_.lean ? "alloy_block_welford_lean(" : "alloy_block_welford(")
            << acc.name << "_n, " << acc.name << "_mean, " << acc.name << "_m2, " << smem << ");\n";
      double correction = r.real_attr("correction");
      std::string var = acc.name + "_m2 / (" + T + ")fmax(0.0, p.count - " + std::to_string(correction) + ")";
      os_ << in << T << " v" << r.outputs[0]->id << " = " << round_to_dtype(r.outputs[0]->dtype(), var) << ";\n";
      os_ << in << T << " v" << r.outputs[1]->id << " = " << round_to_dtype(r.outputs[1]->dtype(), acc.name + "_mean") << ";\n";
    } else {
      const char* f = r.kind == OpKind::max ? "AlloyMax()" : r.kind == OpKind::min ? "AlloyMin()" : "AlloySum()";
      std::string ct_red = T == "bool" ? "alloy_i64" : T;
      os_ << in << T << " v" << r.outputs[0]->id << " = (" << T << ")" << reduce_fn() << "((" << ct_red << ")" << acc.name << ", " << f
          << ", reinterpret_cast<" << ct_red << "*>(" << region << "));\n";
      if (r.kind == OpKind::mean) os_ << in << "v" << r.outputs[0]->id << " /= (" << T << ")p.count;\n";
      DType dt = r.outputs[0]->dtype();
      if (dt == DType::bf16 || dt == DType::f16)
        os_ << in << "v" << r.outputs[0]->id << " = " << round_to_dtype(dt, "v" + std::to_string(r.outputs[0]->id)) << ";\n";
    }
    for (Value* out : r.outputs) emitted_per_row_.insert(out);
  }

  // Per-row ops whose inputs are all available now.
  void emit_ready_per_row_ops(const std::string& in) {
    bool progress = true;
    while (progress) {
      progress = false;
      for (const Op* op : a_.compute_ops) {
        if (op_row(op->kind).op_class == OpClass::reduction || emitted_per_row_.count(op->outputs[0])) continue;
        if (!a_.at(op->outputs[0]).per_row) continue;
        bool ready = true;
        for (Value* i : op->inputs)
          if (!i->literal && !scalar_index_.count(i) && !(leaf_index_.count(i)) && !emitted_per_row_.count(i)) ready = false;
        if (!ready) continue;
        emit_op(*op, "", in);
        emitted_per_row_.insert(op->outputs[0]);
        progress = true;
      }
    }
  }

  const KernelAnalysis& a_;
  const KernelVariant& v_;
  std::string name_;
  std::ostringstream os_;
  std::map<const Value*, int> leaf_index_, scalar_index_;
  std::set<const Value*> emitted_per_row_;
  std::set<int> cached_;   // leaves held in registers across passes
  std::map<const Value*, int> cache_pass_;  // computed values held in registers, by the pass that computes them
  int current_pass_ = 0;   // the stage being emitted; the stage count for the final pass
  int online_stage_ = -1;  // online softmax: the max's stage (the sum's is the next), or -1
  const Value* online_exp_ = nullptr;  // its exp, held in registers and rescaled where read (or null)
  std::vector<const Value*> online_chain_;  // the views from the max to what exp(x - .) reads, last first
  std::set<const Value*> used_in_kernel_;  // values some op of the kernel reads
  bool two_pass_ = false;  // var_mean as a sum, then squared deviations, over cached rows

  int lanes() const { return v_.rows_per_block ? 32 : v_.threads; }
  // The bounds check of a thread's vector at column `col` of the row, opening a block; none where
  // every vector a thread holds is inside the row (KernelVariant::full_rows).
  std::string open_col_guard(const std::string& col) const { return v_.full_rows ? "{" : "if (" + col + " < p.cols) {"; }
  const char* reduce_fn() const {
    return v_.rows_per_block ? "alloy_warp_reduce" : v_.lean ? "alloy_block_reduce_lean" : "alloy_block_reduce";
  }
  // Lean block reductions alternate between two shared regions (see alloy_block_reduce_lean); a
  // barrier ends each row, so the parity may restart there.
  int reductions_in_row_ = 0;
  std::string smem_region() {
    if (!v_.lean) return "alloy_smem";
    return "alloy_smem + " + std::to_string(99 * (reductions_in_row_++ % 2));
  }

  static bool stage_has_var_mean(const std::vector<const Op*>& stage) {
    for (const Op* r : stage)
      if (r->kind == OpKind::var_mean) return true;
    return false;
  }
};

}  // namespace

std::string KernelVariant::key() const {
  return "r" + std::to_string(outer_rank) + "." + std::to_string(inner_rank) + "_v" + std::to_string(vector) + "_t" +
         std::to_string(threads) + "_i" + std::to_string(items) + (rows_per_block ? "_w" + std::to_string(rows_per_block) : "") +
         (min_blocks ? "_b" + std::to_string(min_blocks) : "") + (tile_x ? "_x" + std::to_string(tile_x) + (ty_fast ? "y" : "") : "") + (index32 ? "_32" : "") + (lean ? "_lean" : "") + (recompute ? "_rc" : "") + (cheap_merges ? "_cm" : "") + (full_rows ? "_f" : "") + "_" +
         leaf_modes;
}

std::string generate_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name) {
  return Generator(analysis, variant, name).run();
}

int param_words(const KernelAnalysis& a, const KernelVariant& v) {
  int dims = std::max(1, v.outer_rank + v.inner_rank);
  int header = a.is_reduction() ? (v.tile_x > 0 ? 5 : 3) : 1;
  return header + dims + int(a.leaves.size() + a.outputs.size()) * (1 + dims) + int(a.scalar_inputs.size());
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

}  // namespace alloy::cuda
