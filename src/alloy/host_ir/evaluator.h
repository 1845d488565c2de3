// Runs a host program: holds the concrete tensor of every value, the bound sizes, and one
// executable per segment (made by the backend that owns the segment's scheduler).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "alloy/host_ir/cost_model.h"
#include "alloy/host_ir/device_runtime.h"
#include "alloy/host_ir/program.h"
#include "alloy/host_ir/trace.h"
#include "alloy/tensor/tensor.h"

namespace alloy::host_ir {

// The state of one run: a tensor per Value id, and the bound symbolic sizes.
struct RunState {
  Bindings bindings;
  std::vector<Tensor> values;
  Device device;
  bool poison = false;     // fill allocated buffers with 0xFF bytes (tests)
  // The team of the fusion's mesh, for Communicate nodes and rings (a fusion without a mesh has
  // none); a multidevice::Communicator.
  Team* team = nullptr;
  // Inside a ForChunks loop: the sizes of the values bound to a chunk (value id -> sizes), which
  // concrete_shape answers instead of the bound symbols.
  std::map<int, std::vector<int64_t>> chunk_shapes;
  // --pipeline auto (Choose nodes): the cost model's choice for a pair at this run's sizes, the
  // same on every rank of the team (runtime/tune/machine_costs.h), kept by the caller across runs
  // (a cached run copies nothing). Unset: a Choose runs "off".
  std::function<const PipelineChoice&(const PairShape&)> choose;
  // The chunk count a Choose picked for the loop it runs (0: the loop's own).
  int chosen_chunks = 0;
  // Inside a ForChunks loop, this iteration's chunk of each `landed` value (by value id), set by
  // the Communicate that lands it (ChunkPhase::land): an all-gather's, per team rank, where that
  // rank's block of the chunk can be read; a reduce-scatter's (by its partial sums' id), what the
  // own block's GEMM adds (a part per other rank where they land in place, else their one sum);
  // and what gives those places back to the collective (the Release node runs it on its stream,
  // behind the GEMMs that read them, and forgets the entry); where the collective's parts arrive
  // one by one (Communicator::waits_by_part), what makes the current stream wait for one part
  // (a launch reading block q waits for it alone; Wait::unless_by_part skips the whole chunk's).
  struct LandedChunk {
    std::vector<Tensor> parts;
    std::function<void()> release;
    std::function<void(int part)> wait_part;
  };
  std::map<int, LandedChunk> landed;
  // Buffers a loop allocated for itself (a ring's scratch blocks, a landing's sum), kept to the end of the run:
  // other streams use them, and the run's stream joins those before the run ends.
  std::vector<Tensor> scratch;
  // During a Communicate `send` with part_events: enqueues on the current stream (the send's) a
  // wait for the GEMM of the part bound for team rank p (nothing where the run has one stream).
  std::function<void(int p)> send_part_ready;
  // A traced run (host_ir/trace.h): a span for each node that enqueues work. Null: nothing is marked.
  TraceRecorder* trace = nullptr;
  // What the run checks once its last node is enqueued (every stream joined into the run's), in
  // the order asked, one check an owner: a generated kernel's flag of out-of-range gather indices,
  // read back from the device, which waits for the run's work there (backend/cuda/gather_fault.h).
  // A check that fails throws the user error.
  std::vector<std::pair<const void*, std::function<void()>>> end_checks;
  void check_at_end(const void* owner, std::function<void()> check);
  // A run of a sharded fusion in a job of several processes: the CPU reference's gathers defer an
  // out-of-range index to the end checks too (the value read is 0), so every rank reaches the
  // run's end (no rank waits in a collective for one that stopped) and the job agrees on the
  // failure there (FusionExecutor). `in_end_checks`: the run got as far as its end checks.
  bool defer_index_errors = false;
  bool in_end_checks = false;

  const Tensor& at(const Value* v) const;
  std::vector<int64_t> concrete_shape(const Value* v) const;  // evaluates the value's extents
};

class SegmentExecutable {
 public:
  virtual ~SegmentExecutable() = default;
  // Reads the segment's inputs from `state` and stores its outputs there.
  virtual void run(RunState& state) = 0;
  // Inside a ForChunks loop (communication segments): moves this iteration's chunk between the
  // views the loop bound, writing into the bound output (a reduce-scatter in halves: `phase`).
  virtual void run_chunk(RunState& state, ChunkPhase phase);
  // A collective run with ChunkPhase::land: whether its chunks are read where they land, so the
  // loop holds no buffer for them (an all-gather: Allocate's `unless_landed`; a reduce-scatter:
  // no scratch sum, ChunkedValue::landing); false: it copies them into that buffer and the loop
  // reads them there.
  virtual bool lands_in_place(const RunState& state) const;
  // Runs the segment with `addends` added to its one output `into` (each of its chunk's sizes and
  // dtype, contiguous): the own block's GEMM of a GEMM -> reduce-scatter loop adding the other
  // ranks' partial sums where they landed (Launch::adds). The default runs, then adds each addend
  // on the current stream (`device`'s accumulate): the CPU, generated kernels, a GEMM cuBLASLt
  // refuses. The cuBLASLt matmul takes the first as its C (beta = 1) and adds the rest so.
  // `ready(i)` (where given) enqueues on the current stream a wait for addends[i], called before
  // the first read of it (the parts of a landing that arrive one by one).
  virtual void run_accumulating(RunState& state, const Value* into, const std::vector<Tensor>& addends, const DeviceRuntime& device,
                                const std::function<void(size_t)>& ready);
  // The generated source, for `--dump cuda`; empty where there is none.
  virtual std::string source() const { return {}; }
};

struct Executable {
  Program program;
  std::vector<std::unique_ptr<SegmentExecutable>> segments;  // by segment id
  // Allocations, copies, a ring's accumulate steps and the run's streams.
  const DeviceRuntime* device = nullptr;

  void run(RunState& state) const;

 private:
  struct LoopFrame;
  struct NodeRunner;
  void run_nodes(const std::vector<Node>& nodes, RunState& state, RunStreams* streams, const LoopFrame* frame) const;
  void run_loop(const ForChunks& loop, RunState& state, RunStreams* streams) const;
  void prepare_landings(const ForChunks& loop, LoopFrame& frame, RunState& state, RunStreams* streams) const;
};

}  // namespace alloy::host_ir
