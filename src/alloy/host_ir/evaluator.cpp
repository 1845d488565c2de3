#include "alloy/host_ir/evaluator.h"

#include <algorithm>
#include <array>

#include "alloy/common/error.h"
#include "alloy/ir/op_table.h"

namespace alloy::host_ir {

const Tensor& RunState::at(const Value* v) const {
  const Tensor& t = values.at(v->id);
  if (!t.defined()) internal_error("value '", v->name, "' is read before it is computed");
  return t;
}

std::vector<int64_t> RunState::concrete_shape(const Value* v) const {
  if (!chunk_shapes.empty())
    if (auto it = chunk_shapes.find(v->id); it != chunk_shapes.end()) return it->second;
  std::vector<int64_t> sizes;
  sizes.reserve(v->shape().size());
  for (const Extent& e : v->shape()) {
    auto n = e.evaluate(bindings);
    if (!n) user_error_at("value '" + v->name + "'", "size ", e.str(true), " is not a whole number for the bound sizes");
    if (*n < 0) user_error_at("value '" + v->name + "'", "size ", e.str(true), " is negative (", *n, ")");
    sizes.push_back(*n);
  }
  return sizes;
}

void SegmentExecutable::run_chunk(RunState&, ChunkPhase) { internal_error("this segment cannot run inside a chunked loop"); }
bool SegmentExecutable::lands_in_place(const RunState&) const { return false; }

void SegmentExecutable::run_accumulating(RunState& state, const Value* into, const std::vector<Tensor>& addends, const DeviceRuntime& device,
                                         const std::function<void(size_t)>& ready) {
  run(state);
  if (addends.empty()) return;
  if (ready)
    for (size_t i = 0; i < addends.size(); ++i) ready(i);
  device.accumulate(state.at(into), addends);
}

Tensor DeviceRuntime::allocate(DType dtype, const std::vector<int64_t>& sizes, const RunState& state) const {
  Tensor t = empty(dtype, sizes, state.device.index);
  if (state.poison) fill_poison(t);
  return t;
}

// One iteration of a ForChunks loop: which chunk (or ring step), of how many, and the buffers.
struct Executable::LoopFrame {
  const ForChunks* loop;
  int iteration;
  int count;                   // chunks this run (at most the loop's count, at most the rows)
  int rank = 0;                // this device's rank in the team (ring loops)
  std::vector<Tensor> whole;   // per loop.values entry (undefined for a ring_buffer, and a landed value read where it lands)
  std::vector<Tensor> own;     // per loop.values entry: its `own` value's tensor, where it has one
  std::vector<std::array<Tensor, 2>> scratch;  // per loop.values entry: a ring_buffer's two blocks
  std::array<Tensor, 2> sums;  // a reduce-scatter ring's running sums
  std::vector<Tensor> landing_sum;  // per loop.values entry with a `landing` that copies: a block of the sum

  bool ring() const { return loop->schedule == ForChunks::Schedule::ring; }
  int stream(int s) const { return s == kIterationStream ? loop->first_pool_stream + iteration % loop->pool_streams : s; }

