// The host program: what the runtime executes, even on one device. A flat list of nodes
// (Allocate, Launch of a segment's executable, and later Communicate / Wait / stream nodes)
// lowered from a segmentation.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "alloy/segment/segment.h"

namespace alloy::host_ir {

// Allocate the buffer of a segment output before the segment that writes it runs.
struct Allocate {
  Value* value;
};

// Run segment `segment` of the segmentation through its executable.
struct Launch {
  int segment;
};

using Node = std::variant<Allocate, Launch>;

struct Program {
  Segmentation segmentation;
  std::vector<Node> nodes;
  std::string str() const;  // the `--dump program` text
};

// Lowers a segmentation to a program: for each segment in order, Allocate its outputs where its
// scheduler writes into preallocated buffers (CUDA), then Launch it.
Program lower_to_program(Segmentation segmentation);

}  // namespace alloy::host_ir
