#include "alloy/segment/segment.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "alloy/ir/op_table.h"

namespace alloy {

void compute_segment_boundary(const Fusion& fusion, Segment& segment) {
  std::set<const Value*> produced;
  for (const Op* op : segment.ops)
    for (Value* out : op->outputs) produced.insert(out);
  segment.inputs.clear();
  segment.outputs.clear();
  for (const Op* op : segment.ops)
    for (Value* in : op->inputs)
      if (!in->literal && !produced.count(in) &&
          std::find(segment.inputs.begin(), segment.inputs.end(), in) == segment.inputs.end())
        segment.inputs.push_back(in);
  std::set<const Op*> inside(segment.ops.begin(), segment.ops.end());
  for (const Op* op : segment.ops)
    for (Value* out : op->outputs) {
      bool used_outside = std::find(fusion.outputs().begin(), fusion.outputs().end(), out) != fusion.outputs().end();
      for (auto& other : fusion.ops()) {
        if (used_outside) break;
        if (inside.count(other.get())) continue;
        used_outside = std::find(other->inputs.begin(), other->inputs.end(), out) != other->inputs.end();
      }
      if (used_outside) segment.outputs.push_back(out);
    }
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
    os << "  segment " << s.id << " [" << s.scheduler << "]";
    if (!s.note.empty()) os << " " << s.note;
    os << "\n    in:  " << value_list(s.inputs) << "\n    out: " << value_list(s.outputs) << "\n    ops:";
    for (const Op* op : s.ops) {
      os << " " << (op->outputs.empty() ? std::string("?") : op->outputs[0]->name) << "=" << op_name(op->kind);
    }
    os << "\n";
  }
  if (!refusals.empty()) {
    os << "refusals:\n";
    for (const Refusal& r : refusals) os << "  " << r.scheduler << " refused {" << r.ops << "}: " << r.why << "\n";
  }
  return os.str();
}

}  // namespace alloy
