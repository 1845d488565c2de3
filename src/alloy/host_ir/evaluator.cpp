#include "alloy/host_ir/evaluator.h"

#include <algorithm>

#include "alloy/common/error.h"

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

void SegmentExecutable::run_chunk(RunState&) { internal_error("this segment cannot run inside a chunked loop"); }

// One iteration of a ForChunks loop: which chunk, of how many, and the whole buffers.
struct Executable::LoopFrame {
  const ForChunks* loop;
  int iteration;
  int count;                   // chunks this run (at most the loop's count, at most the rows)
  std::vector<Tensor> whole;   // per loop.values entry

  int stream(int s) const { return s == kIterationStream ? loop->first_pool_stream + iteration % loop->pool_streams : s; }

  // Rows [begin, end) of block `part` (of `parts` blocks; parts = 1 for the rows layout).
  std::pair<int64_t, int64_t> rows(const Tensor& t, int parts) const {
    int64_t block = t.size(0) / parts;
    return {iteration * block / count, (iteration + 1) * block / count};
  }
  Tensor chunk(size_t k, int part) const {
    const Tensor& t = whole[k];
    bool blocks = loop->values[k].layout == ChunkedValue::Layout::blocks;
    int parts = blocks ? loop->parts : 1;
    auto [begin, end] = rows(t, parts);
    int64_t base = (blocks ? part * (t.size(0) / parts) : 0) + begin;
    std::vector<int64_t> sizes = t.sizes();
    sizes[0] = end - begin;
    return t.as_strided(sizes, t.strides(), t.offset() + base * t.stride(0));
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
  if (program.streams > 1 && program.segmentation.target == Target::cuda) {
    ALLOY_CHECK(open_streams != nullptr, "a program with side streams without a stream opener");
    streams = open_streams(program, state);
  }
  try {
    run_nodes(program.nodes, state, streams.get(), nullptr);
  } catch (...) {
    if (streams) {
      streams->use(0);
      streams->join();
    }
    throw;
  }
}

// Without RunStreams (the CPU runs every node in order) stream nodes are nothing to do.
void Executable::run_nodes(const std::vector<Node>& nodes, RunState& state, RunStreams* streams, const LoopFrame* frame) const {
  auto on_stream = [&](int stream) {
    if (streams) streams->use(frame ? frame->stream(stream) : stream);
  };
  for (const Node& node : nodes) {
    if (auto* a = std::get_if<Allocate>(&node)) {
      ALLOY_CHECK(allocate != nullptr, "Allocate node without an allocator");
      state.values[a->value->id] = allocate(a->value->dtype(), state.concrete_shape(a->value), state);
    } else if (auto* l = std::get_if<Launch>(&node)) {
      if (l->stream != 0) on_stream(l->stream);
      if (frame) {
        // this iteration's chunk of every chunked value, block l->part of the blocked ones
        const Segment& s = program.segmentation.segments.at(size_t(l->segment));
        std::vector<std::pair<const Value*, Tensor>> bound;
        for (size_t k = 0; k < frame->loop->values.size(); ++k) {
          const Value* v = frame->loop->values[k].value;
          Tensor view = frame->chunk(k, std::max(l->part, 0));
          state.values[v->id] = view;
          state.chunk_shapes[v->id] = view.sizes();
          if (std::find(s.outputs.begin(), s.outputs.end(), v) != s.outputs.end()) bound.emplace_back(v, view);
        }
        segments.at(size_t(l->segment))->run(state);
        for (auto& [v, view] : bound) {
          const Tensor& made = state.values[v->id];
          if (made.data() != view.data()) {
            ALLOY_CHECK(copy != nullptr, "segment ", l->segment, " made '", v->name, "' outside its chunk and nothing copies it");
            copy(view, made, state);
            state.values[v->id] = view;
          }
        }
      } else {
        segments.at(size_t(l->segment))->run(state);
      }
      if (l->stream != 0) on_stream(0);
    } else if (auto* r = std::get_if<Record>(&node)) {
      if (streams) streams->record(frame ? frame->stream(r->stream) : r->stream, r->event);
    } else if (auto* w = std::get_if<Wait>(&node)) {
      if (streams) streams->wait(frame ? frame->stream(w->stream) : w->stream, w->event);
    } else if (auto* c = std::get_if<Communicate>(&node)) {
      if (c->stream != 0) on_stream(c->stream);
      if (frame) {
        for (size_t k = 0; k < frame->loop->values.size(); ++k) {
          const ChunkedValue& v = frame->loop->values[k];
          state.values[v.value->id] = v.layout == ChunkedValue::Layout::blocks ? frame->parts_view(k) : frame->chunk(k, 0);
        }
        segments.at(size_t(c->segment))->run_chunk(state);
      } else {
        segments.at(size_t(c->segment))->run(state);
      }
      if (c->stream != 0) on_stream(0);
    } else if (auto* f = std::get_if<ForChunks>(&node)) {
      ALLOY_CHECK(frame == nullptr, "a ForChunks loop inside another");
      run_loop(*f, state, streams);
    }
  }
}

void Executable::run_loop(const ForChunks& loop, RunState& state, RunStreams* streams) const {
  LoopFrame frame{&loop, 0, loop.count, {}};
  int64_t rows_per_block = -1;
  for (const ChunkedValue& v : loop.values) {
    const Tensor& t = state.at(v.value);
    ALLOY_CHECK(t.dim() >= 1, "chunked value '", v.value->name, "' has no rows");
    int64_t rows = v.layout == ChunkedValue::Layout::blocks ? t.size(0) / loop.parts : t.size(0);
    ALLOY_CHECK(rows_per_block < 0 || rows == rows_per_block, "chunked values of one loop disagree on their rows: '", v.value->name,
                "' has ", rows, ", expected ", rows_per_block);
    rows_per_block = rows;
    frame.whole.push_back(t);
  }
  // a device with fewer rows than chunks runs a chunk per row (and an empty part one chunk)
  frame.count = int(std::max<int64_t>(1, std::min<int64_t>(loop.count, rows_per_block)));
  for (frame.iteration = 0; frame.iteration < frame.count; ++frame.iteration) run_nodes(loop.body, state, streams, &frame);
  for (size_t k = 0; k < loop.values.size(); ++k) {
    state.values[loop.values[k].value->id] = frame.whole[k];
    state.chunk_shapes.erase(loop.values[k].value->id);
  }
}

}  // namespace alloy::host_ir
