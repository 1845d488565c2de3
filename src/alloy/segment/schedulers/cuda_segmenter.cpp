#include "alloy/segment/schedulers/cuda_segmenter.h"

#include <map>
#include <optional>

#include "alloy/ir/op_table.h"
#include "alloy/segment/schedulers/generated_scheduler.h"
#include "alloy/segment/schedulers/matmul_scheduler.h"
#include "alloy/segment/schedulers/multi_tensor.h"
#include "alloy/segment/schedulers/single_op_schedulers.h"

namespace alloy {
namespace {

// Scheduler order on CUDA (docs/architecture.md; each scheduler's header says what it takes):
//   0. multi_tensor    first, over the whole fusion: independent pointwise chains of one structure
//                      (an optimizer step's, one a parameter) become one launch; their segments
//                      come last (they read only the fusion's inputs and scalars computed once)
//   1. communication   a collective is a segment of its own, never in a kernel
//   2. matmul          linear / matmul through cuBLASLt, with the ops its epilogue takes
//   3. generated       the longest run of ops that one generated kernel computes
//   4. bitmask         relu_mask / relu_backward_mask on its own, where no GEMM took it
//   5. noop            a view on its own: a zero-copy view made on the host
//   6. cpu_fallback    what no GPU path runs, saying why

// The order segments are made in: definition order, except that a matmul and the ops its
// epilogue took are one block, placed as soon as everything it reads has been placed (a bias
// broadcast defined after the matmul moves up in front of it).
class Schedule {
 public:
  std::vector<const Op*> order;
  std::vector<int> group;  // per position: the index of its match, or -1

  Schedule(const Fusion& fusion, const std::vector<EpilogueMatch>& matches) : matches_(matches) {
    for (size_t g = 0; g < matches.size(); ++g)
      for (const Op* op : matches[g].ops) group_of_[op] = int(g);
    for (auto& op : fusion.ops()) place(op.get());
  }

 private:
  void place(const Op* op) {
    auto g = group_of_.find(op);
    if (g == group_of_.end()) place_unit({op}, -1, op);
    else place_unit(matches_[g->second].ops, g->second, &matches_[g->second]);
  }

  void place_unit(const std::vector<const Op*>& ops, int g, const void* key) {
    int& state = state_[key];  // 0 new, 1 being placed, 2 placed
    if (state == 2) return;
    ALLOY_CHECK(state != 1, "the matmul segments of ", describe(ops), " depend on each other");
    state = 1;
    for (const Op* op : ops)
      for (Value* in : op->inputs)
        if (in->producer && std::find(ops.begin(), ops.end(), in->producer) == ops.end()) place(in->producer);
    state = 2;
    for (const Op* op : ops) {
      order.push_back(op);
      group.push_back(g);
    }
  }

  const std::vector<EpilogueMatch>& matches_;
  std::map<const Op*, int> group_of_;
  std::map<const void*, int> state_;
};

}  // namespace

Segmentation segment_for_cuda(const Fusion& fusion) {
  Segmentation result;
  result.target = Target::cuda;
  ValueReaders readers(fusion);
  std::unordered_set<const Op*> grouped;
  std::vector<Refusal> left_out;  // listed after the other refusals
  std::vector<Segment> groups = group_multi_tensor(fusion, readers, left_out, grouped);
  std::vector<EpilogueMatch> matches = match_epilogues(fusion, result.refusals);
  Schedule schedule(fusion, matches);
  if (!grouped.empty()) {  // the rest, in the same order
    std::vector<const Op*> order;
    std::vector<int> group;
    for (size_t i = 0; i < schedule.order.size(); ++i)
      if (!grouped.count(schedule.order[i])) order.push_back(schedule.order[i]), group.push_back(schedule.group[i]);
    schedule.order = std::move(order);
    schedule.group = std::move(group);
  }
  const std::vector<const Op*>& ops = schedule.order;
  auto offer = [&](size_t first, size_t last) {
    return Offer{readers, std::vector<const Op*>(ops.begin() + first, ops.begin() + last + 1), int(result.segments.size())};
  };
  auto accept = [&](Verdict& verdict) { result.segments.push_back(std::get<Segment>(std::move(verdict))); };
  size_t i = 0;
  while (i < ops.size()) {
    const Op* op = ops[i];
    if (Verdict v = can_schedule_communication(offer(i, i)); std::holds_alternative<Segment>(v)) {
      accept(v);
      ++i;
      continue;
    }
    if (schedule.group[i] >= 0) {
      const EpilogueMatch& m = matches[size_t(schedule.group[i])];
      Verdict v = can_schedule_matmul(Offer{readers, m.ops, int(result.segments.size())}, m);
      ALLOY_CHECK(std::holds_alternative<Segment>(v), "a matched matmul was refused: ", std::get<std::string>(v));
      accept(v);
      i += m.ops.size();
      continue;
    }
    // The longest run [i, best] that one generated kernel computes.
    std::optional<Segment> best;
    size_t best_last = i;
    std::string why_not_longer;
    for (size_t j = i; j < ops.size() && schedule.group[j] < 0 && !is_matmul(ops[j]->kind) && !is_communication(ops[j]->kind); ++j) {
      Verdict v = can_schedule_generated(offer(i, j));
      if (auto* s = std::get_if<Segment>(&v)) {
        best = std::move(*s);
        best_last = j;
        why_not_longer.clear();
        continue;
      }
      const std::string& why = std::get<std::string>(v);
      if (refused_for_size(why)) {  // a longer run only exceeds the limit further
        if (why_not_longer.empty() || j == best_last + 1 || j - i >= kMaxKernelOps) why_not_longer = why;
        break;
      }
      if (why_not_longer.empty() && (j == best_last + 1 || !best)) why_not_longer = why;
    }
    if (best) {
      if (!why_not_longer.empty() && best_last + 1 < ops.size())
        result.refusals.push_back({"kernel", describe(offer(i, best_last + 1).ops), why_not_longer});
      result.segments.push_back(std::move(*best));
      i = best_last + 1;
      continue;
    }
    if (Verdict v = can_schedule_bitmask(offer(i, i)); std::holds_alternative<Segment>(v)) {
      accept(v);
    } else if (Verdict n = can_schedule_noop(offer(i, i)); std::holds_alternative<Segment>(n)) {
      accept(n);
    } else {
      std::string why = is_matmul(op->kind) ? std::string(dtype_name(op->outputs[0]->dtype())) + " " + std::string(op_name(op->kind)) +
                                                  ": the cuBLASLt path takes bf16, f16 and f32 operands"
                                            : why_not_longer;
      if (!is_matmul(op->kind)) result.refusals.push_back({"kernel", describe({op}), why});
      result.segments.push_back(schedule_cpu_fallback(offer(i, i), why));
    }
    ++i;
  }
  for (Segment& s : groups) {
    s.id = int(result.segments.size());
    auto group = std::make_shared<MultiTensorGroup>(*s.group);
    for (Segment& member : group->members) member.id = s.id;
    s.group = std::move(group);
    result.segments.push_back(std::move(s));
  }
  result.refusals.insert(result.refusals.end(), left_out.begin(), left_out.end());
  return result;
}

}  // namespace alloy
