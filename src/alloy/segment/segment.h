// Segments: a connected set of ops owned by one scheduler. The segmenter partitions a fusion into
// segments for a target (CPU or CUDA); each refusal a scheduler gives is kept, so
// `--dump segments` can say why ops were not merged or not given to a faster scheduler.
#pragma once

#include <memory>
#include <string>
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

// Fill a segment's inputs and outputs from its ops and the rest of the fusion.
void compute_segment_boundary(const Fusion& fusion, Segment& segment);

}  // namespace alloy
