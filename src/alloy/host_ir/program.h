// The host program: what the runtime executes, even on one device. A flat list of nodes
// (Allocate, Launch of a segment's executable on a stream, Record / Wait of events between
// streams) lowered from a segmentation.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "alloy/segment/segment.h"

namespace alloy::host_ir {

// Allocate the buffer of a segment output before the segment that writes it runs (on the run's
// own stream, whichever stream then writes it).
struct Allocate {
  Value* value;
};

// Run segment `segment` of the segmentation through its executable, its device work going to
// `stream`: 0 is the run's own stream (the caller's current one), 1.. are side streams.
struct Launch {
  int segment;
  int stream = 0;
};

// Event `event` marks the work enqueued on `stream` so far.
struct Record {
  int stream;
  int event;
};

// Later work on `stream` waits for event `event` (recorded earlier in the program).
struct Wait {
  int stream;
  int event;
};

// Run communication segment `segment` (one resharding op: a collective over the mesh's team, or
// shard_slice) on the run's stream; its results are views or buffers it allocates itself.
struct Communicate {
  int segment;
};

using Node = std::variant<Allocate, Launch, Record, Wait, Communicate>;

struct Program {
  Segmentation segmentation;
  std::vector<Node> nodes;
  int streams = 1;  // the run's own stream and the side streams
  int events = 0;
  std::string str() const;  // the `--dump program` text
};

// Lowers a segmentation to a program: for each segment in order, Allocate its outputs where its
// scheduler writes into preallocated buffers (CUDA), then Launch it; a communication segment
// becomes a Communicate node.
//
// CUDA: a memory-bound generated kernel (pointwise, reduction, normalization) right before a
// GEMM that does not read it runs on side stream 1, so it overlaps the GEMM (compute-bound)
// instead of running between two: a bias gradient beside the next weight-gradient GEMM, say.
// The side stream first waits for everything the run's stream has enqueued (its inputs, and the
// buffers just allocated); the run's stream waits for the side kernel before the first segment
// that reads its results, and before the run ends. ALLOY_NO_SIDE_STREAM=1 keeps one stream.
Program lower_to_program(Segmentation segmentation);

}  // namespace alloy::host_ir
