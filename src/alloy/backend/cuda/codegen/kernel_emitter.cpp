#include "alloy/backend/cuda/codegen/kernel_emitter.h"

#include <algorithm>
#include <functional>

#include "alloy/backend/cuda/codegen/cuda_expressions.h"
#include "alloy/backend/cuda/codegen/prelude.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {

KernelEmitter::KernelEmitter(const KernelAnalysis& a, const KernelVariant& v, std::string name) : a_(a), v_(v), name_(std::move(name)) {
  for (size_t k = 0; k < a.leaves.size(); ++k) leaf_index_[a.leaves[k]] = int(k);
  for (size_t k = 0; k < a.scalar_inputs.size(); ++k) scalar_index_[a.scalar_inputs[k]] = int(k);
  size_t cats = 0;
  for (size_t k = 0; k < a.leaves.size(); ++k) {
    if (!a.cat_leaf(a.leaves[k])) continue;
    ALLOY_CHECK(cats < v.cat_axes.size(), "the variant ", v.key(), " does not place cat leaf ", a.leaves[k]->name);
    position_axis_["l" + std::to_string(k) + "_at"] = v.cat_axes[cats++];
  }
}

void KernelEmitter::emit_header() {
  for (const Op* op : a_.compute_ops)
    for (Value* in : computed_from(*op)) used_in_kernel_.insert(in);
  if (v_.row_groups > 1) os_ << "#define ALLOY_ROW_GROUP_THREADS " << v_.threads << "  // the threads of a row group\n";
  os_ << kKernelPrelude << "\n";
  emit_params();
}

void KernelEmitter::emit_params() {
  os_ << "typedef " << (v_.index32 ? "int" : "long long") << " alloy_idx;\n";
  os_ << "struct Params {\n";
  if (a_.is_reduction()) os_ << "  long long rows, cols;\n  double count;\n";
  else os_ << "  long long numel;\n";
  if (a_.is_reduction() && (v_.tile_x > 0 || v_.grid || v_.inner_outer)) os_ << "  unsigned long long* ws;\n  unsigned* counters;\n";
  os_ << "  long long size[" << std::max(1, dims()) << "];\n";
  for (size_t k = 0; k < a_.leaves.size(); ++k) {
    const CatLeaf* cat = a_.cat_leaf(a_.leaves[k]);
    if (a_.is_position(a_.leaves[k])) {  // no memory: the value of its first element
      os_ << "  long long l" << k << "; long long l" << k << "_stride[" << std::max(1, dims()) << "];\n";
      continue;
    }
    if (!cat) {
      os_ << "  const " << storage_type(a_.leaves[k]->dtype()) << "* l" << k << "; long long l" << k << "_stride[" << std::max(1, dims()) << "];\n";
      continue;
    }
    // a cat leaf: each source's pointer (moved back by its start along the cat's axis) and strides,
    // then where each source but the last ends along that axis
    std::vector<std::string> names = leaf_tensor_names(int(k));
    for (size_t r = 0; r < cat->sources.size(); ++r)
      os_ << "  const " << storage_type(cat->sources[r]->dtype()) << "* " << names[r] << "; long long " << names[r] << "_stride["
          << std::max(1, dims()) << "];\n";
    if (cat->sources.size() > 1) os_ << "  long long l" << k << "_end[" << cat->sources.size() - 1 << "];\n";
  }
  for (size_t j = 0; j < a_.gathers.size(); ++j) {
    const std::string g = "g" + std::to_string(j), n = std::to_string(std::max(1, dims()));
    os_ << "  const " << storage_type(a_.gathers[j].source->dtype()) << "* " << g << "; long long " << g << "_stride[" << n << "];\n"
        << "  long long " << g << "p; long long " << g << "p_stride[" << n << "];\n"
        << "  long long " << g << "_step, " << g << "_size;\n";
  }
  for (size_t k = 0; k < a_.outputs.size(); ++k)
    os_ << "  " << storage_type(a_.outputs[k]->dtype()) << "* o" << k << "; long long o" << k << "_stride[" << std::max(1, dims()) << "];\n";
  for (size_t k = 0; k < a_.scalar_inputs.size(); ++k)
    os_ << "  " << (is_floating(a_.scalar_inputs[k]->dtype()) ? "double" : "long long") << " s" << k << ";\n";
  if (!a_.gathers.empty()) os_ << "  unsigned long long* err;\n";
  os_ << "};\n";
  // the host fills Params word by word (param_words): the layouts must agree
  os_ << "static_assert(sizeof(Params) == " << param_words(a_, v_) << " * 8, \"Params layout\");\n\n";
  if (!a_.gathers.empty()) emit_gather_fault_function();
}

