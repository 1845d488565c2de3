// The host program: what the runtime executes, even on one device. A list of nodes (Allocate,
// Launch of a segment's executable on a stream, Communicate, Record / Wait of events between
// streams, and ForChunks loops of them) lowered from a segmentation, then rewritten by the
// program passes (host_ir/side_streams.h, host_ir/pipeline_collectives.h).
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
// Inside a ForChunks loop, a stream of kIterationStream is the iteration's compute stream (the
// loop's pool, chosen by the iteration's index), and `part` >= 0 binds the loop's `blocks` values
// to this iteration's chunk of block `part` (one rank's rows).
constexpr int kIterationStream = -1;

struct Launch {
  int segment;
  int stream = 0;
  int part = -1;
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
// shard_slice) on `stream`; its results are views or buffers it allocates itself. Inside a
// ForChunks loop it moves this iteration's chunk, into the loop's preallocated buffers.
struct Communicate {
  int segment;
  int stream = 0;
};

struct ForChunks;
using Node = std::variant<Allocate, Launch, Record, Wait, Communicate, ForChunks>;

// How a value is cut into a loop's chunks along its axis 0 (`count` chunks, as even as the rows
// allow: chunk i is rows [i*L/count, (i+1)*L/count) of L):
//   rows:   the value's own rows (a device's part of an all-gather's input, of a reduce-scatter's
//           output);
//   blocks: the value's rows are the team's `parts` blocks (rank r's rows first), each cut into
//           chunks: a Launch with part r sees chunk i of block r, a Communicate sees the [parts,
//           chunk rows, ...] view of chunk i of every block (no copy: parts at the block stride).
struct ChunkedValue {
  Value* value;
  enum class Layout { rows, blocks } layout;
};

// A loop over chunks (issue 13): `body` runs `count` times; in iteration i the `values` are
// bound to views of chunk i of their whole buffers (allocated before the loop), kIterationStream
// is stream `first_pool_stream + i % pool_streams`, and the host never blocks. `why` says what
// was chosen and why (printed by --dump program).
struct ForChunks {
  int count = 1;
  int parts = 1;
  std::vector<ChunkedValue> values;
  int first_pool_stream = 0;
  int pool_streams = 1;
  std::vector<Node> body;
  std::string why;
};

struct Program {
  Segmentation segmentation;
  std::vector<Node> nodes;
  int streams = 1;  // the run's own stream and the side streams
  int events = 0;
  std::string str() const;  // the `--dump program` text
};

// Lowers a segmentation to a program on one stream: for each segment in order, Allocate its
// outputs where its scheduler writes into preallocated buffers (CUDA), then Launch it; a
// communication segment becomes a Communicate node. Streams come from the program passes.
Program lower_to_program(Segmentation segmentation);

// A Program -> Program rewrite, listed by name in the pipeline (pipeline/pipeline.cpp).
struct ProgramPassOptions {
  // The pipelining of collectives with GEMMs (--pipeline): off, auto, or a chunk count.
  enum class Pipeline { off, automatic, chunks } pipeline = Pipeline::automatic;
  int chunks = 0;
};

}  // namespace alloy::host_ir