  // Rows [begin, end) of block `part` (of `parts` blocks; parts = 1 for the rows layout).
  std::pair<int64_t, int64_t> rows(const Tensor& t, int parts) const {
    int64_t block = t.size(0) / parts;
    return {iteration * block / count, (iteration + 1) * block / count};
  }
  static Tensor row_range(const Tensor& t, int64_t begin, int64_t end) {
    std::vector<int64_t> sizes = t.sizes();
    sizes[0] = end - begin;
    return t.as_strided(sizes, t.strides(), t.offset() + begin * t.stride(0));
  }
  Tensor chunk(size_t k, int part) const {
    if (part == rank && own[k].defined()) {
      auto [begin, end] = rows(own[k], 1);
      return row_range(own[k], begin, end);
    }
    const Tensor& t = whole[k];
    bool blocks = loop->values[k].layout == ChunkedValue::Layout::blocks;
    int parts = blocks ? loop->parts : 1;
    auto [begin, end] = rows(t, parts);
    int64_t base = (blocks ? part * (t.size(0) / parts) : 0) + begin;
    return row_range(t, base, base + end - begin);
  }
  // What value k is bound to in ring step `step`.
  Tensor ring_view(size_t k, int step, const RunState& state) const {
    const ChunkedValue& v = loop->values[k];
    int n = loop->parts;
    if (v.layout == ChunkedValue::Layout::ring_block) {
      int64_t block = whole[k].size(0) / n;
      int64_t b = ((rank - step + v.shift) % n + n) % n;
      return row_range(whole[k], b * block, (b + 1) * block);
    }
    if (step == 0 && v.first) return state.at(v.first);
    if (step == n - 1 && v.last) return state.at(v.last);
    return scratch[k][size_t(step % 2)];
  }
  // Where this iteration's Communicate left block `part` of landed value k (its own block: `own`).
  Tensor landed(size_t k, int part, const RunState& state) const {
    if (part == rank && own[k].defined()) return chunk(k, part);
    const Value* v = loop->values[k].value;
    auto it = state.landed.find(v->id);
    if (it == state.landed.end())
      internal_error("block ", part, " of '", v->name, "' is read before its chunk landed (or after its Release)");
    return it->second.parts.at(size_t(part));
  }
  // This iteration's rows of value k's scratch sum (undefined where its landing needs none): rows
  // of their own each iteration, as chunk i + 1's sum is made on the communication stream while
  // chunk i's own GEMM may still read chunk i's.
  Tensor landing_sum_chunk(size_t k) const {
    if (k >= landing_sum.size() || !landing_sum[k].defined()) return Tensor();
    auto [begin, end] = rows(whole[k], loop->parts);
    return row_range(landing_sum[k], begin, end);
  }
  // This iteration's binding of every value (block `part` of the blocked ones).
  Tensor bound(size_t k, int part, const RunState& state) const {
    if (ring()) return ring_view(k, iteration, state);
    return loop->values[k].layout == ChunkedValue::Layout::landed ? landed(k, part, state) : chunk(k, part);
  }
  size_t index_of(const Value* v) const {
    for (size_t k = 0; k < loop->values.size(); ++k)
      if (loop->values[k].value == v) return k;
    internal_error("value '", v->name, "' is not bound by its loop");
  }
  // [parts, chunk rows, ...]: chunk `iteration` of every block, at the block stride.
  Tensor parts_view(size_t k) const {
    const Tensor& t = whole[k];
    int parts = loop->parts;
    auto [begin, end] = rows(t, parts);
    std::vector<int64_t> sizes = t.sizes(), strides = t.strides();
    sizes[0] = end - begin;
    sizes.insert(sizes.begin(), parts);
    strides.insert(strides.begin(), (t.size(0) / parts) * t.stride(0));
    return t.as_strided(sizes, strides, t.offset() + begin * t.stride(0));
  }
};

void Executable::run(RunState& state) const {
  std::unique_ptr<RunStreams> streams;
  ALLOY_CHECK(device != nullptr, "an executable without a device runtime");
  if (program.streams > 1 && program.segmentation.target == Target::cuda) streams = device->open_streams(program, state);
  if (state.trace) state.trace->begin_run();
  try {
    run_nodes(program.nodes, state, streams.get(), nullptr);
  } catch (...) {
    if (streams) {
      streams->use(0);
      streams->join();
    }
    // a landed chunk whose Release the error skipped goes back to its collective (behind every
    // stream's work, joined above), so the team's next call is not refused; the first error stays
    for (auto& [id, chunk] : state.landed) {
      try {
        chunk.release();
      } catch (...) {
      }
    }
    state.landed.clear();
    throw;
  }
  state.in_end_checks = true;
  for (auto& [owner, check] : state.end_checks) check();
}

void RunState::check_at_end(const void* owner, std::function<void()> check) {
  for (auto& [known, _] : end_checks)
    if (known == owner) return;
  end_checks.emplace_back(owner, std::move(check));
}

namespace {

int64_t numel_of(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// A pair's sizes at this run, for the cost model.
PairShape shape_of(const PairSizes& p, const RunState& state) {
  PairShape s;
  switch (p.kind) {
    case PairSizes::Kind::all_gather_gemm: s.kind = PairShape::Kind::all_gather_gemm; break;
    case PairSizes::Kind::gemm_reduce_scatter: s.kind = PairShape::Kind::gemm_reduce_scatter; break;
    case PairSizes::Kind::gemm_all_reduce: s.kind = PairShape::Kind::gemm_all_reduce; break;
  }
  s.parts = p.parts;
  std::vector<int64_t> a = state.concrete_shape(p.activation), o = state.concrete_shape(p.output), m = state.concrete_shape(p.moved);
  s.k = a.empty() ? 1 : a.back();
  int64_t gemm_rows = s.k > 0 ? numel_of(a) / s.k : 0;
  // an all-reduce's rows are not blocks: every rank computes (partial sums of) every row
  s.rows = s.kind == PairShape::Kind::gemm_all_reduce ? gemm_rows : gemm_rows / std::max(1, p.parts);
  s.n = gemm_rows > 0 ? numel_of(o) / gemm_rows : 0;
  s.block_bytes = numel_of(m) * dtype_size(p.moved->dtype());
  return s;
}

// A launch's span name: its op, or for several the segment's scheduler, and what it writes
// ("linear h", "matmul h", "pointwise g").
std::string launch_name(const Segment& s) {
  std::string name = s.ops.size() == 1 ? std::string(op_name(s.ops[0]->kind)) : std::string(scheduler_name(s.scheduler));
  for (size_t i = 0; i < s.outputs.size() && i < 3; ++i) name += (i ? ", " : " ") + s.outputs[i]->name;
  return s.outputs.size() > 3 ? name + ", ..." : name;
}

}  // namespace

// One node at a time, each kind by its own overload. Without RunStreams (the CPU runs every node
// in order) stream nodes are nothing to do; inside a loop (`frame`) stream indices are the
// iteration's and chunked values are bound to this iteration's views.
struct Executable::NodeRunner {
  const Executable& x;
  RunState& state;
  RunStreams* streams;
  const LoopFrame* frame;

