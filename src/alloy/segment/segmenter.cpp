#include "alloy/segment/segmenter.h"

#include "alloy/ir/op_table.h"
#include "alloy/segment/in_place.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"

namespace alloy {
namespace {

// CPU: one segment per op; views alias their input, so they are "noop" segments.
Segmentation segment_for_cpu(const Fusion& fusion) {
  Segmentation result;
  result.target = Target::cpu;
  ValueReaders readers(fusion);
  for (auto& op : fusion.ops()) {
    Segment s;
    s.id = int(result.segments.size());
    s.scheduler = is_communication(op->kind)                               ? SchedulerKind::communication
                  : (is_view(op->kind) || op->kind == OpKind::segment_set) ? SchedulerKind::noop
                                                                           : SchedulerKind::cpu_reference;
    s.ops.push_back(op.get());
    compute_segment_boundary(readers, s);
    result.segments.push_back(std::move(s));
  }
  return result;
}

}  // namespace

Segmentation segment_fusion(const Fusion& fusion, Target target) {
  Segmentation result = target == Target::cpu ? segment_for_cpu(fusion) : segment_for_cuda(fusion);
  result.in_place = decide_in_place(fusion, result);
  return result;
}

}  // namespace alloy
