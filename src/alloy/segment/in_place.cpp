#include "alloy/segment/in_place.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>

#include "alloy/ir/op_table.h"
#include "alloy/segment/schedulers/kernel_analysis.h"
#include "alloy/segment/schedulers/multi_tensor.h"

namespace alloy {
namespace {

std::string quoted(const Value* v) { return "'" + v->name + "'"; }

std::string op_text(const Op& op) {
  return "'" + (op.outputs.empty() ? std::string("?") : op.outputs[0]->name) + " = " + std::string(op_name(op.kind)) + "'";
}

bool is_alias_op(OpKind kind) { return is_view(kind) || kind == OpKind::segment_set; }

class Decider {
 public:
  Decider(const Fusion& fusion, const Segmentation& segmentation) : fusion_(fusion), segmentation_(segmentation) {
    for (const Segment& s : segmentation.segments) {
      for (const Op* op : s.ops) segment_of_[op] = kernel_of_[op] = &s;
      if (s.group)  // a multi-tensor launch computes each chain as its own pointwise kernel would
        for (const Segment& member : s.group->members)
          for (const Op* op : member.ops) kernel_of_[op] = &member;
    }
  }

  std::vector<InPlaceOutput> run() {
    std::vector<InPlaceOutput> out;
    const std::vector<Value*>& aliases = fusion_.output_aliases();
    for (size_t i = 0; i < aliases.size(); ++i) {
      if (!aliases[i]) continue;
      InPlaceOutput o;
      o.value = fusion_.outputs()[i];
      o.input = aliases[i];
      if (segmentation_.target == Target::cpu) {
        o.why = "the CPU reference computes every op into a buffer of its own";
      } else if (auto why = why_not_direct(i, out)) {
        o.why = *why;
      } else {
        const Segment& s = *segment_of_.at(o.value->producer);
        o.direct = true;
        o.segment = s.id;
        o.why = reads_target_ ? "pointwise, " + quoted(o.input) + " read and written at the same element by one thread; nothing else reads it"
                              : "pointwise; nothing reads " + quoted(o.input);
      }
      out.push_back(std::move(o));
    }
    return out;
  }

 private:
  std::string where(const Op& op) const {
    auto it = segment_of_.find(&op);
    if (it == segment_of_.end()) return "";
    return " in segment " + std::to_string(it->second->id) + " [" + scheduler_name(it->second->scheduler) + "]";
  }

  // x and every value made from it by views alone: the values whose memory may be x's.
  std::set<const Value*> memory_of(const Value* x) const {
    std::set<const Value*> memory{x};
    for (const auto& op : fusion_.ops())  // definition order: a view's input comes first
      if (is_alias_op(op->kind) && memory.count(op->inputs.at(0))) memory.insert(op->outputs.at(0));
    return memory;
  }

  // Why output `i` cannot be written straight into its target, or nothing where it can.
  std::optional<std::string> why_not_direct(size_t i, const std::vector<InPlaceOutput>& decided) {
    Value* y = fusion_.outputs()[i];
    Value* x = fusion_.output_aliases()[i];
    reads_target_ = false;
    std::set<const Value*> memory = memory_of(x);
    // the aliasing rule: another output that is x, or a view of it, keeps x's old values
    for (size_t j = 0; j < fusion_.outputs().size(); ++j) {
      const Value* other = fusion_.outputs()[j];
      if (j == i || !memory.count(other)) continue;
      return (other == x ? quoted(x) + " is also returned" : quoted(other) + ", a view of " + quoted(x) + ", is also returned") +
             ", and every other output keeps the values from before the write (the aliasing rule)";
    }
    if (!y->producer || !segment_of_.count(y->producer)) return quoted(y) + " is not computed by the fusion (an input)";
    const Segment& s = *kernel_of_.at(y->producer);
    if (s.scheduler != SchedulerKind::pointwise || !s.analysis)
      return quoted(y) + " is computed by segment " + std::to_string(s.id) + " [" + scheduler_name(s.scheduler) +
             "]; only a generated pointwise kernel reads and writes each element in one thread";
    for (const InPlaceOutput& o : decided)
      if (o.direct && o.value == y) return quoted(y) + " is already written in place into " + quoted(o.input);
    if (!(x->shape() == y->shape()))
      return quoted(x) + " (" + x->type_str() + ") and " + quoted(y) + " (" + y->type_str() + ") have sizes that only the run finds equal";
    const KernelAnalysis& a = *s.analysis;
    for (const auto& op : fusion_.ops()) {
      for (const Value* v : op->inputs) {
        if (!memory.count(v)) continue;
        if (is_alias_op(op->kind) && memory.count(op->outputs.at(0))) continue;  // a view reads nothing itself
        std::string through = v == x ? "" : " through the view " + quoted(v);
        bool in_kernel = kernel_of_.count(op.get()) && kernel_of_.at(op.get()) == &s;
        if (!in_kernel) return quoted(x) + " is also read by " + op_text(*op) + where(*op) + through;
        bool computed = std::find(a.compute_ops.begin(), a.compute_ops.end(), op.get()) != a.compute_ops.end();
        // (a gather's source has no layout of its own: it is read at the indices' elements)
        if (v != x || !computed || a.cat_leaf(v) || !a.layout.count(v) || op->kind == OpKind::gather ||
            a.at(v).axis_map != a.at(y).store_axes)
          return "segment " + std::to_string(s.id) + " reads " + quoted(x) + through + " (by " + op_text(*op) +
                 ") at other elements than it writes";
        reads_target_ = true;
      }
    }
    return std::nullopt;
  }

  const Fusion& fusion_;
  const Segmentation& segmentation_;
  std::unordered_map<const Op*, const Segment*> segment_of_;
  // the kernel that computes each op: its segment, or its chain's in a multi-tensor segment
  std::unordered_map<const Op*, const Segment*> kernel_of_;
  bool reads_target_ = false;  // set by why_not_direct: the kernel reads the target it writes
};

}  // namespace

std::vector<InPlaceOutput> decide_in_place(const Fusion& fusion, const Segmentation& segmentation) {
  return Decider(fusion, segmentation).run();
}

}  // namespace alloy