  void on_stream(int stream) const {
    if (streams) streams->use(frame ? frame->stream(stream) : stream);
  }
  // Runs `body` with `stream` current (the run's stream again after it).
  template <class Body>
  void with_stream(int stream, Body&& body) const {
    if (stream != 0) on_stream(stream);
    body();
    if (stream != 0) on_stream(0);
  }
  bool last_step() const { return frame && frame->iteration == frame->count - 1; }

  // A node's place in its loop, for span names: " chunk 2" (" block 1"), " step 1", or nothing.
  std::string place(int part = -1) const {
    if (!frame) return "";
    if (frame->ring()) return " step " + std::to_string(frame->iteration);
    return " chunk " + std::to_string(frame->iteration) + (part >= 0 ? " block " + std::to_string(part) : "");
  }
  // Runs `body`, which enqueues on the node's stream `stream` (made current), in a span of the
  // trace where the run is traced; `name` is called only then.
  template <class Name, class Body>
  void span(int stream, SpanKind kind, Name&& name, Body&& body) const {
    if (!state.trace) return body();
    int id = state.trace->open(name(), kind, frame ? frame->stream(stream) : stream);
    body();
    state.trace->close(id);
  }
  // Likewise for work of the host alone (on the host's track).
  template <class Name, class Body>
  void host_span(Name&& name, Body&& body) const {
    if (!state.trace) return body();
    int id = state.trace->open(name(), SpanKind::host, kHostTrack);
    body();
    state.trace->close(id);
  }

  void operator()(const Allocate& a) const {
    host_span([&] { return "allocate " + a.value->name + (a.input ? " (input " + a.input->name + "'s memory)" : ""); }, [&] {
      if (a.unless_landed >= 0 && x.segments.at(size_t(a.unless_landed))->lands_in_place(state)) return;
      std::vector<int64_t> sizes = state.concrete_shape(a.value);
      if (a.input) {
        const Tensor& memory = state.at(a.input);
        // the executor has checked the aliasing rule (no overlap with another input, no zero
        // stride) before the run; a tensor of other sizes (symbols the run finds unequal) gets
        // a buffer, and the executor's in-place write reports the mismatch
        if (memory.sizes() == sizes && memory.dtype() == a.value->dtype() && memory.device() == state.device && memory.is_contiguous()) {
          state.values[a.value->id] = memory;
          return;
        }
      }
      state.values[a.value->id] = x.device->allocate(a.value->dtype(), std::move(sizes), state);
    });
  }

  // The block a Launch in a loop binds (its part, or the part relative to this device's rank).
  int part_of(const Launch& l) const {
    if (!frame) return l.part;
    int n = frame->loop->parts;
    return l.relative ? ((frame->rank + l.part) % n + n) % n : std::max(l.part, 0);
  }

