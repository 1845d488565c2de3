// The matmul scheduler: linear and matmul as one cuBLASLt call that also computes the ops its
// epilogue takes (bias, ReLU / GELU, the output cast, dGELU / dReLU, bias gradients:
// matmul_epilogue.h). Epilogues are matched over the whole fusion first, in definition order, so
// each op goes to the first matmul that takes it; a matmul of other dtypes than cuBLASLt takes is
// refused (the cpu_fallback scheduler then runs it).
#pragma once

#include "alloy/segment/schedulers/matmul_epilogue.h"
#include "alloy/segment/schedulers/scheduler.h"

namespace alloy {

bool is_matmul(OpKind kind);

// Every matmul's epilogue that the matmul scheduler accepts, in definition order; the refusals
// (of a matmul, or of an op an epilogue did not take) go to `refusals`.
std::vector<EpilogueMatch> match_epilogues(const Fusion& fusion, std::vector<Refusal>& refusals);

// The segment of one matched matmul and its epilogue's ops (the offer's ops: the match's).
Verdict can_schedule_matmul(const Offer& offer, const EpilogueMatch& match);

}  // namespace alloy
