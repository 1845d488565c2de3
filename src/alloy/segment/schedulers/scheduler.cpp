#include "alloy/segment/schedulers/scheduler.h"

#include "alloy/ir/op_table.h"

namespace alloy {

Segment make_segment(const Offer& offer, SchedulerKind kind) {
  Segment s;
  s.id = offer.id;
  s.scheduler = kind;
  s.ops = offer.ops;
  compute_segment_boundary(offer.readers, s);
  return s;
}

std::string describe(const std::vector<const Op*>& ops) {
  std::string out;
  for (const Op* op : ops) out += (out.empty() ? "" : ", ") + op->outputs[0]->name + "=" + std::string(op_name(op->kind));
  return out;
}

}  // namespace alloy