  // The segment's executable, in a span (a view segment's is a copy's: it computes nothing); with
  // `adds`, adding the iteration's landed parts of that value to its output.
  void launch(const Launch& l) const {
    const Segment& s = x.program.segmentation.segments.at(size_t(l.segment));
    SegmentExecutable& segment = *x.segments.at(size_t(l.segment));
    if (!l.adds)
      return span(l.stream, s.scheduler == SchedulerKind::noop ? SpanKind::copy : SpanKind::compute,
                  [&] { return launch_name(s) + place(part_of(l)); }, [&] { segment.run(state); });
    auto it = state.landed.find(l.adds->id);
    if (it == state.landed.end()) internal_error("'", l.adds->name, "' is added before its other ranks' parts landed (or after its Release)");
    ALLOY_CHECK(s.outputs.size() == 1, "a launch that adds landed parts writes one output, not ", s.outputs.size());
    // where the parts land one by one, each is waited for just before it is read (the Wait for
    // the whole landing was skipped)
    // (a span each in a trace: what the own GEMM idles for, apart from what it computes and adds)
    std::function<void(size_t)> ready;
    if (it->second.wait_part)
      ready = [&](size_t i) {
        span(l.stream, SpanKind::wait, [&] { return "wait for " + l.adds->name + "'s part " + std::to_string(i) + place(part_of(l)); },
             [&] { it->second.wait_part(int(i)); });
      };
    span(l.stream, SpanKind::compute, [&] { return launch_name(s) + place(part_of(l)) + " + landed"; },
         [&] { segment.run_accumulating(state, s.outputs[0], it->second.parts, *x.device, ready); });
  }

  void operator()(const Launch& l) const {
    with_stream(l.stream, [&] {
      if (frame) launch_chunk(l);
      else launch(l);
    });
  }

  // A landed block the launch reads, where its collective lets a reader wait for that block alone
  // (LandedChunk::wait_part: the Wait for the whole landing was skipped), waited for on the
  // launch's stream (current).
  void wait_for_landed_part(const Launch& l, int part) const {
    for (size_t k = 0; k < frame->loop->values.size(); ++k) {
      const ChunkedValue& v = frame->loop->values[k];
      if (v.layout != ChunkedValue::Layout::landed || (part == frame->rank && frame->own[k].defined())) continue;
      auto it = state.landed.find(v.value->id);
      if (it == state.landed.end() || !it->second.wait_part) continue;
      span(l.stream, SpanKind::wait, [&] { return "wait for " + v.value->name + place(part); }, [&] { it->second.wait_part(part); });
    }
  }

  // A launch inside a loop: this iteration's chunk of every chunked value (block l.part of the
  // blocked ones); what the segment made elsewhere is copied into its chunk.
  void launch_chunk(const Launch& l) const {
    const Segment& s = x.program.segmentation.segments.at(size_t(l.segment));
    std::vector<std::pair<const Value*, Tensor>> bound;
    const int part = part_of(l);
    for (size_t k = 0; k < frame->loop->values.size(); ++k) {
      const Value* v = frame->loop->values[k].value;
      Tensor view = frame->bound(k, part, state);
      state.values[v->id] = view;
      state.chunk_shapes[v->id] = view.sizes();
      if (std::find(s.outputs.begin(), s.outputs.end(), v) != s.outputs.end()) bound.emplace_back(v, view);
    }
    wait_for_landed_part(l, part);
    launch(l);
    for (auto& [v, view] : bound) {
      const Tensor& made = state.values[v->id];
      if (made.data() == view.data()) continue;
      span(l.stream, SpanKind::copy, [&] { return "copy " + v->name + place(part_of(l)); }, [&] { x.device->copy(view, made); });
      state.values[v->id] = view;
    }
  }

  void operator()(const Record& r) const {
    if (streams) streams->record(frame ? frame->stream(r.stream) : r.stream, r.event);
  }

  void operator()(const Wait& w) const {
    if (w.previous_step && (!frame || frame->iteration == 0)) return;
    if (w.unless_by_part) {  // the launches wait for their own blocks of this landing instead
      auto it = state.landed.find(w.unless_by_part->id);
      if (it != state.landed.end() && it->second.wait_part) return;
    }
    if (!streams) return;  // one stream, or the CPU: every node runs in order, nothing to wait for
    // marked on the waiting stream before and after the wait: the span is the time it idled
    int stream = frame ? frame->stream(w.stream) : w.stream;
    if (state.trace) streams->use(stream);
    span(w.stream, SpanKind::wait, [&] { return "wait event " + std::to_string(w.event) + place(); },
         [&] { streams->wait(stream, w.event); });
    if (state.trace) streams->use(0);
  }

