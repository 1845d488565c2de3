#include "alloy/host_ir/pipeline_collectives.h"

#include <algorithm>
#include <optional>
#include <set>

#include "alloy/common/error.h"
#include "alloy/ir/op_table.h"

namespace alloy::host_ir {
namespace {

constexpr int kAutoChunksOnCuda = 4;
constexpr int kComputeStreams = 2;

const Op* matmul_op(const Segment& s) {
  for (const Op* op : s.ops)
    if (op->kind == OpKind::linear || op->kind == OpKind::matmul) return op;
  return nullptr;
}

// The segment a node runs (-1 for Allocate, Record, Wait and loops).
int segment_of(const Node& node) {
  if (auto* l = std::get_if<Launch>(&node)) return l->stream == 0 ? l->segment : -1;
  if (auto* c = std::get_if<Communicate>(&node)) return c->stream == 0 ? c->segment : -1;
  return -1;
}

// The next node at or after `from` that is not an Allocate; nodes.size() when none.
size_t next_work(const std::vector<Node>& nodes, size_t from) {
  while (from < nodes.size() && std::holds_alternative<Allocate>(nodes[from])) ++from;
  return from;
}

// A matmul segment that is one row-wise GEMM over `rows`: its activation operand is `rows`
// (axis 0 being the rows), every other input is the weight or the bias, and every output is
// row-aligned with it. Such a segment computes any block of rows from the same block of `rows`.
bool row_wise_gemm(const Segment& s, const Value* rows) {
  const Op* mm = matmul_op(s);
  if (!mm || mm->inputs[0] != rows || rows->rank() < 2) return false;
  if (mm->kind == OpKind::matmul && (rows->rank() != 2 || mm->inputs[1]->rank() != 2)) return false;
  for (const Value* in : s.inputs)
    if (in != rows && in != mm->inputs[1] && !(mm->inputs.size() > 2 && in == mm->inputs[2])) return false;
  for (const Value* out : s.outputs)
    if (out->rank() < 1 || !(out->shape()[0] == rows->shape()[0])) return false;
  return !s.outputs.empty();
}

bool is_collective(const Segment& s, OpKind kind) {
  if (s.scheduler != "communication" || s.ops.size() != 1) return false;
  const Op& op = *s.ops[0];
  return op.kind == kind && op.int_attr("axis") == 0 && op.inputs[0]->rank() >= 1 && op.outputs[0]->sharding;
}

bool read_elsewhere(const Program& p, const Value* v, std::set<int> allowed) {
  for (const Segment& s : p.segmentation.segments)
    if (!allowed.count(s.id) && std::find(s.inputs.begin(), s.inputs.end(), v) != s.inputs.end()) return true;
  return false;
}

class Rewriter {
 public:
  Rewriter(Program& p, int chunks, std::string why) : p_(p), chunks_(chunks), why_(std::move(why)) {}

  void run() {
    std::vector<Node> out;
    const std::vector<Node>& nodes = p_.nodes;
    for (size_t i = 0; i < nodes.size();) {
      if (size_t end = try_all_gather_gemm(nodes, i, out); end > i) { i = end; continue; }
      if (size_t end = try_gemm_reduce_scatter(nodes, i, out); end > i) { i = end; continue; }
      out.push_back(nodes[i++]);
    }
    p_.nodes = std::move(out);
  }

 private:
  const Segment& segment(int id) const { return p_.segmentation.segments.at(size_t(id)); }

  // Communicate all_gather(axis=0) x -> xg, [Allocate...], Launch GEMM(xg): returns the index
  // after the pair when rewritten, else `i`.
  size_t try_all_gather_gemm(const std::vector<Node>& nodes, size_t i, std::vector<Node>& out) {
    int c = segment_of(nodes[i]);
    if (c < 0 || !std::holds_alternative<Communicate>(nodes[i]) || !is_collective(segment(c), OpKind::all_gather)) return i;
    const Op& gather = *segment(c).ops[0];
    size_t j = next_work(nodes, i + 1);
    if (j >= nodes.size() || !std::holds_alternative<Launch>(nodes[j])) return i;
    int m = segment_of(nodes[j]);
    if (m < 0 || !row_wise_gemm(segment(m), gather.outputs[0])) return i;
    int parts = int(gather.outputs[0]->sharding->mesh.size());
    std::vector<ChunkedValue> values{{gather.inputs[0], ChunkedValue::Layout::rows}, {gather.outputs[0], ChunkedValue::Layout::blocks}};
    for (Value* v : segment(m).outputs) values.push_back({v, ChunkedValue::Layout::blocks});
    ForChunks loop = open_loop(parts, std::move(values), "all_gather -> " + describe(m), nodes, i, j, out);
    int comm = loop.first_pool_stream - 1, arrived = p_.events++;
    loop.body.push_back(Communicate{c, comm});
    loop.body.push_back(Record{comm, arrived});
    loop.body.push_back(Wait{kIterationStream, arrived});
    for (int r = 0; r < parts; ++r) loop.body.push_back(Launch{m, kIterationStream, r});
    close_loop(std::move(loop), out);
    return j + 1;
  }

