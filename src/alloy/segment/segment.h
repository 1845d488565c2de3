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

struct EpilogueMatch;  // passes/matmul_epilogue.h

struct Segment {
  int id = 0;
  std::string scheduler;         // "noop", "cpu_reference", "pointwise", "reduction", ...
  std::vector<const Op*> ops;    // in definition order
  std::vector<Value*> inputs;    // values read from outside the segment (no literals)
  std::vector<Value*> outputs;   // values produced here and used after it, or fusion outputs
  std::string note;              // scheduler detail, e.g. "epilogue: gelu_bias (bias: b)"
  // "matmul" segments: what the GEMM's epilogue computes (the matmul and the ops it took).
  std::shared_ptr<const EpilogueMatch> epilogue;
};

struct Refusal {
  std::string scheduler;
  std::string ops;  // which ops were offered, e.g. "h = linear(...), g = gelu(h)"
  std::string why;
};

struct Segmentation {
  Target target = Target::cpu;
  std::vector<Segment> segments;  // a topological order
  std::vector<Refusal> refusals;
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
