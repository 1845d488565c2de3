#include "alloy/segment/schedulers/matmul_scheduler.h"

#include <set>

namespace alloy {
namespace {

bool is_gemm_dtype(DType t) { return t == DType::bf16 || t == DType::f16 || t == DType::f32; }

const char* kGemmDtypes = "cuBLASLt path takes bf16, f16 and f32 operands";

}  // namespace

bool is_matmul(OpKind k) { return k == OpKind::matmul || k == OpKind::linear; }

std::vector<EpilogueMatch> match_epilogues(const Fusion& fusion, std::vector<Refusal>& refusals) {
  std::vector<EpilogueMatch> matches;
  std::set<const Op*> taken;
  for (auto& op : fusion.ops()) {
    if (!is_matmul(op->kind)) continue;
    if (!is_gemm_dtype(op->outputs[0]->dtype())) {
      refusals.push_back({"matmul", describe({op.get()}), kGemmDtypes});
      continue;
    }
    EpilogueMatch m = match_matmul_epilogue(fusion, *op, taken);
    for (const NotTaken& n : m.not_taken)
      refusals.push_back({"matmul epilogue", describe(n.op == m.matmul ? std::vector{n.op} : std::vector{m.matmul, n.op}), n.why});
    taken.insert(m.ops.begin(), m.ops.end());
    matches.push_back(std::move(m));
  }
  return matches;
}

Verdict can_schedule_matmul(const Offer& offer, const EpilogueMatch& match) {
  if (!is_gemm_dtype(match.matmul->outputs[0]->dtype())) return std::string("the ") + kGemmDtypes;
  Segment s = make_segment(offer, SchedulerKind::matmul);
  s.note = match.note();
  s.epilogue = std::make_shared<EpilogueMatch>(match);
  return s;
}

}  // namespace alloy
