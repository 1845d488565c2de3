#include "alloy/segment/schedulers/generated_scheduler.h"

#include <memory>

#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy {
namespace {

// CUDA passes at most 32,764 bytes to a kernel; ours are 8 bytes per pointer, per size and per
// stride of every tensor (kernel_codegen's param_words), bounded here with every tensor at the
// largest rank.
constexpr int64_t kMaxKernelParamWords = 4000;

int64_t param_words_bound(const Segment& s) {
  int64_t rank = 1, tensors = 0, scalars = 0, indexing = 0;
  for (const auto* list : {&s.inputs, &s.outputs})
    for (const Value* v : *list) {
      if (v->is_scalar()) ++scalars;
      else ++tensors, rank = std::max<int64_t>(rank, v->rank());
    }
  for (const Op* op : s.ops) {  // an iota's position leaf; a gather's source and positions, step, size
    if (op->kind != OpKind::iota && op->kind != OpKind::gather) continue;
    if (op->kind == OpKind::iota) ++tensors;
    else tensors += 2, indexing += 3;
    rank = std::max<int64_t>(rank, op->outputs[0]->rank());
  }
  return 8 + rank + tensors * (1 + rank) + scalars + indexing;
}

// "(row reductions a, b over [1]; over the rows: dw32, db32, in one persistent kernel)"
std::string inner_outer_note(const KernelAnalysis& a) {
  auto names = [](const std::vector<const Op*>& ops) {
    std::string text;
    for (const Op* op : ops) text += (text.empty() ? "" : ", ") + op->outputs[0]->name;
    return text;
  };
  std::vector<const Op*> rows;
  for (const auto& stage : a.stages) rows.insert(rows.end(), stage.begin(), stage.end());
  std::string axes;
  for (int d : a.reduced_axes) axes += (axes.empty() ? "" : ", ") + std::to_string(d);
  return "(row reductions " + names(rows) + " over [" + axes + "]; over the rows: " + names(a.outer_reductions) +
         ", in one persistent kernel that combines the blocks' column partials in a fixed order)";
}

std::string too_many_ops() { return "a generated kernel takes at most " + std::to_string(kMaxKernelOps) + " ops"; }
const char* kTooManyParams = "its tensors' pointers, sizes and strides would pass CUDA's 32 KB of kernel parameters";

SchedulerKind kernel_kind(const KernelAnalysis& a) {
  if (!a.is_reduction()) return SchedulerKind::pointwise;
  if (a.has_outer_reductions()) return SchedulerKind::inner_outer;
  for (Value* out : a.outputs)
    if (!a.at(out).per_row) return SchedulerKind::normalization;
  return SchedulerKind::reduction;
}

}  // namespace

Verdict can_schedule_generated(const Offer& offer) {
  if (offer.ops.size() > kMaxKernelOps) return too_many_ops();
  Segment s = make_segment(offer, SchedulerKind::pointwise);
  if (param_words_bound(s) > kMaxKernelParamWords) return std::string(kTooManyParams);
  auto analysis = analyze_kernel(s.ops, s.inputs, s.outputs);
  if (auto* why = std::get_if<std::string>(&analysis)) return *why;
  auto kept = std::make_shared<const KernelAnalysis>(std::get<KernelAnalysis>(std::move(analysis)));
  s.scheduler = kernel_kind(*kept);
  if (s.scheduler == SchedulerKind::inner_outer) s.note = inner_outer_note(*kept);
  s.analysis = std::move(kept);
  return s;
}

bool refused_for_size(const std::string& why) { return why == too_many_ops() || why == kTooManyParams; }

}  // namespace alloy
