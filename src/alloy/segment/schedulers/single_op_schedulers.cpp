#include "alloy/segment/schedulers/single_op_schedulers.h"

#include "alloy/ir/op_table.h"

namespace alloy {
namespace {

const Op& only_op(const Offer& offer) {
  ALLOY_CHECK(offer.ops.size() == 1, "a single-op scheduler offered ", offer.ops.size(), " ops");
  return *offer.ops[0];
}

}  // namespace

Verdict can_schedule_communication(const Offer& offer) {
  if (!is_communication(only_op(offer).kind)) return std::string("not a resharding op");
  return make_segment(offer, SchedulerKind::communication);
}

Verdict can_schedule_bitmask(const Offer& offer) {
  if (op_row(only_op(offer).kind).op_class != OpClass::bitmask) return std::string("not a bit-mask op");
  return make_segment(offer, SchedulerKind::bitmask);
}

Verdict can_schedule_noop(const Offer& offer) {
  const Op& op = only_op(offer);
  if (!is_view(op.kind) && op.kind != OpKind::segment_set) return std::string("not a view");
  return make_segment(offer, SchedulerKind::noop);
}

Segment schedule_cpu_fallback(const Offer& offer, const std::string& why) {
  only_op(offer);
  Segment s = make_segment(offer, SchedulerKind::cpu_fallback);
  s.note = "(" + why + ")";
  return s;
}

}  // namespace alloy