  void operator()(const Communicate& c) const {
    with_stream(c.stream, [&] {
      const Op& op = *x.program.segmentation.segments.at(size_t(c.segment)).ops.at(0);
      auto name = [&] { return std::string(op_name(op.kind)) + " " + op.inputs.at(0)->name + place(); };
      SpanKind kind = op.kind == OpKind::shard_slice ? SpanKind::copy : SpanKind::communication;  // this device's part: no message
      if (!frame) return span(c.stream, kind, name, [&] { x.segments.at(size_t(c.segment))->run(state); });
      for (size_t k = 0; k < frame->loop->values.size(); ++k) {
        const ChunkedValue& v = frame->loop->values[k];
        if (v.layout == ChunkedValue::Layout::landed)  // the chunks' buffer, where the collective copies into one
          state.values[v.value->id] = frame->whole[k].defined() ? frame->parts_view(k) : Tensor();
        else
          state.values[v.value->id] = v.layout == ChunkedValue::Layout::blocks ? frame->parts_view(k) : frame->chunk(k, 0);
      }
      // a reduce-scatter's landing: its output is the scratch chunk of the other ranks' sum where
      // the communicator copies, none where their parts land in place
      if (c.phase == ChunkPhase::land)
        for (size_t k = 0; k < frame->loop->values.size(); ++k)
          if (const ChunkedValue& v = frame->loop->values[k]; v.landing >= 0 && v.own)
            state.values[v.own->id] = frame->landing_sum_chunk(k);
      // (forgotten when the node ends, an error included)
      struct Forget {
        std::function<void(int)>& ready;
        ~Forget() { ready = nullptr; }
      } forget{state.send_part_ready};
      if (c.part_events >= 0)
        state.send_part_ready = [this, &c](int p) {
          int n = frame->loop->parts, j = ((p - frame->rank) % n + n) % n;
          ALLOY_CHECK(j > 0, "a wait for the own part's GEMM before a send");
          if (streams) streams->wait(frame->stream(c.stream), c.part_events + j - 1);
        };
      span(c.stream, kind, name, [&] { x.segments.at(size_t(c.segment))->run_chunk(state, c.phase); });
    });
  }

  // One ring step's exchange: this rank's block to the next rank, the previous rank's into the
  // next step's buffer (none after the last step).
  void operator()(const SendRecv& sr) const {
    ALLOY_CHECK(frame && frame->ring(), "SendRecv outside a ring loop");
    if (last_step()) return;
    ALLOY_CHECK(state.team != nullptr, "a ring without a team");
    with_stream(sr.stream, [&] {
      span(sr.stream, SpanKind::communication, [&] { return "send_recv " + sr.send->name + place(); }, [&] { exchange(sr); });
    });
  }

  void exchange(const SendRecv& sr) const {
    Tensor send = frame->ring_view(frame->index_of(sr.send), frame->iteration, state);
    Tensor receive = sr.receive ? frame->ring_view(frame->index_of(sr.receive), frame->iteration + 1, state)
                                : frame->sums[size_t((frame->iteration + 1) % 2)];
    if (!send.is_contiguous()) {  // the device's own rows, as the caller laid them out
      Tensor packed = x.device->allocate(send.dtype(), send.sizes(), state);
      x.device->copy(packed, send);
      state.scratch.push_back(packed);  // used on this stream: kept to the run's end, as the ring's scratch
      send = packed;
    }
    ALLOY_CHECK(receive.is_contiguous(), "a ring receives into ", receive.str());
    int n = frame->loop->parts;
    state.team->send_recv(send, (frame->rank + 1) % n, receive, (frame->rank + n - 1) % n);
  }

  void operator()(const Accumulate& acc) const {
    ALLOY_CHECK(frame && frame->ring(), "Accumulate outside a ring loop");
    if (frame->iteration == 0) return;
    with_stream(acc.stream, [&] {
      span(acc.stream, SpanKind::compute, [&] { return "accumulate " + acc.into->name + place(); }, [&] {
        x.device->accumulate(frame->ring_view(frame->index_of(acc.into), frame->iteration, state), {frame->sums[size_t(frame->iteration % 2)]});
      });
    });
  }

