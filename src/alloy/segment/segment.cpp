#include "alloy/segment/segment.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "alloy/ir/op_table.h"
#include "alloy/segment/schedulers/multi_tensor.h"

namespace alloy {

ValueReaders::ValueReaders(const Fusion& fusion) {
  for (const auto& op : fusion.ops())
    for (const Value* in : op->inputs) {
      std::vector<const Op*>& readers = readers_[in];
      if (readers.empty() || readers.back() != op.get()) readers.push_back(op.get());
    }
  fusion_outputs_.insert(fusion.outputs().begin(), fusion.outputs().end());
}

bool ValueReaders::read_outside(const Value* v, const std::unordered_set<const Op*>& inside) const {
  if (fusion_outputs_.count(v)) return true;
  auto it = readers_.find(v);
  if (it == readers_.end()) return false;
  for (const Op* reader : it->second)
    if (!inside.count(reader)) return true;
  return false;
}

void compute_segment_boundary(const Fusion& fusion, Segment& segment) { compute_segment_boundary(ValueReaders(fusion), segment); }

void compute_segment_boundary(const ValueReaders& readers, Segment& segment) {
  std::unordered_set<const Value*> produced, listed;
  for (const Op* op : segment.ops)
    for (Value* out : op->outputs) produced.insert(out);
  segment.inputs.clear();
  segment.outputs.clear();
  for (const Op* op : segment.ops)
    for (Value* in : op->inputs)
      if (!in->literal && !produced.count(in) && listed.insert(in).second) segment.inputs.push_back(in);
  std::unordered_set<const Op*> inside(segment.ops.begin(), segment.ops.end());
  for (const Op* op : segment.ops)
    for (Value* out : op->outputs)
      if (readers.read_outside(out, inside)) segment.outputs.push_back(out);
}

const char* scheduler_name(SchedulerKind kind) {
  switch (kind) {
    case SchedulerKind::noop: return "noop";
    case SchedulerKind::cpu_reference: return "cpu_reference";
    case SchedulerKind::matmul: return "matmul";
    case SchedulerKind::normalization: return "normalization";
    case SchedulerKind::inner_outer: return "inner_outer";
    case SchedulerKind::reduction: return "reduction";
    case SchedulerKind::pointwise: return "pointwise";
    case SchedulerKind::bitmask: return "bitmask";
    case SchedulerKind::communication: return "communication";
    case SchedulerKind::cpu_fallback: return "cpu_fallback";
    case SchedulerKind::multi_tensor: return "multi_tensor";
  }
  return "?";
}

bool is_generated_kernel(SchedulerKind kind) {
  return kind == SchedulerKind::normalization || kind == SchedulerKind::inner_outer || kind == SchedulerKind::reduction || kind == SchedulerKind::pointwise;
}

std::string InPlaceOutput::str() const {
  std::string head = value->name + " -> " + input->name + ": ";
  if (!direct) return head + "through a copy after the run: " + why;
  return head + "written in place by segment " + std::to_string(segment) + ": " + why;
}

Value* Segmentation::direct_target(const Value* value) const {
  for (const InPlaceOutput& o : in_place)
    if (o.direct && o.value == value) return o.input;
  return nullptr;
}

static std::string value_list(const std::vector<Value*>& values) {
  std::string out;
  for (Value* v : values) out += (out.empty() ? "" : ", ") + v->name;
  return out;
}

std::string Segmentation::str() const {
  std::ostringstream os;
  os << "segments (" << (target == Target::cpu ? "cpu" : "cuda") << "): " << segments.size() << "\n";
  for (const Segment& s : segments) {
    os << "  segment " << s.id << " [" << scheduler_name(s.scheduler) << "]";
    if (!s.note.empty()) os << " " << s.note;
    os << "\n    in:  " << value_list(s.inputs) << "\n    out: " << value_list(s.outputs) << "\n    ops:";
    // a multi-tensor segment: its first chain's ops, then what each chain stores
    const std::vector<const Op*>& ops = s.group ? s.group->members.at(0).ops : s.ops;
    for (const Op* op : ops) {
      os << " " << (op->outputs.empty() ? std::string("?") : op->outputs[0]->name) << "=" << op_name(op->kind);
    }
    if (s.group) {
      os << "\n    chains (the same ops, storing):";
      for (const Segment& member : s.group->members) os << " {" << value_list(member.outputs) << "}";
      if (!s.group->scalars.empty() && !s.group->scalars[0].empty()) {  // the scalars that differ between chains
        os << "\n    scalars per member (each chain's own):";
        for (const auto& own : s.group->scalars) os << " {" << value_list(own) << "}";
      }
    }
    os << "\n";
  }
  if (!in_place.empty()) {
    os << "in-place outputs:\n";
    for (const InPlaceOutput& o : in_place) os << "  " << o.str() << "\n";
  }
  if (!refusals.empty()) {
    os << "refusals:\n";
    for (const Refusal& r : refusals) os << "  " << r.scheduler << " refused {" << r.ops << "}: " << r.why << "\n";
  }
  return os.str();
}

}  // namespace alloy
