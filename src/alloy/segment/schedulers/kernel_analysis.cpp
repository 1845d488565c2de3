#include "alloy/segment/schedulers/kernel_analysis.h"

#include <algorithm>
#include <set>

#include "alloy/ir/op_table.h"

namespace alloy {
namespace {

template <class T, class U>
bool contains(const std::vector<T>& v, const U& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string describe(const Op* op) {
  return (op->outputs.empty() ? std::string("?") : op->outputs[0]->name) + " = " + std::string(op_name(op->kind));
}

bool is_reduction_op(OpKind k) { return op_row(k).op_class == OpClass::reduction; }

std::vector<int> reduction_axes_of(const Op* op) {
  int rank = op->inputs[0]->rank();
  std::vector<int> axes;
  if (const Attr* dims = op->attr("dims"))
    for (auto& d : dims->list) axes.push_back(int(d.i < 0 ? d.i + rank : d.i));
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  std::sort(axes.begin(), axes.end());
  return axes;
}

// Builds the analysis op by op; `fail` records why the group is refused.
class Analyzer {
 public:
  Analyzer(const std::vector<const Op*>& ops, const std::vector<Value*>& inputs, const std::vector<Value*>& outputs)
      : ops_(ops), inputs_(inputs), outputs_(outputs) {}

  KernelAnalysisResult run() {
    split_host_views();
    if (!why_.empty()) return why_;
    choose_domain();
    if (!why_.empty()) return why_;
    for (const Op* op : a_.compute_ops) {
      lay_out(op);
      if (!why_.empty()) return why_;
    }
    assign_stages();
    check_outputs();
    if (!why_.empty()) return why_;
    return std::move(a_);
  }

 private:
  void fail(std::string why) {
    if (why_.empty()) why_ = std::move(why);
  }

  bool is_segment_input(const Value* v) const { return std::find(inputs_.begin(), inputs_.end(), v) != inputs_.end(); }

  // A pointwise op of one floating tensor operand (the others literals) that keeps its shape and
  // gives a floating value (not a comparison): foldable into a cat's load.
  static const Value* chain_operand(const Op* op) {
    OpClass c = op_row(op->kind).op_class;
    if (c != OpClass::unary && c != OpClass::binary && op->kind != OpKind::cast) return nullptr;
    const Value* tensor = nullptr;
    for (const Value* in : op->inputs) {
      if (in->literal) continue;
      if (tensor || in->is_scalar()) return nullptr;
      tensor = in;
    }
    if (!tensor || !is_floating(tensor->dtype()) || !is_floating(op->outputs[0]->dtype()) || tensor->shape() != op->outputs[0]->shape())
      return nullptr;
    return tensor;
  }

  // The cat operands that are chains of one-input pointwise ops from a host-side value, each
  // intermediate read once and not stored: their ops (folded into the cat leaf, not computed).
  void find_cat_chains(const std::set<const Value*>& host_side) {
    std::map<const Value*, int> reads;
    std::map<const Value*, const Op*> producer;
    for (const Op* op : ops_) {
      for (const Value* in : op->inputs) ++reads[in];
      for (const Value* out : op->outputs) producer[out] = op;
    }
    for (const Op* op : ops_) {
      if (op->kind != OpKind::cat) continue;
      for (const Value* in : op->inputs) {
        std::vector<const Op*> chain;
        const Value* v = in;
        while (!host_side.count(v)) {
          auto it = producer.find(v);
          if (it == producer.end() || reads[v] != 1 || contains(outputs_, v)) break;
          const Value* from = chain_operand(it->second);
          if (!from) break;
          chain.push_back(it->second);
          v = from;
        }
        if (!host_side.count(v) || chain.empty()) continue;
        std::reverse(chain.begin(), chain.end());
        chains_[in] = {const_cast<Value*>(v), chain};
        for (const Op* c : chain) folded_.insert(c);
      }
    }
  }

  // Views of segment inputs run on the host as zero-copy views; their results are leaves. A cat
  // of such values is a leaf too (a multi-source leaf, CatLeaf), read straight from its sources.
  void split_host_views() {
    std::set<const Value*> host_side;
    for (Value* in : inputs_)
      if (!in->is_scalar()) host_side.insert(in);
    {
      std::set<const Value*> viewed(host_side.begin(), host_side.end());  // the views of inputs, ahead
      for (const Op* op : ops_)
        if (is_view(op->kind) && viewed.count(op->inputs[0])) viewed.insert(op->outputs[0]);
      find_cat_chains(viewed);
    }
    auto add_leaf = [&](Value* v) {
      if (std::find(a_.leaves.begin(), a_.leaves.end(), v) == a_.leaves.end()) a_.leaves.push_back(v);
    };
    for (const Op* op : ops_) {
      if (folded_.count(op)) continue;  // applied as its cat's source loads
      if (op->kind == OpKind::iota) {  // a position leaf: element i is i
        a_.iotas.push_back(op);
        a_.positions.insert(op->outputs[0]);
        continue;
      }
      if (is_view(op->kind) && a_.positions.count(op->inputs[0])) {
        if (!views_positions(*op))
          return fail(describe(op) + ": a reshape of a view of an iota may need a copy; the kernel ends before it");
        a_.position_views.push_back(op);
        a_.positions.insert(op->outputs[0]);
        continue;
      }
      if (is_view(op->kind) && host_side.count(op->inputs[0])) {
        a_.host_views.push_back(op);
        host_side.insert(op->outputs[0]);
        continue;
      }
      switch (op_row(op->kind).op_class) {
        case OpClass::unary: case OpClass::binary: case OpClass::pointwise: case OpClass::reduction: case OpClass::shape:
          break;
        case OpClass::bitmask:
          return fail(describe(op) + " packs 32 elements to a word: it runs as a bitmask kernel of its own");
        case OpClass::indexing:  // gather (iota is a position leaf, above)
          take_gather(op, host_side);
          if (!why_.empty()) return;
          break;
        default:
          return fail(describe(op) + " is not a pointwise, reduction or view op");
      }
      if (op->kind == OpKind::cat) {
        for (Value* in : op->inputs)
          if (!host_side.count(in) && !chains_.count(in))
            return fail(describe(op) + ": cat of " + in->name +
                        ", which is not a segment input or a view of one: a kernel ends before the cat, so it reads its operands from memory");
        take_cat(op);
        continue;
      }
      if (op->kind == OpKind::slice)
        return fail(describe(op) + ": slice of a computed value needs its own segment");
      a_.compute_ops.push_back(op);
      for (Value* in : computed_from(*op)) {
        if (in->literal) continue;
        if (in->is_scalar() && is_segment_input(in)) {
          if (std::find(a_.scalar_inputs.begin(), a_.scalar_inputs.end(), in) == a_.scalar_inputs.end())
            a_.scalar_inputs.push_back(in);
        } else if (host_side.count(in) || a_.cat_leaves.count(in) || a_.positions.count(in)) {
          add_leaf(in);
        } else if (in->is_scalar() && !host_side.count(in) && !in->producer) {
          return fail("scalar " + in->name + " is not available to the kernel");
        }
      }
    }
    bool copies = false;  // a cat leaf stored as it is: the kernel copies its sources
    for (Value* out : outputs_) {
      if (host_side.count(out)) return fail(out->name + " is a view of an input; a noop segment returns it");
      if (a_.cat_leaves.count(out) || a_.positions.count(out)) {
        add_leaf(out);
        copies = true;
      }
    }
    if (a_.compute_ops.empty() && !copies) fail("no computation (only views)");
  }

  // A view of a position value the host can always make without a copy: every view but a reshape,
  // and a reshape of an iota itself (contiguous).
  bool views_positions(const Op& view) const {
    if (view.kind != OpKind::reshape) return true;
    return std::any_of(a_.iotas.begin(), a_.iotas.end(), [&](const Op* iota) { return iota->outputs[0] == view.inputs[0]; });
  }

  // A gather's load: its input x a host-side value, or one-input pointwise ops of one computed in
  // this group (recomputed on the loaded element; they stay computed for their other readers).
  void take_gather(const Op* op, const std::set<const Value*>& host_side) {
    GatherLoad g;
    g.op = op;
    const Value* v = op->inputs[0];
    while (!host_side.count(v) && v->producer && contains(ops_, v->producer)) {
      const Value* from = chain_operand(v->producer);
      if (!from) break;
      g.chain.push_back(v->producer);
      v = from;
    }
    if (!host_side.count(v))
      return fail(describe(op) + ": gather of " + op->inputs[0]->name +
                  ", which is not a segment input, a view of one or one-input pointwise ops of one: a kernel ends before the "
                  "gather, so it loads its input from memory");
    std::reverse(g.chain.begin(), g.chain.end());
    g.source = const_cast<Value*>(v);
    int rank = std::max(1, op->inputs[0]->rank());
    int64_t dim = op->int_attr("dim");
    g.axis = int(dim < 0 ? dim + rank : dim);
    a_.gathers.push_back(std::move(g));
  }

  void take_cat(const Op* op) {
    CatLeaf cat;
    cat.op = op;
    for (Value* in : op->inputs) {
      auto it = chains_.find(in);
      cat.sources.push_back(it == chains_.end() ? in : it->second.first);
      cat.chains.push_back(it == chains_.end() ? std::vector<const Op*>{} : it->second.second);
    }
    int rank = op->outputs[0]->rank();
    int64_t dim = op->int_attr("dim");
    cat.axis = int(dim < 0 ? dim + rank : dim);
    for (Value* source : cat.sources) cat.mixed_dtypes |= source->dtype() != op->outputs[0]->dtype();
    a_.cat_leaves[op->outputs[0]] = std::move(cat);
  }

  // cat operands folded as chains (find_cat_chains): operand -> (host-side source, ops in order)
  std::map<const Value*, std::pair<Value*, std::vector<const Op*>>> chains_;
  std::set<const Op*> folded_;

  // A reduction sets the domain and its reduced axes: the first one over its input's innermost
  // axis where there is one (a layer norm backward's row sums rather than its column sums dw and
  // db, which then reduce the kept axes: outer reductions), else the first.
  void choose_domain() {
    const Op* chosen = nullptr;
    for (const Op* op : a_.compute_ops)
      if (is_reduction_op(op->kind)) {
        std::vector<int> axes = reduction_axes_of(op);
        bool innermost = !axes.empty() && axes.back() == op->inputs[0]->rank() - 1;
        if (!chosen || innermost) chosen = op;
        if (innermost) break;
      }
    if (chosen) {
      a_.domain = chosen->inputs[0]->shape();
      a_.reduced_axes = reduction_axes_of(chosen);
      return;
    }
    for (Value* out : outputs_)
      if (!out->is_scalar() && (a_.domain.empty() || out->rank() > int(a_.domain.size()))) a_.domain = out->shape();
  }

  int rank() const { return int(a_.domain.size()); }

  bool varies_per_element(const std::vector<int>& map) const {
    if (!a_.is_reduction()) return true;
    for (int d : map)
      if (d >= 0 && contains(a_.reduced_axes, d)) return true;
    return false;
  }

  // Layout of a value read by a compute op: computed earlier, a leaf, or a scalar.
  const ValueLayout* layout_of(const Value* v) {
    auto it = a_.layout.find(v);
    if (it != a_.layout.end()) return &it->second;
    ValueLayout l;
    if (v->is_scalar() || v->literal) {
      l.per_row = true;
      return &(a_.layout[v] = l);
    }
    if (std::find(a_.leaves.begin(), a_.leaves.end(), v) == a_.leaves.end()) {
      fail(v->name + " is used before it is computed in this segment");
      return nullptr;
    }
    int r = v->rank();
    if (r > rank()) {
      fail("input " + v->name + " (" + v->type_str() + ") has more axes than the kernel's domain");
      return nullptr;
    }
    l.leaf = true;
    for (int i = 0; i < r; ++i) {
      int d = rank() - r + i;
      const Extent& e = v->shape()[i];
      if (e.is_one()) l.axis_map.push_back(-1);
      else if (e == a_.domain[d]) l.axis_map.push_back(d);
      else {
        fail("input " + v->name + " (" + v->type_str() + ") does not align with the domain on axis " + std::to_string(i));
        return nullptr;
      }
    }
    l.per_row = !varies_per_element(l.axis_map);
    return &(a_.layout[v] = l);
  }

  void set_output_layout(const Op* op, int index, std::vector<int> map) {
    const Value* out = op->outputs[index];
    for (size_t k = 0; k < map.size(); ++k)
      if (map[k] >= 0 && !(out->shape()[k] == a_.domain[map[k]]))
        return fail(describe(op) + ": axis " + std::to_string(k) + " does not match the domain");
    ValueLayout l;
    l.axis_map = std::move(map);
    l.per_row = !varies_per_element(l.axis_map);
    a_.layout[out] = l;
  }

  void lay_out_pointwise(const Op* op) {
    int out_rank = op->outputs[0]->rank();
    std::vector<int> map(out_rank, -1);
    for (Value* in : op->inputs) {
      const ValueLayout* l = layout_of(in);
      if (!l) return;
      int offset = out_rank - int(l->axis_map.size());
      for (size_t i = 0; i < l->axis_map.size(); ++i) {
        int d = l->axis_map[i];
        if (d < 0) continue;
        int& slot = map[offset + i];
        if (slot >= 0 && slot != d) return fail(describe(op) + ": operands run along different axes of the domain");
        slot = d;
      }
    }
    set_output_layout(op, 0, map);
  }

  void lay_out_reduction(const Op* op) {
    const ValueLayout* in = layout_of(op->inputs[0]);
    if (!in) return;
    if (int(in->axis_map.size()) != rank()) return fail(describe(op) + ": its input is not over the whole domain");
    for (int i = 0; i < rank(); ++i)
      if (in->axis_map[i] != i && in->axis_map[i] != -1) return fail(describe(op) + ": its input is permuted against the domain");
    if (in->per_column) return fail(describe(op) + " reduces " + op->inputs[0]->name + ", which is complete only after every row");
    if (reduction_axes_of(op) != a_.reduced_axes) {
      if (reduction_axes_of(op) == kept_axes()) return lay_out_outer_reduction(op, *in);
      return fail(describe(op) + " reduces other axes than the segment's first reduction");
    }
    bool keepdim = op->bool_attr("keepdim");
    std::vector<int> map;
    for (int i = 0; i < rank(); ++i) {
      bool reduced = contains(a_.reduced_axes, i);
      if (!reduced) map.push_back(in->axis_map[i]);
      else if (keepdim) map.push_back(-1);
    }
    for (size_t k = 0; k < op->outputs.size(); ++k) set_output_layout(op, int(k), map);
  }

  std::vector<int> kept_axes() const {
    std::vector<int> kept;
    for (int i = 0; i < rank(); ++i)
      if (!contains(a_.reduced_axes, i)) kept.push_back(i);
    return kept;
  }

  // A reduction over exactly the kept axes beside the row reductions (dw, db of a layer norm
  // backward): each thread accumulates its columns over the rows it handles, the blocks' partials
  // are combined at the kernel's end. Its value varies along the reduced axes only (per column).
  void lay_out_outer_reduction(const Op* op, const ValueLayout& in) {
    if (op->kind != OpKind::sum && op->kind != OpKind::mean && op->kind != OpKind::max && op->kind != OpKind::min)
      return fail(describe(op) + " over the rows beside row reductions: only sum, mean, max and min run there in one kernel");
    if (!is_floating(op->outputs[0]->dtype()) || !is_floating(op->inputs[0]->dtype()))
      return fail(describe(op) + " over the rows beside row reductions: only floating values are accumulated there");
    if (in.per_row) return fail(describe(op) + " reduces a value computed once per row over the rows beside row reductions");
    bool keepdim = op->bool_attr("keepdim");
    std::vector<int> map;
    for (int i = 0; i < rank(); ++i) {
      if (contains(a_.reduced_axes, i)) map.push_back(in.axis_map[i]);
      else if (keepdim) map.push_back(-1);
    }
    set_output_layout(op, 0, map);
    if (!why_.empty()) return;
    ValueLayout& l = a_.layout[op->outputs[0]];
    l.per_row = false;
    l.per_column = true;
    a_.outer_reductions.push_back(op);
  }

  // Ops of outer reductions' results (a cast of dw to bf16) run once per column at the kernel's
  // end: their other operands must be per-column values too, literals or scalars.
  void mark_per_column(const Op* op) {
    const Value* column = nullptr;
    for (Value* in : computed_from(*op))
      if (!in->literal && a_.layout.count(in) && a_.at(in).per_column) column = in;
    if (!column || !why_.empty() || op_row(op->kind).op_class == OpClass::reduction) return;
    if (op->kind == OpKind::gather) return fail(describe(op) + " gathers from a column reduction's result");
    for (Value* in : computed_from(*op))
      if (!in->literal && !in->is_scalar() && !a_.at(in).per_column)
        return fail(describe(op) + " reads " + column->name + ", a reduction over the rows complete only after every row, with " +
                    in->name + ", a value per row or per element");
    for (Value* out : op->outputs) {
      ValueLayout& l = a_.layout[out];
      l.per_row = false;
      l.per_column = true;
    }
  }

  void lay_out_view(const Op* op) {
    const ValueLayout* in = layout_of(op->inputs[0]);
    if (!in) return;
    const Value* x = op->inputs[0];
    const Value* out = op->outputs[0];
    std::vector<int> map(out->rank(), -1);
    switch (op->kind) {
      case OpKind::broadcast_in_dim: {
        auto dims = op->ints_attr("broadcast_dims");
        for (size_t i = 0; i < dims.size(); ++i) map[dims[i]] = in->axis_map[i];
        break;
      }
      case OpKind::expand: {
        int offset = out->rank() - x->rank();
        for (int i = 0; i < x->rank(); ++i) map[offset + i] = x->shape()[i] == out->shape()[offset + i] ? in->axis_map[i] : -1;
        break;
      }
      case OpKind::permute: {
        auto dims = op->ints_attr("dims");
        for (size_t k = 0; k < dims.size(); ++k) map[k] = in->axis_map[dims[k] < 0 ? dims[k] + x->rank() : dims[k]];
        break;
      }
      case OpKind::unsqueeze: case OpKind::squeeze: case OpKind::reshape: case OpKind::segment_set: {
        // Only size-1 axes may come or go: the other axes keep their order.
        std::vector<int> kept;
        std::vector<Extent> kept_extents, out_extents;
        for (int i = 0; i < x->rank(); ++i)
          if (!x->shape()[i].is_one()) { kept.push_back(in->axis_map[i]); kept_extents.push_back(x->shape()[i]); }
        std::vector<int> out_positions;
        for (int k = 0; k < out->rank(); ++k)
          if (!out->shape()[k].is_one()) { out_positions.push_back(k); out_extents.push_back(out->shape()[k]); }
        if (kept_extents != out_extents) return fail(describe(op) + " regroups axes of a computed value");
        for (size_t j = 0; j < out_positions.size(); ++j) map[out_positions[j]] = kept[j];
        break;
      }
      default:
        return fail(describe(op) + " cannot run inside a generated kernel");
    }
    set_output_layout(op, 0, map);
  }

  // A gather's value runs along the domain as its index does (it has the index's shape).
  void lay_out_gather(const Op* op) {
    const ValueLayout* index = layout_of(op->inputs[1]);
    if (!index) return;
    set_output_layout(op, 0, index->axis_map);
  }

  void lay_out(const Op* op) {
    if (op->kind == OpKind::segment_set) return fail("segment_set forces a segment boundary");
    OpClass c = op_row(op->kind).op_class;
    if (op->kind == OpKind::gather) lay_out_gather(op);
    else if (c == OpClass::reduction) lay_out_reduction(op);
    else if (c == OpClass::shape) lay_out_view(op);
    else lay_out_pointwise(op);
    mark_per_column(op);
  }

  // A reduction's stage is one more than the deepest reduction its input depends on.
  void assign_stages() {
    std::map<const Value*, int> depth;  // reductions a value depends on, transitively
    for (const Op* op : a_.compute_ops) {
      int d = 0;
      for (Value* in : computed_from(*op))
        if (auto it = depth.find(in); it != depth.end()) d = std::max(d, it->second);
      if (is_reduction_op(op->kind) && !contains(a_.outer_reductions, op)) {
        if (int(a_.stages.size()) <= d) a_.stages.resize(d + 1);
        a_.stages[d].push_back(op);
        d += 1;
      }
      for (Value* out : op->outputs) depth[out] = d;
    }
    a_.single_pass = a_.stages.size() == 1 && a_.outer_reductions.empty();
    for (auto& [v, d] : depth)
      if (d > 0 && !a_.at(v).per_row) a_.single_pass = false;
  }

  void check_outputs() {
    a_.outputs = outputs_;
    for (Value* out : outputs_) {
      if ((a_.cat_leaves.count(out) || a_.positions.count(out)) && !a_.layout.count(out) && !layout_of(out)) return;
      auto it = a_.layout.find(out);
      if (it == a_.layout.end()) return fail(out->name + " is not computed by this segment");
      if (out->is_scalar()) return fail(out->name + " is a scalar: scalar arithmetic runs on the host; a kernel stores tensors");
      ValueLayout& l = it->second;
      if (l.per_column) {  // stored once per column: its non-1 axes are the reduced axes, in order
        size_t next = 0;
        for (int k = 0; k < out->rank(); ++k) {
          if (out->shape()[k].is_one()) { l.store_axes.push_back(-1); continue; }
          while (next < a_.reduced_axes.size() && a_.domain[a_.reduced_axes[next]].is_one()) ++next;
          if (next >= a_.reduced_axes.size() || !(out->shape()[k] == a_.domain[a_.reduced_axes[next]]))
            return fail(out->name + " (" + out->type_str() + ") is not laid out along the reduced axes");
          l.store_axes.push_back(a_.reduced_axes[next++]);
        }
        while (next < a_.reduced_axes.size() && a_.domain[a_.reduced_axes[next]].is_one()) ++next;
        if (next != a_.reduced_axes.size()) return fail(out->name + " does not cover every reduced axis");
        continue;
      }
      if (!l.per_row || !a_.is_reduction()) {
        // stored at every domain position
        if (!(out->shape() == a_.domain)) return fail(out->name + " (" + out->type_str() + ") does not cover the whole domain");
        for (int i = 0; i < rank(); ++i) l.store_axes.push_back(a_.domain[i].is_one() ? -1 : i);
        continue;
      }
      // stored once per row: its non-1 axes are the kept domain axes, in order
      std::vector<int> kept;
      for (int i = 0; i < rank(); ++i)
        if (!contains(a_.reduced_axes, i) && !a_.domain[i].is_one()) kept.push_back(i);
      size_t next = 0;
      for (int k = 0; k < out->rank(); ++k) {
        if (out->shape()[k].is_one()) { l.store_axes.push_back(-1); continue; }
        if (next >= kept.size() || !(out->shape()[k] == a_.domain[kept[next]]))
          return fail(out->name + " (" + out->type_str() + ") is not laid out along the kept axes");
        l.store_axes.push_back(kept[next++]);
      }
      if (next != kept.size()) return fail(out->name + " does not cover every kept axis");
    }
  }

  const std::vector<const Op*>& ops_;
  const std::vector<Value*>& inputs_;
  const std::vector<Value*>& outputs_;
  KernelAnalysis a_;
  std::string why_;
};

}  // namespace

std::vector<Value*> computed_from(const Op& op) {
  if (op.kind == OpKind::gather) return {op.inputs[1]};
  return op.inputs;
}

std::vector<Value*> KernelAnalysis::launch_values() const {
  std::vector<Value*> values;
  for (Value* leaf : leaves) {
    if (const CatLeaf* cat = cat_leaf(leaf)) values.insert(values.end(), cat->sources.begin(), cat->sources.end());
    else values.push_back(leaf);
  }
  for (const GatherLoad& g : gathers) {
    values.push_back(g.source);
    values.push_back(g.op->outputs[0]);
  }
  values.insert(values.end(), outputs.begin(), outputs.end());
  return values;
}

KernelAnalysisResult analyze_kernel(const std::vector<const Op*>& ops, const std::vector<Value*>& segment_inputs,
                                    const std::vector<Value*>& outputs) {
  return Analyzer(ops, segment_inputs, outputs).run();
}

}  // namespace alloy