  // Gives this iteration's landed chunk back to its collective, behind the work on the node's
  // stream (the GEMMs that read it). No span: like a Record, it enqueues a signal (the copy
  // engines: a flag write), not work that takes time on the stream.
  void operator()(const Release& r) const {
    ALLOY_CHECK(frame && !frame->ring(), "Release outside a chunked loop");
    auto it = state.landed.find(r.value->id);
    ALLOY_CHECK(it != state.landed.end(), "Release of '", r.value->name, "' with no chunk landed in this iteration");
    with_stream(r.stream, [&] { it->second.release(); });
    state.landed.erase(it);
  }

  void operator()(const ForChunks& f) const {
    ALLOY_CHECK(frame == nullptr, "a ForChunks loop inside another");
    x.run_loop(f, state, streams);
  }

  // The variant the cost model picks for this run's sizes (off where the run has none).
  void operator()(const Choose& choose) const {
    ALLOY_CHECK(frame == nullptr, "a Choose inside a loop");
    size_t variant = 0;
    state.chosen_chunks = 0;
    host_span([] { return std::string("choose pipeline (cost model)"); }, [&] { variant = chosen_variant(choose); });
    x.run_nodes(choose.variants.at(variant), state, streams, nullptr);
    state.chosen_chunks = 0;
  }

