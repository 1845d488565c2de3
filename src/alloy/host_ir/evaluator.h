// Runs a host program: holds the concrete tensor of every value, the bound sizes, and one
// executable per segment (made by the backend that owns the segment's scheduler).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "alloy/host_ir/cost_model.h"
#include "alloy/host_ir/program.h"
#include "alloy/runtime/tensor.h"

namespace alloy::multidevice {
class Communicator;
}

namespace alloy::host_ir {

// The state of one run: a tensor per Value id, and the bound symbolic sizes.
struct RunState {
  Bindings bindings;
  std::vector<Tensor> values;
  Device device;
  bool poison = false;     // fill allocated buffers with 0xFF bytes (tests)
  // The team of the fusion's mesh, for Communicate nodes (a fusion without a mesh has none).
  multidevice::Communicator* communicator = nullptr;
  // Inside a ForChunks loop: the sizes of the values bound to a chunk (value id -> sizes), which
  // concrete_shape answers instead of the bound symbols.
  std::map<int, std::vector<int64_t>> chunk_shapes;
  // --pipeline auto (Choose nodes): the cost model's choice for a pair at this run's sizes, the
  // same on every rank of the team (runtime/machine_costs.h). Unset: a Choose runs "off".
  std::function<PipelineChoice(const PairShape&)> choose;
  // The chunk count a Choose picked for the loop it runs (0: the loop's own).
  int chosen_chunks = 0;
  // Buffers a loop allocated for itself (a ring's scratch blocks), kept to the end of the run:
  // other streams use them, and the run's stream joins those before the run ends.
  std::vector<Tensor> scratch;

  const Tensor& at(const Value* v) const;
  std::vector<int64_t> concrete_shape(const Value* v) const;  // evaluates the value's extents
};

class SegmentExecutable {
 public:
  virtual ~SegmentExecutable() = default;
  // Reads the segment's inputs from `state` and stores its outputs there.
  virtual void run(RunState& state) = 0;
  // Inside a ForChunks loop (communication segments): moves this iteration's chunk between the
  // views the loop bound, writing into the bound output.
  virtual void run_chunk(RunState& state);
  // The generated source, for `--dump cuda`; empty where there is none.
  virtual std::string source() const { return {}; }
};

// Allocates the buffer of an `Allocate` node on the run's device.
using Allocator = Tensor (*)(DType dtype, const std::vector<int64_t>& sizes, RunState& state);
// dst = src, for a segment inside a loop that returned its result in a buffer of its own instead
// of the chunk view the loop bound (the CPU reference kernels, a fallback path).
using Copier = void (*)(const Tensor& dst, const Tensor& src, RunState& state);
// into += sum (same dtype and sizes; `into` at any strides, `sum` contiguous), on the current
// stream: a reduce-scatter ring's accumulate step.
using Accumulator = void (*)(const Tensor& into, const Tensor& sum, RunState& state);
// A ring's step through the run's team (multidevice/communication_segment.h): sends `in` to team
// rank `to` while receiving `out` from team rank `from`; and this device's rank in the team.
struct RingExchange {
  void (*send_recv)(const Tensor& in, int to, const Tensor& out, int from, RunState& state) = nullptr;
  int (*rank)(const RunState& state) = nullptr;
};

// The streams and events of one run of a program with side streams (CUDA): stream 0 is the
// caller's current stream.
class RunStreams {
 public:
  virtual ~RunStreams() = default;
  virtual void record(int stream, int event) = 0;
  virtual void wait(int stream, int event) = 0;
  // Makes `stream` the current one, where launches go, until the next call (0: the run's own).
  virtual void use(int stream) = 0;
  // The run's stream waits for everything enqueued on the side streams (a run cut short by an
  // error, whose buffers are freed in the run's stream order).
  virtual void join() = 0;
};
using StreamOpener = std::unique_ptr<RunStreams> (*)(const Program& program, RunState& state);

struct Executable {
  Program program;
  std::vector<std::unique_ptr<SegmentExecutable>> segments;  // by segment id
  Allocator allocate = nullptr;
  Copier copy = nullptr;
  Accumulator accumulate = nullptr;  // needed by a ring over a reduce-scatter
  RingExchange ring;                 // needed by a ring
  StreamOpener open_streams = nullptr;  // needed when a CUDA program has program.streams > 1

  void run(RunState& state) const;

 private:
  struct LoopFrame;
  struct NodeRunner;
  void run_nodes(const std::vector<Node>& nodes, RunState& state, RunStreams* streams, const LoopFrame* frame) const;
  void run_loop(const ForChunks& loop, RunState& state, RunStreams* streams) const;
};

}  // namespace alloy::host_ir