void KernelEmitter::emit_offsets(const std::string& index, int first, int count, const std::string& prefix,
                                 const std::vector<std::string>& tensors, const std::string& indent) {
  // alloy_idx: int where the host found every offset small (KernelVariant::index32)
  for (auto& t : tensors) os_ << indent << "alloy_idx " << prefix << t << " = 0;\n";
  if (count == 0) return;
  os_ << indent << "{ alloy_idx rem = (alloy_idx)(" << index << ");\n";
  for (int d = first + count - 1; d >= first; --d) {
    if (d == first) os_ << indent << "  alloy_idx c" << d << " = rem;\n";
    else os_ << indent << "  alloy_idx c" << d << " = rem % (alloy_idx)p.size[" << d << "]; rem /= (alloy_idx)p.size[" << d << "];\n";
    for (auto& t : tensors) {
      auto position = position_axis_.find(t);
      if (position == position_axis_.end())
        os_ << indent << "  " << prefix << t << " += c" << d << " * (alloy_idx)p." << t << "_stride[" << d << "];\n";
      else if (position->second == d)
        os_ << indent << "  " << prefix << t << " += c" << d << ";\n";
    }
  }
  os_ << indent << "}\n";
}

std::vector<std::string> KernelEmitter::tensor_names(bool leaves, bool outputs, bool per_row) const {
  std::vector<std::string> names;
  if (leaves)
    for (size_t k = 0; k < a_.leaves.size(); ++k)
      if (a_.at(a_.leaves[k]).per_row == per_row || !a_.is_reduction()) {
        std::vector<std::string> leaf = leaf_tensor_names(int(k));
        names.insert(names.end(), leaf.begin(), leaf.end());
      }
  if (leaves) {
    std::vector<std::string> gathers = gather_tensor_names(per_row);
    names.insert(names.end(), gathers.begin(), gathers.end());
  }
  if (outputs)
    for (size_t k = 0; k < a_.outputs.size(); ++k)
      if ((a_.at(a_.outputs[k]).per_row == per_row && !a_.at(a_.outputs[k]).per_column) || !a_.is_reduction())
        names.push_back("o" + std::to_string(k));
  return names;
}