  // [Allocate...] Launch GEMM -> P, [Allocate...], Communicate reduce_scatter(axis=0) P -> y,
  // P read by nothing else.
  size_t try_gemm_reduce_scatter(const std::vector<Node>& nodes, size_t i, std::vector<Node>& out) {
    size_t j = next_work(nodes, i);
    if (j >= nodes.size() || !std::holds_alternative<Launch>(nodes[j])) return i;
    int m = segment_of(nodes[j]);
    size_t k = next_work(nodes, j + 1);
    if (m < 0 || k >= nodes.size() || !std::holds_alternative<Communicate>(nodes[k])) return i;
    int c = segment_of(nodes[k]);
    if (c < 0 || !is_collective(segment(c), OpKind::reduce_scatter)) return i;
    const Op& scatter = *segment(c).ops[0];
    const Segment& gemm = segment(m);
    const Op* mm = matmul_op(gemm);
    if (!mm || gemm.outputs.size() != 1 || gemm.outputs[0] != scatter.inputs[0] || !row_wise_gemm(gemm, mm->inputs[0])) return i;
    if (read_elsewhere(p_, scatter.inputs[0], {c})) return i;
    int parts = int(scatter.outputs[0]->sharding->mesh.size());
    std::vector<ChunkedValue> values{{mm->inputs[0], ChunkedValue::Layout::blocks}, {scatter.inputs[0], ChunkedValue::Layout::blocks},
                                     {scatter.outputs[0], ChunkedValue::Layout::rows}};
    ForChunks loop = open_loop(parts, std::move(values), describe(m) + " -> reduce_scatter", nodes, i, k, out);
    int comm = loop.first_pool_stream - 1, computed = p_.events++;
    for (int r = 0; r < parts; ++r) loop.body.push_back(Launch{m, kIterationStream, r});
    loop.body.push_back(Record{kIterationStream, computed});
    loop.body.push_back(Wait{comm, computed});
    loop.body.push_back(Communicate{c, comm});
    close_loop(std::move(loop), out);
    return k + 1;
  }

  std::string describe(int m) const {
    const Op* mm = matmul_op(segment(m));
    return std::string(op_name(mm->kind)) + " " + mm->outputs[0]->name;
  }

  // Allocates every chunked value that is not an input of the pair (the Allocate nodes already
  // between first and last, and those the CPU program has none of), forks the communication
  // stream and the compute pool from the run's stream, and returns the loop to fill.
  ForChunks open_loop(int parts, std::vector<ChunkedValue> values, const std::string& what, const std::vector<Node>& nodes,
                      size_t first, size_t last, std::vector<Node>& out) {
    std::set<const Value*> allocated;
    for (size_t n = first; n <= last; ++n)
      if (auto* a = std::get_if<Allocate>(&nodes[n])) {
        out.push_back(*a);
        allocated.insert(a->value);
      }
    std::set<const Value*> pair_inputs;
    for (size_t n = first; n <= last; ++n)
      if (int s = segment_of(nodes[n]); s >= 0)
        for (const Value* in : segment(s).inputs) pair_inputs.insert(in);
    std::set<const Value*> pair_outputs;
    for (size_t n = first; n <= last; ++n)
      if (int s = segment_of(nodes[n]); s >= 0)
        for (const Value* o : segment(s).outputs) pair_outputs.insert(o);
    for (const ChunkedValue& v : values)
      if (pair_outputs.count(v.value) && !allocated.count(v.value)) out.push_back(Allocate{v.value});
    ForChunks loop;
    loop.count = chunks_;
    loop.parts = parts;
    loop.values = std::move(values);
    // one communication stream and one compute pool serve every loop (each loop joins them)
    if (comm_ < 0) {
      comm_ = p_.streams;
      p_.streams = comm_ + 1 + kComputeStreams;
    }
    int comm = comm_;
    loop.first_pool_stream = comm + 1;
    loop.pool_streams = kComputeStreams;
    loop.why = what + ": " + why_;
    int fork = p_.events++;
    out.push_back(Record{0, fork});
    for (int s = comm; s < p_.streams; ++s) out.push_back(Wait{s, fork});
    return loop;
  }

  // The loop, then the run's stream waits for the communication stream and the compute pool.
  void close_loop(ForChunks loop, std::vector<Node>& out) {
    int first = loop.first_pool_stream - 1, end = loop.first_pool_stream + loop.pool_streams;
    out.push_back(std::move(loop));
    for (int s = first; s < end; ++s) {
      int done = p_.events++;
      out.push_back(Record{s, done});
      out.push_back(Wait{0, done});
    }
  }

  Program& p_;
  int comm_ = -1;
  int chunks_;
  std::string why_;
};

}  // namespace

Program pipeline_collectives(Program program, const ProgramPassOptions& options) {
  using P = ProgramPassOptions::Pipeline;
  int chunks = 0;
  std::string why;
  if (options.pipeline == P::chunks) {
    chunks = options.chunks;
    why = std::to_string(chunks) + " chunks (--pipeline chunks=" + std::to_string(chunks) + ")";
  } else if (options.pipeline == P::automatic && program.segmentation.target == Target::cuda) {
    chunks = kAutoChunksOnCuda;
    why = std::to_string(chunks) + " chunks (--pipeline auto: the default on CUDA, not yet measured per machine)";
  }
  if (chunks < 1) return program;
  Rewriter(program, chunks, why).run();
  return program;
}

}  // namespace alloy::host_ir
