// The schedulers: each answers can_schedule for the ops the segmenter offers it, with the Segment
// it would run (its kind, its boundary, and its plan: a matmul's epilogue, a kernel's analysis)
// or the reason it refuses, which `--dump segments` lists under `refusals`. The CUDA segmenter
// (cuda_segmenter.h) tries them in a fixed order; the CPU target needs none (every op is a
// cpu_reference segment of its own).
//   matmul_scheduler       linear / matmul through cuBLASLt, with the ops its epilogue takes
//   generated_scheduler    a run of ops that one generated kernel computes (normalization,
//                          reduction or pointwise)
//   single_op_schedulers   communication (a collective), bitmask (relu_mask and its backward),
//                          noop (a view made on the host), cpu_fallback (what no GPU path runs)
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "alloy/segment/segment.h"

namespace alloy {

// What the segmenter offers a scheduler: ops in a topological order, and the segment id to use.
struct Offer {
  const ValueReaders& readers;
  std::vector<const Op*> ops;
  int id = 0;
};

// The segment a scheduler accepts the offer as, or why it refuses it.
using Verdict = std::variant<Segment, std::string>;

// A segment of `kind` over the offer's ops, with its inputs and outputs filled.
Segment make_segment(const Offer& offer, SchedulerKind kind);

// "h=linear, g=gelu": the ops of a refusal, as `--dump segments` names them.
std::string describe(const std::vector<const Op*>& ops);

}  // namespace alloy