  size_t chosen_variant(const Choose& choose) const {
    if (!state.choose) {
      *choose.last = "off (no cost model in this run)";
      return 0;
    }
    PairShape shape = shape_of(choose.sizes, state);
    shape.ring_ok = std::find(choose.names.begin(), choose.names.end(), "ring") != choose.names.end();
    const PipelineChoice& choice = state.choose(shape);
    const char* name = choice.variant == PipelineChoice::Variant::chunks ? "chunks"
                       : choice.variant == PipelineChoice::Variant::ring ? "ring"
                                                                          : "off";
    auto it = std::find(choose.names.begin(), choose.names.end(), name);
    ALLOY_CHECK(it != choose.names.end(), "the cost model chose '", name, "', which the pair has no program for");
    state.chosen_chunks = choice.chunks;
    *choose.last = choice.why;
    return size_t(it - choose.names.begin());
  }
};

void Executable::run_nodes(const std::vector<Node>& nodes, RunState& state, RunStreams* streams, const LoopFrame* frame) const {
  NodeRunner runner{*this, state, streams, frame};
  for (const Node& node : nodes) std::visit(runner, node);
}

// A reduce-scatter whose other ranks' parts land for the own GEMM (ChunkedValue::landing),
// through a communicator that copies: it reduces every rank's part of chunk i, so this rank's
// term, the value's own block (no GEMM writes it), is zeroed once, on the communication stream
// (which every landing runs on, after the loop's fork: a fill on the run's stream would not be
// ordered before them), and the sum gets a block of scratch, chunk i's sum in chunk i's rows
// (allocated on the run's stream, as a ring's blocks).
void Executable::prepare_landings(const ForChunks& loop, LoopFrame& frame, RunState& state, RunStreams* streams) const {
  frame.landing_sum.assign(loop.values.size(), Tensor());
  for (size_t k = 0; k < loop.values.size(); ++k) {
    const ChunkedValue& v = loop.values[k];
    if (v.landing < 0 || segments.at(size_t(v.landing))->lands_in_place(state)) continue;
    ALLOY_CHECK(v.layout == ChunkedValue::Layout::blocks && frame.whole[k].defined(), "a landing reduce-scatter of '", v.value->name,
                "' without its whole buffer");
    const Tensor& whole = frame.whole[k];
    int64_t block = whole.size(0) / loop.parts;
    std::vector<int64_t> sizes = whole.sizes();
    sizes[0] = block;  // every chunk's rows (one chunk's, reused, raced the own GEMM reading it)
    // not poisoned: a fill on the run's stream would not be ordered before the communication
    // stream's first sum (the fork is behind us), and each sum writes every element it is read at
    state.scratch.push_back(frame.landing_sum[k] = device->empty(v.value->dtype(), sizes, state.device.index));
    if (streams) streams->use(loop.first_pool_stream - 1);
    device->fill_zero(LoopFrame::row_range(whole, frame.rank * block, (frame.rank + 1) * block));
    if (streams) streams->use(0);
  }
}

void Executable::run_loop(const ForChunks& loop, RunState& state, RunStreams* streams) const {
  LoopFrame frame{&loop, 0, loop.count, 0, {}, {}, {}, {}, {}};
  const bool ring = loop.schedule == ForChunks::Schedule::ring;
  if (state.team) frame.rank = state.team->rank();
  frame.own.resize(loop.values.size());
  for (size_t k = 0; k < loop.values.size(); ++k)
    if (loop.values[k].own) frame.own[k] = state.at(loop.values[k].own);
  int64_t rows_per_block = -1;
  frame.scratch.resize(loop.values.size());
  for (size_t k = 0; k < loop.values.size(); ++k) {
    const ChunkedValue& v = loop.values[k];
    int64_t rows = 0;
    if (v.layout == ChunkedValue::Layout::ring_buffer) {
      // never whole: two scratch blocks (allocated here, on the run's stream, before any step)
      std::vector<int64_t> sizes = state.concrete_shape(v.value);
      ALLOY_CHECK(!sizes.empty(), "ring value '", v.value->name, "' has no rows");
      if (sizes[0] % loop.parts != 0)
        user_error_at("value '" + v.value->name + "'", "a ring over ", loop.parts, " ranks needs equal blocks, but its ", sizes[0],
                      " rows do not divide by ", loop.parts, "; use --pipeline chunks=N or off");
      sizes[0] /= loop.parts;
      for (Tensor& t : frame.scratch[k]) state.scratch.push_back(t = device->allocate(v.value->dtype(), sizes, state));
      frame.whole.emplace_back();
      rows = sizes[0];
    } else if (v.layout == ChunkedValue::Layout::landed) {
      // a buffer only where the collective copies the chunks into one (Allocate's unless_landed)
      std::vector<int64_t> sizes = state.concrete_shape(v.value);
      ALLOY_CHECK(!sizes.empty(), "landed value '", v.value->name, "' has no rows");
      if (sizes[0] % loop.parts != 0)
        user_error_at("value '" + v.value->name + "'", "its ", sizes[0], " rows are not ", loop.parts, " equal blocks, one a rank");
      frame.whole.push_back(state.values.at(v.value->id));
      rows = sizes[0] / loop.parts;
    } else {
      const Tensor& t = state.at(v.value);
      ALLOY_CHECK(t.dim() >= 1, "chunked value '", v.value->name, "' has no rows");
      bool blocks = v.layout == ChunkedValue::Layout::blocks || v.layout == ChunkedValue::Layout::ring_block;
      if (blocks && t.size(0) % loop.parts != 0)
        user_error_at("value '" + v.value->name + "'", "its ", t.size(0), " rows are not ", loop.parts, " equal blocks, one a rank",
                      ring ? "; a ring needs equal blocks: use --pipeline chunks=N or off" : "");
      rows = blocks ? t.size(0) / loop.parts : t.size(0);
      frame.whole.push_back(t);
    }
    ALLOY_CHECK(rows_per_block < 0 || rows == rows_per_block, "chunked values of one loop disagree on their rows: '", v.value->name,
                "' has ", rows, ", expected ", rows_per_block);
    rows_per_block = rows;
  }
  if (ring) {
    frame.count = loop.parts;
    for (const Node& node : loop.body)
      if (auto* sr = std::get_if<SendRecv>(&node); sr && !sr->receive) {
        std::vector<int64_t> sizes = frame.scratch[frame.index_of(sr->send)][0].sizes();
        for (Tensor& t : frame.sums) state.scratch.push_back(t = device->allocate(sr->send->dtype(), sizes, state));
      }
  } else {
    // a device with fewer rows than chunks runs a chunk per row (and an empty part one chunk)
    int count = state.chosen_chunks > 0 ? std::min(state.chosen_chunks, loop.count) : loop.count;
    frame.count = int(std::max<int64_t>(1, std::min<int64_t>(count, rows_per_block)));
  }
  prepare_landings(loop, frame, state, streams);
  for (frame.iteration = 0; frame.iteration < frame.count; ++frame.iteration) run_nodes(loop.body, state, streams, &frame);
  for (const ChunkedValue& v : loop.values)
    ALLOY_CHECK(!state.landed.count(v.value->id), "a loop ended with a landed chunk of '", v.value->name, "' not released");
  for (size_t k = 0; k < loop.values.size(); ++k) {
    state.values[loop.values[k].value->id] = frame.whole[k];
    state.chunk_shapes.erase(loop.values[k].value->id);
  }
}

}  // namespace alloy::host_ir
