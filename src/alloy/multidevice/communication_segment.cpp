#include "alloy/multidevice/communication_segment.h"

#include <numeric>

#include "alloy/ir/op_table.h"
#include "alloy/multidevice/communicator.h"

namespace alloy::multidevice {
namespace {

PartialReduce reduce_of(const Op& op) {
  const std::string& r = op.string_attr("reduce");
  return r == "max" ? PartialReduce::max : r == "min" ? PartialReduce::min : PartialReduce::sum;
}

// The axis order that puts `axis` first, and its inverse.
std::vector<int> axis_first(int rank, int axis) {
  std::vector<int> order{axis};
  for (int a = 0; a < rank; ++a)
    if (a != axis) order.push_back(a);
  return order;
}
std::vector<int> inverse(const std::vector<int>& order) {
  std::vector<int> inv(order.size());
  for (size_t i = 0; i < order.size(); ++i) inv[size_t(order[i])] = int(i);
  return inv;
}

class CommunicationSegment final : public host_ir::SegmentExecutable {
 public:
  CommunicationSegment(const Segment& s, const host_ir::DeviceRuntime& device) : op_(*s.ops.at(0)), device_(device) {
    ALLOY_CHECK(s.ops.size() == 1 && is_communication(op_.kind), "a communication segment holds one resharding op");
  }

  // Inside a pipelined loop: chunk i of every rank's block (an all-reduce's: chunk i of the
  // rows), into the loop's whole buffers; a landed all-gather's chunk, or a landed reduce-scatter's
  // other ranks' parts of this rank's chunk, wherever its communicator leaves them, handed to the
  // loop in RunState::landed with what gives the places back.
  void run_chunk(host_ir::RunState& state, host_ir::ChunkPhase phase) override {
    ALLOY_CHECK(state.team, "a chunked ", op_name(op_.kind), " without a team");
    Communicator& comm = team_of(state);
    const Tensor& in = state.at(op_.inputs[0]);
    if (phase == host_ir::ChunkPhase::land) return land(comm, in, state);
    const Tensor& out = state.at(op_.outputs[0]);
    if (op_.kind == OpKind::all_gather) return comm.all_gather_into_parts(device_.contiguous(in), out);
    if (op_.kind == OpKind::reduce_scatter) {
      if (phase == host_ir::ChunkPhase::send && state.send_part_ready)
        return comm.reduce_scatter_parts_send_when_ready(in, reduce_of(op_), state.send_part_ready);
      if (phase == host_ir::ChunkPhase::send) return comm.reduce_scatter_parts_send(in, reduce_of(op_));
      if (phase == host_ir::ChunkPhase::finish) return comm.reduce_scatter_parts_finish(in, out, reduce_of(op_));
      return comm.reduce_scatter_parts(in, out, reduce_of(op_));
    }
    if (op_.kind == OpKind::all_reduce) {
      // rows [a, b) of the whole partial sums into the same rows of the whole result: both
      // contiguous views, which every communicator's all_reduce takes at their offset
      ALLOY_CHECK(out.is_contiguous(), "a chunked all_reduce into ", out.str());
      return comm.all_reduce(device_.contiguous(in), out, reduce_of(op_));
    }
    internal_error("run_chunk: ", op_name(op_.kind));
  }

  bool lands_in_place(const host_ir::RunState& state) const override {
    return (op_.kind == OpKind::all_gather || op_.kind == OpKind::reduce_scatter) && state.team && team_of(state).lands_in_place();
  }

  void run(host_ir::RunState& state) override {
    const Tensor& in = state.at(op_.inputs[0]);
    // a fusion without a mesh (resharding ops written by hand) is a team of one
    Tensor out = state.team ? communicate(team_of(state), in, state) : in;
    ALLOY_CHECK(out.sizes() == state.concrete_shape(op_.outputs[0]), op_name(op_.kind), " of '", op_.inputs[0]->name,
                "' made ", out.str(), "; expected the local shape of '", op_.outputs[0]->name, "'");
    state.values[op_.outputs[0]->id] = std::move(out);
  }

 private:
  Tensor communicate(Communicator& comm, const Tensor& in, host_ir::RunState& state) {
    int n = comm.size();
    int rank = in.dim();
    switch (op_.kind) {
      case OpKind::all_gather: {
        auto order = axis_first(rank, int(op_.int_attr("axis")));
        Tensor part = device_.contiguous(in.permute(order));
        std::vector<int64_t> sizes = part.sizes();
        sizes[0] *= n;
        Tensor whole = device_.allocate(in.dtype(), sizes, state);
        comm.all_gather(part, whole);
        return whole.permute(inverse(order));
      }
      case OpKind::reduce_scatter: {
        auto order = axis_first(rank, int(op_.int_attr("axis")));
        Tensor terms = device_.contiguous(in.permute(order));
        std::vector<int64_t> sizes = terms.sizes();
        sizes[0] /= n;
        Tensor part = device_.allocate(in.dtype(), sizes, state);
        comm.reduce_scatter(terms, part, reduce_of(op_));
        return part.permute(inverse(order));
      }
      case OpKind::all_reduce: {
        Tensor terms = device_.contiguous(in);
        Tensor sum = device_.allocate(in.dtype(), in.sizes(), state);
        comm.all_reduce(terms, sum, reduce_of(op_));
        return sum;
      }
      case OpKind::all_to_all: return all_to_all(comm, in, state);
      case OpKind::shard_slice: {
        int axis = int(op_.int_attr("axis"));
        std::vector<int64_t> sizes = in.sizes();
        sizes[size_t(axis)] /= n;
        return in.as_strided(sizes, in.strides(), in.offset() + comm.rank() * sizes[size_t(axis)] * in.stride(axis));
      }
      default: internal_error("communicate: ", op_name(op_.kind));
    }
  }