std::string KernelEmitter::ref(const Value* v, const std::string& element) const {
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

bool KernelEmitter::held_from_earlier_pass(const Value* v) const {
  auto it = cache_pass_.find(v);
  return it != cache_pass_.end() && current_pass_ > it->second;
}

void KernelEmitter::emit_op(const Op& op, const std::string& element, const std::string& indent) {
  const Value* out = op.outputs[0];
  const char* out_ct = compute_type(out->dtype());
  if (op_row(op.kind).op_class == OpClass::shape) {
    os_ << indent << out_ct << " v" << out->id << " = " << ref(op.inputs[0], element) << ";\n";
    return;
  }
  if (op.kind == OpKind::gather) return emit_gather(op, element, indent);
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

std::vector<const Op*> KernelEmitter::element_ops_for(const std::vector<const Value*>& targets) const {
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
    for (Value* in : computed_from(*op)) needed.insert(in);
  }
  std::reverse(ops.begin(), ops.end());
  return ops;
}

void KernelEmitter::emit_leaf_loads(const std::string& prefix, const std::string& target, const std::string& offset_prefix,
                                    const std::string& indent, const std::set<int>& which) {
  for (int k : which) {
    const Value* leaf = a_.leaves[k];
    std::string dst = prefix + std::to_string(k) + target;
    if (a_.is_position(leaf)) {
      emit_position_load(k, dst, offset_prefix, indent);
      continue;
    }
    if (const CatLeaf* cat = a_.cat_leaf(leaf)) {
      emit_cat_leaf_load(k, *cat, dst, offset_prefix, indent);
      continue;
    }
    std::string st = storage_type(leaf->dtype()), ptr = leaf_pointer(k, offset_prefix);
    std::string vec = "AlloyVec<" + st + ", " + std::to_string(v_.vector) + ">";
    switch (mode_of_leaf(k)) {
      case 'v':
        os_ << indent << dst << " = *reinterpret_cast<const " << vec << "*>(" << ptr << ");\n";
        break;
      case 'b':
        os_ << indent << "{ " << st << " r = *(" << ptr << ");\n" << indent << "  #pragma unroll\n" << indent << "  for (int e = 0; e < "
            << v_.vector << "; ++e) " << dst << ".v[e] = r; }\n";
        break;
      case 'u':
        os_ << indent << "#pragma unroll\n" << indent << "for (int e = 0; e < " << v_.vector << "; ++e) " << dst << ".v[e] = (" << ptr
            << ")[e];\n";
        break;
      default:
        os_ << indent << dst << ".v[0] = *(" << ptr << ");\n";
    }
  }
}

std::pair<std::string, int> KernelEmitter::edge_reference() const {
  for (size_t k = 0; k < a_.outputs.size(); ++k)
    if (a_.per_element(a_.outputs[k])) return {"o" + std::to_string(k), dtype_size(a_.outputs[k]->dtype())};
  for (int k : element_leaves())
    if (mode_of_leaf(k) == 'v' && !a_.is_position(a_.leaves[k])) return {"l" + std::to_string(k), dtype_size(a_.leaves[k]->dtype())};
  internal_error("edge elements without a tensor read or written in vectors");
}

void KernelEmitter::emit_edge_head(const std::string& name, const std::string& offset, const std::string& extent, const std::string& indent) {
  auto [reference, bytes] = edge_reference();
  os_ << indent << "long long " << name << " = (" << v_.vector << " - (long long)((unsigned long long)(p." << reference << " + " << offset
      << ") / " << bytes << " % " << v_.vector << ")) % " << v_.vector << ";\n";
  os_ << indent << "if (" << name << " > " << extent << ") " << name << " = " << extent << ";\n";
}

void KernelEmitter::emit_edge_element(const std::string& offset_prefix, const std::string& indent, const std::set<int>& which,
                                      const std::function<void(const std::string&)>& body) {
  for (int k : which)
    os_ << indent << "AlloyVec<" << storage_type(a_.leaves[k]->dtype()) << ", " << v_.vector << "> " << (cached_.count(k) ? "L" : "U") << k
        << " = {};\n" << indent << (cached_.count(k) ? "L" : "U") << k << ".v[0] = " << leaf_raw(k, offset_prefix) << ";\n";
  os_ << indent << "{\n" << indent << "  const int e = 0;\n";
  body(indent + "  ");
  os_ << indent << "}\n";
}

void KernelEmitter::emit_vector_slot(const std::vector<const Op*>& ops, const std::string& indent) {
  emit_leaf_arrays("L", "", indent, cached_);
  emit_leaf_loads("L", "", "off_", indent, cached_);
  emit_vector_stores("off_", indent, "", [&](const std::string& in) {
    for (const Op* op : ops) emit_op(*op, "", in);
  });
}

void KernelEmitter::emit_element_slot(const std::vector<const Op*>& ops, const std::string& indent) {
  emit_edge_element("off_", indent, cached_, [&](const std::string& in) {
    for (const Op* op : ops) emit_op(*op, "", in);
    emit_element_stores("off_", in);
  });
}

void KernelEmitter::emit_element_stores(const std::string& offset_prefix, const std::string& indent) {
  for (size_t k = 0; k < a_.outputs.size(); ++k)
    if (a_.per_element(a_.outputs[k]))
      os_ << indent << "p.o" << k << "[" << offset_prefix << "o" << k << "] = " << store_convert(a_.outputs[k]->dtype(), ref(a_.outputs[k], ""))
          << ";\n";
}

std::vector<std::string> KernelEmitter::leaf_tensor_names(int k) const {
  std::string l = "l" + std::to_string(k);
  const CatLeaf* cat = a_.cat_leaf(a_.leaves[k]);
  if (!cat) return {l};
  std::vector<std::string> names{l};
  for (size_t r = 1; r < cat->sources.size(); ++r) names.push_back(l + "s" + std::to_string(r));
  names.push_back(l + "_at");
  return names;
}

namespace {

// The source a cat leaf's position selects: `pick(r)` for source r, chosen by a chain of
// `position < end of source r ?` tests.
std::string select_source(int k, size_t sources, const std::string& position, const std::function<std::string(size_t)>& pick) {
  std::string text = pick(sources - 1);
  for (size_t r = sources - 1; r-- > 0;)
    text = "(" + position + " < p.l" + std::to_string(k) + "_end[" + std::to_string(r) + "] ? " + pick(r) + " : " + text + ")";
  return text;
}

}  // namespace

std::string through_chain(const std::vector<const Op*>& chain, DType from, DType to, const std::string& raw) {
  if (chain.empty()) return from == to ? raw : store_convert(to, load_convert(from, raw));
  std::string x = load_convert(from, raw);
  DType cur = from;
  for (const Op* op : chain) {
    bool last = op == chain.back();
    DType out = op->outputs[0]->dtype();
    std::string out_ct = compute_type(out), expr;
    if (op->kind == OpKind::cast) {
      expr = "((" + out_ct + ")" + x + ")";
    } else {
      const char* ct = compute_type(op_compute_dtype(*op));
      std::vector<std::string> args;
      for (const Value* in : op->inputs)
        args.push_back(in->literal ? literal_text(*in->literal, ct) : std::string(compute_type(cur)) != ct ? "((" + std::string(ct) + ")" + x + ")" : x);
      expr = pointwise_expr(*op, args, ct);
    }
    x = "(" + out_ct + ")(" + expr + ")";
    if (!(last && out == to)) x = round_to_dtype(out, x);  // the store rounds the last
    cur = out;
  }
  return store_convert(to, x);
}

std::string KernelEmitter::leaf_pointer(int k, const std::string& offset_prefix) const {
  std::string l = "l" + std::to_string(k);
  const CatLeaf* cat = a_.cat_leaf(a_.leaves[k]);
  if (!cat) return "p." + l + " + " + offset_prefix + l;
  std::vector<std::string> names = leaf_tensor_names(k);
  return select_source(k, cat->sources.size(), offset_prefix + l + "_at",
                       [&](size_t r) { return "p." + names[r] + " + " + offset_prefix + names[r]; });
}

std::string KernelEmitter::leaf_raw(int k, const std::string& offset_prefix,
                                    const std::function<std::string(const std::string&)>& extra) const {
  auto element = [&](const std::string& name) { return "p." + name + "[" + offset_prefix + name + (extra ? extra(name) : "") + "]"; };
  std::string l = "l" + std::to_string(k);
  const Value* leaf = a_.leaves[k];
  if (a_.is_position(leaf)) return position_raw(k, offset_prefix, extra ? extra(l) : "");
  const CatLeaf* cat = a_.cat_leaf(leaf);
  if (!cat) return element(l);
  std::vector<std::string> names = leaf_tensor_names(k);
  return select_source(k, cat->sources.size(), offset_prefix + l + "_at", [&](size_t r) {
    // each source through its chain and converted to the cat's dtype, as the cat would store it
    return through_chain(cat->chains[r], cat->sources[r]->dtype(), leaf->dtype(), element(names[r]));
  });
}

// A cat leaf's load: a vector at once from the source its position selects where every source
// has the cat's dtype (the launch plan keeps a vector inside one source), else element by
// element, each converted to the cat's dtype.
void KernelEmitter::emit_cat_leaf_load(int k, const CatLeaf& cat, const std::string& dst, const std::string& offset_prefix,
                                       const std::string& indent) {
  std::string st = storage_type(a_.leaves[k]->dtype());
  switch (mode_of_leaf(k)) {
    case 'v':
      if (!cat.mixed_dtypes && !cat.has_chains()) {
        os_ << indent << dst << " = *reinterpret_cast<const AlloyVec<" << st << ", " << v_.vector << ">*>(" << leaf_pointer(k, offset_prefix)
            << ");\n";
      } else if (!cat.mixed_dtypes) {
        // a vector from the source the position selects (a vector lies inside one source), then
        // that source's chain on each element
        std::string at = offset_prefix + "l" + std::to_string(k) + "_at";
        os_ << indent << "{ const AlloyVec<" << st << ", " << v_.vector << "> raw = *reinterpret_cast<const AlloyVec<" << st << ", "
            << v_.vector << ">*>(" << leaf_pointer(k, offset_prefix) << ");\n"
            << indent << "  const int source = " << select_source(k, cat.sources.size(), at, [](size_t r) { return std::to_string(r); })
            << ";\n" << indent << "  #pragma unroll\n" << indent << "  for (int e = 0; e < " << v_.vector << "; ++e) " << dst
            << ".v[e] = ";
        size_t n = cat.sources.size();
        std::string pick = through_chain(cat.chains[n - 1], cat.sources[n - 1]->dtype(), a_.leaves[k]->dtype(), "raw.v[e]");
        for (size_t r = n - 1; r-- > 0;)
          pick = "(source == " + std::to_string(r) + " ? " +
                 through_chain(cat.chains[r], cat.sources[r]->dtype(), a_.leaves[k]->dtype(), "raw.v[e]") + " : " + pick + ")";
        os_ << pick << "; }\n";
      } else {
        os_ << indent << "#pragma unroll\n" << indent << "for (int e = 0; e < " << v_.vector << "; ++e) " << dst << ".v[e] = "
            << leaf_raw(k, offset_prefix, [](const std::string&) { return std::string(" + e"); }) << ";\n";
      }
      break;
    case 'b':
      os_ << indent << "{ " << st << " r = " << leaf_raw(k, offset_prefix) << ";\n" << indent << "  #pragma unroll\n" << indent
          << "  for (int e = 0; e < " << v_.vector << "; ++e) " << dst << ".v[e] = r; }\n";
      break;
    default:
      os_ << indent << dst << ".v[0] = " << leaf_raw(k, offset_prefix) << ";\n";
  }
}

void KernelEmitter::emit_leaf_arrays(const std::string& prefix, const std::string& extent, const std::string& indent, const std::set<int>& which) {
  for (int k : which)
    os_ << indent << "AlloyVec<" << storage_type(a_.leaves[k]->dtype()) << ", " << v_.vector << "> " << prefix << k << extent << ";\n";
}

std::set<int> KernelEmitter::element_leaves() const {
  std::set<int> out;
  for (size_t k = 0; k < a_.leaves.size(); ++k)
    if (!a_.is_reduction() || !a_.at(a_.leaves[k]).per_row) out.insert(int(k));
  return out;
}

std::set<int> KernelEmitter::leaves_for(const std::vector<const Value*>& targets) const {
  std::set<int> out;
  auto add = [&](const Value* v) {
    auto it = leaf_index_.find(v);
    if (it != leaf_index_.end() && (!a_.is_reduction() || !a_.at(v).per_row)) out.insert(it->second);
  };
  for (const Value* t : targets) add(t);
  for (const Op* op : element_ops_for(targets))
    for (Value* in : computed_from(*op)) add(in);
  return out;
}

void KernelEmitter::emit_vector_stores(const std::string& offset_prefix, const std::string& indent, const std::string& element,
                                       const std::function<void(const std::string&)>& compute_element) {
  std::vector<int> stored;
  for (size_t k = 0; k < a_.outputs.size(); ++k)
    if (a_.per_element(a_.outputs[k])) stored.push_back(int(k));
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

std::vector<const Value*> KernelEmitter::element_outputs() const {
  std::vector<const Value*> outs;
  for (Value* o : a_.outputs)
    if (a_.per_element(o)) outs.push_back(o);
  return outs;
}

std::string KernelEmitter::identity_of(const Op& r, const std::string& T) {
  switch (r.kind) {
    case OpKind::max:
      return T == "alloy_i64" ? "(long long)(-9223372036854775807LL - 1)" : T == "bool" ? "false" : "-" + T + "(__longlong_as_double(0x7ff0000000000000LL))";
    case OpKind::min:
      return T == "alloy_i64" ? "(long long)9223372036854775807LL" : T == "bool" ? "true" : T + "(__longlong_as_double(0x7ff0000000000000LL))";
    default:
      return T + "(0)";
  }
}

void KernelEmitter::emit_ready_per_row_ops(const std::string& in) {
  bool progress = true;
  while (progress) {
    progress = false;
    for (const Op* op : a_.compute_ops) {
      if (op_row(op->kind).op_class == OpClass::reduction || emitted_per_row_.count(op->outputs[0])) continue;
      if (!a_.at(op->outputs[0]).per_row) continue;
      bool ready = true;
      for (Value* i : computed_from(*op))
        if (!i->literal && !scalar_index_.count(i) && !(leaf_index_.count(i)) && !emitted_per_row_.count(i)) ready = false;
      if (!ready) continue;
      emit_op(*op, "", in);
      emitted_per_row_.insert(op->outputs[0]);
      progress = true;
    }
  }
}

}  // namespace alloy::cuda
