// The host program: what the runtime executes, even on one device. A list of nodes (Allocate,
// Launch of a segment's executable on a stream, Communicate, Record / Wait of events between
// streams, ForChunks loops of them, a ring's SendRecv and Accumulate steps, a landed chunk's
// Release, and the Choose of --pipeline auto) lowered from a segmentation, then rewritten by the
// program passes (host_ir/side_streams.h, host_ir/pipeline_collectives.h).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "alloy/segment/segment.h"

namespace alloy::host_ir {

// Allocate the buffer of a segment output before the segment that writes it runs (on the run's
// own stream, whichever stream then writes it). With `input`, a direct in-place output
// (Segmentation::in_place): the buffer is that input's memory, which the segment writes in place
// (a run whose input tensor does not fit, as y's sizes, dtype and device, allocates instead, and
// the run's in-place write copies).
// With `unless_landed` (a segment id), the buffer of a chunked all-gather's output that a loop
// reads where the chunks land (ChunkedValue::Layout::landed): allocated only where that segment's
// communicator copies the chunks into it (SegmentExecutable::lands_in_place false), else none.
struct Allocate {
  Value* value;
  Value* input = nullptr;
  int unless_landed = -1;
};

// Run segment `segment` of the segmentation through its executable, its device work going to
// `stream`: 0 is the run's own stream (the caller's current one), 1.. are side streams.
// Inside a ForChunks loop, a stream of kIterationStream is the iteration's compute stream (the
// loop's pool, chosen by the iteration's index), and `part` >= 0 binds the loop's `blocks` values
// to this iteration's chunk of block `part` (one rank's rows); with `relative`, of block
// (team rank + part) mod parts (part 0: this device's own block, -1: the previous rank's).
// With `adds` (a GEMM -> reduce-scatter loop's own block), the segment's one output gets this
// iteration's landed parts of `adds` added (RunState::landed, set by the reduce-scatter's
// ChunkPhase::land: the other ranks' partial sums of this rank's chunk), through
// SegmentExecutable::run_accumulating (cuBLASLt: the first as the GEMM's C, beta = 1).
constexpr int kIterationStream = -1;

struct Launch {
  int segment;
  int stream = 0;
  int part = -1;
  bool relative = false;
  Value* adds = nullptr;
};

// Event `event` marks the work enqueued on `stream` so far.
struct Record {
  int stream;
  int event;
};

// Later work on `stream` waits for event `event` (recorded earlier in the program). Inside a
// ring loop, `previous_step` waits for what the previous step recorded (nothing in step 0).
struct Wait {
  int stream;
  int event;
  bool previous_step = false;
  // A landed value (in a loop) whose blocks the launches may wait for one by one
  // (RunState::LandedChunk::wait_part, where its collective's parts arrive one by one): then this
  // wait, for the whole landing, is skipped.
  Value* unless_by_part = nullptr;
};

// Which form of a chunked collective a Communicate node runs. Which half of a reduce-scatter
// (Communicator's reduce_scatter_parts_send / _finish): `send` moves the parts bound for other
// ranks once their GEMMs ran, `finish` makes this rank's part once its own GEMM ran (max and
// min). `land`: an all-gather whose chunks the loop's GEMMs read where they land
// (Communicator::all_gather_landed; its output is `landed` in the loop), or, after `send`, a sum
// reduce-scatter's other ranks' parts of this rank's chunk, left where they land for the own
// block's GEMM to add (Communicator::reduce_scatter_parts_landed; Launch::adds); either way a
// Release node gives the places back.
enum class ChunkPhase { whole, send, finish, land };

// Run communication segment `segment` (one resharding op: a collective over the mesh's team, or
// shard_slice) on `stream`; its results are views or buffers it allocates itself. Inside a
// ForChunks loop it moves this iteration's chunk, into the loop's preallocated buffers.
struct Communicate {
  int segment;
  int stream = 0;
  ChunkPhase phase = ChunkPhase::whole;
  // A `send` whose parts' GEMMs each recorded an event: the part of rank (r + j) mod n that of
  // event part_events + j - 1. The part goes once its event is reached, where the communicator
  // sends part by part (Communicator::reduce_scatter_parts_send_when_ready), else once all are.
  int part_events = -1;
};

// One step of a ring loop (on `stream`): sends this step's `send` to the next rank of the team
// (r + 1) while receiving the next step's `receive` from the previous one (r - 1); with no
// `receive`, into the loop's running sum of the next step (a reduce-scatter ring). Nothing in
// the last step. Through Communicator::send_recv, so no rank waits for its send to receive.
struct SendRecv {
  int stream;
  Value* send;
  Value* receive = nullptr;
};

// A reduce-scatter ring's accumulate step (on `stream`): this step's `into` += the running sum
// received from the previous rank (nothing in step 0).
struct Accumulate {
  int stream;
  Value* into;
};

// Inside a loop: this iteration's landed chunk of `value` (a `landed` all-gathered value, or the
// partial sums whose other ranks' parts a reduce-scatter landed) is read by nothing enqueued
// after this node on `stream` (the last GEMM that reads it ran there, before it), so its
// collective may reuse the places it landed in (the copy engines: the staging slots, which a peer
// overwrites two calls later) once that stream gets here.
struct Release {
  int stream;
  Value* value;
};

struct ForChunks;
struct Choose;
using Node = std::variant<Allocate, Launch, Record, Wait, Communicate, SendRecv, Accumulate, Release, ForChunks, Choose>;

// How a value is cut into a loop's chunks along its axis 0 (`count` chunks, as even as the rows
// allow: chunk i is rows [i*L/count, (i+1)*L/count) of L):
//   rows:   the value's own rows (a device's part of an all-gather's input, of a reduce-scatter's
//           output; every row of an all-reduce's partial sums, its result and the GEMM's input);
//   blocks: the value's rows are the team's `parts` blocks (rank r's rows first), each cut into
//           chunks: a Launch with part r sees chunk i of block r, a Communicate sees the [parts,
//           chunk rows, ...] view of chunk i of every block (no copy: parts at the block stride).
//           Where `own` is set, a Launch of this device's own block sees chunk i of `own` (its
//           rows) instead: the all-gathered value's own block is the input it gathers, so the
//           GEMM of it need not wait for the collective; the reduce-scattered partial sums' own
//           block is the output they reduce into, whose GEMM adds what landed (`landing`, a sum)
//           or to which the reduce-scatter's finish then adds (max, min).
//           With `landing` (a segment id; `blocks` with `own`: a GEMM -> sum reduce-scatter's
//           partial sums), that segment's ChunkPhase::land leaves the other ranks' parts of this
//           rank's chunk where they land, for the own block's GEMM to add (Launch::adds). Where
//           its communicator copies (SegmentExecutable::lands_in_place false: it reduces them into
//           one sum), the loop zeroes the value's own block of the whole buffer (this rank's term
//           of that reduction: no GEMM writes it) on the communication stream and allocates a
//           chunk of the sum before the first chunk; the landing's Communicate sees that chunk as
//           `own`'s (undefined where the parts land in place).
//   landed: an all-gather's output that only the loop's GEMM reads: as `blocks` with `own`, but a
//           Launch of another rank's block sees chunk i of it where iteration i's Communicate
//           (ChunkPhase::land) left it (RunState::landed), until the iteration's Release; the
//           whole value is a buffer only where the collective copies the chunks into it.
// And in a ring loop (step s of `parts`, on team rank r):
//   ring_block:  the value's rows are `parts` blocks; step s binds block (r - s + shift) mod parts;
//   ring_buffer: a block-sized value that is never whole: step s binds one of two scratch blocks
//                (s % 2), except step 0 binds `first` (the device's own rows) where there is one
//                and the last step binds `last` (the finished block) where there is one.
struct ChunkedValue {
  Value* value;
  enum class Layout { rows, blocks, landed, ring_block, ring_buffer } layout;
  int shift = 0;
  Value* first = nullptr;
  Value* last = nullptr;
  Value* own = nullptr;
  int landing = -1;
};

// A loop over chunks (issue 13): `body` runs `count` times; in iteration i the `values` are
// bound to views of chunk i of their whole buffers (allocated before the loop), kIterationStream
// is stream `first_pool_stream + i % pool_streams`, and the host never blocks. `why` says what
// was chosen and why (printed by --dump program). A ring loop runs one step per rank of the team
// (count = parts) with its values bound as the ring layouts say; its scratch blocks (two per
// ring_buffer value, two for a running sum) are allocated before the first step.
struct ForChunks {
  enum class Schedule { chunks, ring } schedule = Schedule::chunks;
  int count = 1;
  int parts = 1;
  std::vector<ChunkedValue> values;
  int first_pool_stream = 0;
  int pool_streams = 1;
  std::vector<Node> body;
  std::string why;
};

// The sizes the cost model reads of a pair (host_ir/cost_model.h), all at run time: `activation`
// (the GEMM's operand: cut into blocks for the gathered rows, or the rows whose products are
// reduce-scattered; whole for an all-reduce, every rank computing every row), `output` (the
// GEMM's result, whole), `moved` (what one rank's link carries a block of: the all-gather's input,
// the reduce-scatter's output; the all-reduce's whole input).
struct PairSizes {
  enum class Kind { all_gather_gemm, gemm_reduce_scatter, gemm_all_reduce } kind;
  Value* activation;
  Value* output;
  Value* moved;
  int parts;
};

// --pipeline auto where streams overlap (CUDA): the ways to run one pair, of which the cost model
// picks one per run from the run's sizes and the machine's measured rates (RunState::choose):
// `variants[k]` is named `names[k]` ("off": the pair as lowered; "chunks": its chunked loop,
// whose count the model picks, at most the loop's; "ring": its ring, in teams of several).
// `last` holds the last run's choice and its numbers (printed by --dump program).
struct Choose {
  PairSizes sizes;
  std::vector<std::string> names;
  std::vector<std::vector<Node>> variants;
  std::shared_ptr<std::string> last = std::make_shared<std::string>();
};

struct Program {
  Segmentation segmentation;
  std::vector<Node> nodes;
  int streams = 1;  // the run's own stream and the side streams
  // Side streams whose kernels the device schedules first (the greatest priority): a pipelined
  // GEMM -> reduce-scatter's GEMMs whose partial sums go to other ranks, beside its own blocks'.
  std::set<int> urgent_streams;
  int events = 0;
  std::vector<std::string> notes;  // what the passes chose not to do, and why (--dump program)
  std::vector<const Value*> fusion_outputs;  // what the run returns (a rewrite must leave them whole)
  std::string str() const;  // the `--dump program` text
};

// Lowers a segmentation to a program on one stream: for each segment in order, Allocate its
// outputs where its scheduler writes into preallocated buffers (CUDA; a direct in-place output's
// is its input's memory), then Launch it; a communication segment becomes a Communicate node.
// Streams come from the program passes. The in-place outputs that go through a copy are copied by
// the run after the program (`--dump program` lists them last).
Program lower_to_program(Segmentation segmentation);

// A Program -> Program rewrite, listed by name in the pipeline (pipeline/pipeline.cpp).
struct ProgramPassOptions {
  // The pipelining of collectives with GEMMs (--pipeline): off, auto, a chunk count, or the ring.
  enum class Pipeline { off, automatic, chunks, ring } pipeline = Pipeline::automatic;
  int chunks = 0;
};

}  // namespace alloy::host_ir
