// Segments: a connected set of ops owned by one scheduler. The segmenter partitions a fusion into
// segments for a target (CPU or CUDA); each refusal a scheduler gives is kept, so
// `--dump segments` can say why ops were not merged or not given to a faster scheduler.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

enum class Target { cpu, cuda };

// Who runs a segment. CPU target: cpu_reference (the reference kernels, an op a segment) and
// communication. CUDA target, in the order the segmenter tries them: matmul (cuBLASLt with its
// epilogue), then one generated kernel (normalization, reduction or pointwise), bitmask, noop
// (host-side views), communication, and cpu_fallback for what no GPU path runs; multi_tensor, many
// independent pointwise chains of one structure in one launch, is formed before them all
// (schedulers/multi_tensor.h).
// inner_outer: row reductions and outer reductions (over the rows) of the same values in one
// persistent generated kernel (the layer norm backward's dx beside dw and db).
enum class SchedulerKind { noop, cpu_reference, matmul, normalization, inner_outer, reduction, pointwise, bitmask, communication, cpu_fallback, multi_tensor };
const char* scheduler_name(SchedulerKind kind);  // as `--dump segments` prints it: "matmul", "cpu_fallback", ...
// Whether the segment is one generated kernel (normalization, inner_outer, reduction or pointwise).
bool is_generated_kernel(SchedulerKind kind);

struct EpilogueMatch;   // segment/schedulers/matmul_epilogue.h
struct KernelAnalysis;  // segment/schedulers/kernel_analysis.h
struct MultiTensorGroup;  // segment/schedulers/multi_tensor.h

struct Segment {
  int id = 0;
  SchedulerKind scheduler = SchedulerKind::cpu_reference;
  std::vector<const Op*> ops;    // in definition order
  std::vector<Value*> inputs;    // values read from outside the segment (no literals)
  std::vector<Value*> outputs;   // values produced here and used after it, or fusion outputs
  std::string note;              // scheduler detail, e.g. "epilogue: gelu_bias (bias: b)"
  // matmul segments: what the GEMM's epilogue computes (the matmul and the ops it took).
  std::shared_ptr<const EpilogueMatch> epilogue;
  // Generated-kernel segments: the analysis the scheduler accepted them with (the iteration
  // domain, reduced axes, leaves), kept so the backend and `alloy compile` need not redo it.
  std::shared_ptr<const KernelAnalysis> analysis;
  // multi_tensor segments: the chains the launch computes, each a pointwise segment of its own.
  std::shared_ptr<const MultiTensorGroup> group;
};

struct Refusal {
  std::string scheduler;  // who refused: "matmul", "matmul epilogue", "kernel"
  std::string ops;  // which ops were offered, e.g. "h = linear(...), g = gelu(h)"
  std::string why;
};

// An in-place output (`return y -> x`) and how a run writes it (segment/in_place.h decides):
// `direct`, the kernel that computes y (segment `segment`) stores it into x's memory, which is
// y's buffer (no buffer of its own, no copy); otherwise y gets a buffer and the run copies it into
// x after everything else. `why` says why, for `--dump segments` and `--dump program`.
struct InPlaceOutput {
  Value* value = nullptr;
  Value* input = nullptr;
  bool direct = false;
  int segment = -1;
  std::string why;
  std::string str() const;  // "y -> x: written in place by segment 0 [...]: why" or "y -> x: through a copy after the run: why"
};

struct Segmentation {
  Target target = Target::cpu;
  std::vector<Segment> segments;  // a topological order
  std::vector<Refusal> refusals;
  std::vector<InPlaceOutput> in_place;  // one per in-place output, in return order
  // The input whose memory `value` is written into by its own kernel (a direct in-place output), or null.
  Value* direct_target(const Value* value) const;
  std::string str() const;        // the `--dump segments` text
};

// Who reads each value of a fusion (its ops, and whether it is an output of the fusion): built
// once, so that a segment's boundary costs the segment's size rather than the fusion's.
class ValueReaders {
 public:
  explicit ValueReaders(const Fusion& fusion);
  // Whether `v` is an output of the fusion or is read by an op not in `inside`.
  bool read_outside(const Value* v, const std::unordered_set<const Op*>& inside) const;

 private:
  std::unordered_map<const Value*, std::vector<const Op*>> readers_;
  std::unordered_set<const Value*> fusion_outputs_;
};

// Fill a segment's inputs and outputs from its ops and the rest of the fusion (the first form
// indexes the fusion each call: for one-off uses).
void compute_segment_boundary(const Fusion& fusion, Segment& segment);
void compute_segment_boundary(const ValueReaders& readers, Segment& segment);

}  // namespace alloy