  // Sharded along `from` to sharded along `to`: split `to` into n parts (part r goes to rank r),
  // exchange, and lay the received parts (one per source rank) along `from`.
  Tensor all_to_all(Communicator& comm, const Tensor& in, host_ir::RunState& state) {
    int n = comm.size();
    int from = int(op_.int_attr("from_axis")), to = int(op_.int_attr("axis"));
    // in with axis `to` split into [n, part] and the n moved first: [n, ...axes with `to` = part...]
    std::vector<int64_t> sizes = in.sizes(), strides = in.strides();
    int64_t part = sizes[size_t(to)] / n;
    sizes[size_t(to)] = part;
    sizes.insert(sizes.begin(), n);
    strides.insert(strides.begin(), part * in.stride(to));
    Tensor send = device_.contiguous(in.as_strided(sizes, strides, in.offset()));
    Tensor received = device_.allocate(in.dtype(), send.sizes(), state);
    comm.all_to_all(send, received);
    // received[i] is source rank i's part along `from`: move that axis just before `from`, merge
    std::vector<int> order;
    for (int a = 1; a <= in.dim(); ++a) {
      if (a - 1 == from) order.push_back(0);
      order.push_back(a);
    }
    Tensor packed = device_.contiguous(received.permute(order));
    std::vector<int64_t> out_sizes = in.sizes();
    out_sizes[size_t(from)] *= n;
    out_sizes[size_t(to)] = part;
    return packed.view(out_sizes);
  }

  void land(Communicator& comm, const Tensor& in, host_ir::RunState& state) {
    if (op_.kind == OpKind::reduce_scatter) return land_sum(comm, in, state);
    ALLOY_CHECK(op_.kind == OpKind::all_gather, "a landed ", op_name(op_.kind));
    // the loop's buffer of the chunks, where the communicator copies them into one (else none)
    const Tensor& parts = state.values.at(op_.outputs[0]->id);
    ALLOY_CHECK(comm.lands_in_place() || parts.defined(), "a landed all_gather of '", op_.inputs[0]->name, "' through ", comm.name(),
                ", which copies, without a buffer to copy into");
    LandedParts landed = comm.all_gather_landed(device_.contiguous(in), parts);
    ALLOY_CHECK(landed.parts.size() == size_t(comm.size()), comm.name(), ": all_gather_landed returned ", landed.parts.size(), " parts");
    std::vector<Tensor> views = landed.parts;
    std::function<void(int)> wait_part = part_waits(comm, landed);
    state.landed[op_.outputs[0]->id] = {std::move(views), [&comm, landed = std::move(landed)] { comm.release_landed(landed); },
                                        std::move(wait_part)};
  }

  // A sum reduce-scatter's other ranks' parts of this rank's chunk (`in`: the parts view of the
  // partial sums, sent before), for the own block's GEMM to add: where the communicator reduces
  // them, into the loop's scratch chunk (the output's binding in this node; part rank() of `in`
  // is the zeroed own block).
  void land_sum(Communicator& comm, const Tensor& in, host_ir::RunState& state) {
    ALLOY_CHECK(reduce_of(op_) == PartialReduce::sum, "a landed reduce_scatter by ", op_.string_attr("reduce"));
    const Tensor& sum = state.values.at(op_.outputs[0]->id);
    ALLOY_CHECK(comm.lands_in_place() || sum.defined(), "a landed reduce_scatter of '", op_.inputs[0]->name, "' through ", comm.name(),
                ", which reduces, without a chunk to sum into");
    LandedParts landed = comm.reduce_scatter_parts_landed(in, sum);
    std::vector<Tensor> addends = landed.parts;
    std::function<void(int)> wait_part = part_waits(comm, landed);
    state.landed[op_.inputs[0]->id] = {std::move(addends), [&comm, landed = std::move(landed)] { comm.release_landed(landed); },
                                       std::move(wait_part)};
  }

  // A landing whose parts a reader may wait for one by one (RunState::LandedChunk::wait_part);
  // none where they land together, or nothing landed to wait for.
  static std::function<void(int)> part_waits(Communicator& comm, const LandedParts& landed) {
    if (!comm.waits_by_part() || landed.call == 0) return {};
    return [&comm, landed](int part) { comm.wait_landed_part(landed, part); };
  }

  // Every team a run holds is a communicator (the executor's, from communicator_for).
  static Communicator& team_of(const host_ir::RunState& state) { return static_cast<Communicator&>(*state.team); }

  const Op& op_;
  const host_ir::DeviceRuntime& device_;
};

}  // namespace

std::unique_ptr<host_ir::SegmentExecutable> make_communication_segment(const Segment& segment, const host_ir::DeviceRuntime& device) {
  return std::make_unique<CommunicationSegment>(segment, device);
}

}  // namespace alloy::multidevice
