#include "alloy/segment/schedulers/cuda_segmenter.h"

#include "alloy/ir/op_table.h"
#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy {
namespace {

// Scheduler order on CUDA (docs/architecture.md):
//   1. matmul          linear / matmul through cuBLASLt
//   2. generated kernel the longest run of ops that one generated kernel can compute:
//                      "normalization" (a reduction whose row-shaped values are also stored),
//                      "reduction", or "pointwise"
//   3. noop            a view on its own: a zero-copy view made on the host
//   4. cpu_fallback    anything else: copied to the host, run by the reference kernels, copied back
bool is_matmul(OpKind k) { return k == OpKind::matmul || k == OpKind::linear; }

std::string describe_range(const std::vector<std::unique_ptr<Op>>& ops, size_t first, size_t last) {
  std::string out;
  for (size_t k = first; k <= last && k < ops.size(); ++k)
    out += (out.empty() ? "" : ", ") + ops[k]->outputs[0]->name + "=" + std::string(op_name(ops[k]->kind));
  return out;
}

Segment make_segment(const Fusion& fusion, const std::vector<std::unique_ptr<Op>>& ops, size_t first, size_t last,
                     std::string scheduler, int id) {
  Segment s;
  s.id = id;
  s.scheduler = std::move(scheduler);
  for (size_t k = first; k <= last; ++k) s.ops.push_back(ops[k].get());
  compute_segment_boundary(fusion, s);
  return s;
}

std::string kernel_kind(const KernelAnalysis& a) {
  if (!a.is_reduction()) return "pointwise";
  for (Value* out : a.outputs)
    if (!a.at(out).per_row) return "normalization";
  return "reduction";
}

}  // namespace

Segmentation segment_for_cuda(const Fusion& fusion) {
  Segmentation result;
  result.target = Target::cuda;
  const auto& ops = fusion.ops();
  size_t i = 0;
  while (i < ops.size()) {
    const Op* op = ops[i].get();
    int id = int(result.segments.size());
    if (is_matmul(op->kind)) {
      bool supported = op->outputs[0]->dtype() == DType::bf16 || op->outputs[0]->dtype() == DType::f16 ||
                       op->outputs[0]->dtype() == DType::f32;
      if (supported) {
        result.segments.push_back(make_segment(fusion, ops, i, i, "matmul", id));
        ++i;
        continue;
      }
      result.refusals.push_back({"matmul", describe_range(ops, i, i), "cuBLASLt path takes bf16, f16 and f32 operands"});
    }
    // The longest run [i, j] that one generated kernel computes.
    size_t best = i;
    std::string best_kind, why_not_longer;
    for (size_t j = i; j < ops.size() && !is_matmul(ops[j]->kind); ++j) {
      Segment candidate = make_segment(fusion, ops, i, j, "", id);
      auto analysis = analyze_kernel(candidate.ops, candidate.inputs, candidate.outputs);
      if (auto* a = std::get_if<KernelAnalysis>(&analysis)) {
        best = j;
        best_kind = kernel_kind(*a);
        why_not_longer.clear();
      } else if (why_not_longer.empty() && (j == best + 1 || best_kind.empty())) {
        why_not_longer = std::get<std::string>(analysis);
      }
    }
    if (!best_kind.empty()) {
      if (!why_not_longer.empty() && best + 1 < ops.size())
        result.refusals.push_back({"kernel", describe_range(ops, i, best + 1), why_not_longer});
      result.segments.push_back(make_segment(fusion, ops, i, best, best_kind, id));
      i = best + 1;
      continue;
    }
    if (is_view(op->kind) || op->kind == OpKind::segment_set) {
      result.segments.push_back(make_segment(fusion, ops, i, i, "noop", id));
    } else {
      result.refusals.push_back({"kernel", describe_range(ops, i, i), why_not_longer});
      result.segments.push_back(make_segment(fusion, ops, i, i, "cpu_fallback", id));
    }
    ++i;
  }
  return result;
}

}  // namespace alloy
