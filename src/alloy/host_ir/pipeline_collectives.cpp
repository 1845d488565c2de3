#include "alloy/host_ir/pipeline_collectives.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "alloy/common/error.h"
#include "alloy/ir/op_table.h"

namespace alloy::host_ir {
namespace {

constexpr int kMostAutoChunks = 16;  // the cost model's largest candidate (host_ir/cost_model.h)
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
  // a matmul's weight is a matrix (a batched matmul's second operand has rows of its own); its
  // activation of any rank is rows along axis 0, as a linear's
  if (mm->kind == OpKind::matmul && mm->inputs[1]->rank() != 2) return false;
  for (const Value* in : s.inputs)
    if (in != rows && in != mm->inputs[1] && !(mm->inputs.size() > 2 && in == mm->inputs[2])) return false;
  for (const Value* out : s.outputs)
    if (out->rank() < 1 || !(out->shape()[0] == rows->shape()[0])) return false;
  return !s.outputs.empty();
}

bool is_collective(const Segment& s, OpKind kind) {
  if (s.scheduler != SchedulerKind::communication || s.ops.size() != 1) return false;
  const Op& op = *s.ops[0];
  if (op.kind != kind || op.inputs[0]->rank() < 1 || !op.outputs[0]->sharding) return false;
  return kind == OpKind::all_reduce || op.int_attr("axis") == 0;  // an all-reduce reduces each row on its own: any rows
}

bool read_elsewhere(const Program& p, const Value* v, std::set<int> allowed) {
  for (const Segment& s : p.segmentation.segments)
    if (!allowed.count(s.id) && std::find(s.inputs.begin(), s.inputs.end(), v) != s.inputs.end()) return true;
  return false;
}

// A matched pair: nodes [first, last] of the program, the collective and the GEMM. A pair with a
// `refusal` stays as lowered, and the dump says why.
struct Pair {
  PairSizes::Kind kind;
  size_t first, last;
  int collective, gemm;
  int parts;
  std::string refusal;
  // A GEMM -> all-reduce pair led by the row-wise GEMMs that make its GEMM's rows (Megatron's
  // fc1 before its fc2): their Launch nodes in order (`lead`), and the nodes between first and
  // last that none of them reads (`hoisted`: run before the loop, as the share of a row-parallel
  // bias). Empty for a pair alone.
  std::vector<size_t> lead, hoisted;
};

// Whether `v` is row-aligned with `rows` (its axis 0 the same rows).
bool row_aligned(const Value* v, const Value* rows) { return v->rank() >= 1 && v->shape()[0] == rows->shape()[0]; }

bool reads_any(const Segment& s, const std::set<const Value*>& values) {
  for (const Value* in : s.inputs)
    if (values.count(in)) return true;
  return false;
}

class Rewriter {
 public:
  Rewriter(Program& p, const ProgramPassOptions& options, int chunks, std::string why)
      : p_(p), options_(options), chunks_(chunks), why_(std::move(why)) {}

  // How many pairs the program holds (nothing rewritten).
  int count_pairs() const {
    int pairs = 0;
    const std::vector<Node>& nodes = p_.nodes;
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::optional<Pair> pair = match(nodes, i);
      if (pair) {
        pairs += pair->refusal.empty();
        i = pair->last;
      }
    }
    return pairs;
  }

  void run() {
    std::vector<Node> out;
    const std::vector<Node>& nodes = p_.nodes;
    using P = ProgramPassOptions::Pipeline;
    int refused = 0;
    for (size_t i = 0; i < nodes.size();) {
      std::optional<Pair> pair = match(nodes, i);
      if (!pair) {
        out.push_back(nodes[i++]);
        continue;
      }
      if (!pair->refusal.empty()) {
        ++refused;
        p_.notes.push_back("pipeline_collectives: " + describe_pair(*pair) + " stays unpipelined: " + pair->refusal);
        for (size_t n = pair->first; n <= pair->last; ++n) out.push_back(nodes[n]);
        i = pair->last + 1;
        continue;
      }
      ++pairs_;
      if (options_.pipeline == P::ring) {
        if (std::string refusal = ring_refusal(*pair); !refusal.empty()) {
          p_.notes.push_back("pipeline_collectives: " + describe_pair(*pair) + " stays unpipelined: " + refusal);
          for (size_t n = pair->first; n <= pair->last; ++n) out.push_back(nodes[n]);
        } else {
          emit_ring(*pair, nodes, out, "--pipeline ring");
        }
      } else if (options_.pipeline == P::automatic && pair->kind == PairSizes::Kind::gemm_all_reduce) {
        // Its all-reduce runs NCCL's kernels beside the GEMM chunks, which take SMs from them; the
        // cost model does not know by how much, and measured it pays too little to risk: on two
        // H200s (session 35) 8192 x 1600 x 6400 chunks=2 ran 305 us against off's 260, 8192 x 4096
        // x 11008 751 against 761, 8192 x 8192 x 28672 chunks=4 2945 against 2981-3096. Led by fc1
        // (the whole Megatron MLP split by tokens, session 37, two H100s): 1600 -> 6400 chunks=2
        // 476-493 us, chunks=4 496-513 against off's 421-423; 4096 -> 11008 chunks=4 1275-1280
        // against 1266-1283. The copy engines moving the chunks (an exchange of whole chunks
        // between two ranks, added on both) measured slower still (1600: 477-522; 4096: 1418-1487).
        p_.notes.push_back("pipeline_collectives: " + describe_pair(*pair) +
                           " stays unpipelined under --pipeline auto (NCCL's all-reduce beside the GEMM chunks measured slower than off at "
                           "small widths, at most 5% faster at large ones; --pipeline chunks=N pipelines it)");
        for (size_t n = pair->first; n <= pair->last; ++n) out.push_back(nodes[n]);
      } else if (options_.pipeline == P::automatic) {
        emit_choice(*pair, nodes, out);
      } else {
        emit_chunks(*pair, nodes, out, why_);
      }
      i = pair->last + 1;
    }
    if (pairs_ == 0 && refused == 0 && options_.pipeline != P::off)
      p_.notes.push_back("pipeline_collectives: nothing to pipeline (no all_gather -> GEMM, GEMM -> reduce_scatter or GEMM -> all_reduce pair)");
    p_.nodes = std::move(out);
  }

 private:
  const Segment& segment(int id) const { return p_.segmentation.segments.at(size_t(id)); }

  std::optional<Pair> match(const std::vector<Node>& nodes, size_t i) const {
    std::optional<Pair> pair = match_led_all_reduce(nodes, i);
    if (!pair) pair = match_all_gather_gemm(nodes, i);
    if (!pair) pair = match_gemm_collective(nodes, i, OpKind::reduce_scatter);
    if (!pair) pair = match_gemm_collective(nodes, i, OpKind::all_reduce);
    return pair;
  }

  // Communicate all_gather(axis=0) x -> xg, [Allocate...], Launch GEMM(xg).
  std::optional<Pair> match_all_gather_gemm(const std::vector<Node>& nodes, size_t i) const {
    int c = segment_of(nodes[i]);
    if (c < 0 || !std::holds_alternative<Communicate>(nodes[i]) || !is_collective(segment(c), OpKind::all_gather)) return std::nullopt;
    const Op& gather = *segment(c).ops[0];
    size_t j = next_work(nodes, i + 1);
    if (j >= nodes.size() || !std::holds_alternative<Launch>(nodes[j])) return std::nullopt;
    int m = segment_of(nodes[j]);
    if (m < 0 || !row_wise_gemm(segment(m), gather.outputs[0])) return std::nullopt;
    return Pair{PairSizes::Kind::all_gather_gemm, i, j, c, m, int(gather.outputs[0]->sharding->mesh.size()), "", {}, {}};
  }

  // [Allocate...] Launch GEMM -> P, [Allocate...], Communicate `kind` P -> y: a reduce_scatter
  // (axis=0) or an all_reduce. P read by nothing else: a reduce-scatter loop never holds P whole
  // (its own block goes straight into y), so another reader is no match; an all-reduce loop does
  // hold it, but is kept to the same rule, conservatively, and the dump says so.
  std::optional<Pair> match_gemm_collective(const std::vector<Node>& nodes, size_t i, OpKind kind) const {
    size_t j = next_work(nodes, i);
    if (j >= nodes.size() || !std::holds_alternative<Launch>(nodes[j])) return std::nullopt;
    int m = segment_of(nodes[j]);
    size_t k = next_work(nodes, j + 1);
    if (m < 0 || k >= nodes.size() || !std::holds_alternative<Communicate>(nodes[k])) return std::nullopt;
    int c = segment_of(nodes[k]);
    if (c < 0 || !is_collective(segment(c), kind)) return std::nullopt;
    const Op& collective = *segment(c).ops[0];
    const Segment& gemm = segment(m);
    const Op* mm = matmul_op(gemm);
    if (!mm || gemm.outputs.size() != 1 || gemm.outputs[0] != collective.inputs[0] || !row_wise_gemm(gemm, mm->inputs[0])) return std::nullopt;
    const bool all_reduce = kind == OpKind::all_reduce;
    Pair pair{all_reduce ? PairSizes::Kind::gemm_all_reduce : PairSizes::Kind::gemm_reduce_scatter, i, k, c, m,
              int(collective.outputs[0]->sharding->mesh.size()), "", {}, {}};
    const Value* partial = collective.inputs[0];
    bool returned = std::find(p_.fusion_outputs.begin(), p_.fusion_outputs.end(), partial) != p_.fusion_outputs.end();
    if (returned || read_elsewhere(p_, partial, {c})) {
      if (!all_reduce) return std::nullopt;
      pair.refusal = "'" + partial->name + "' is " + (returned ? "returned" : "read by another segment") +
                     " too (only partial sums that the all_reduce alone reads are pipelined)";
    }
    return pair;
  }

  // [Allocate...] Launch of a row-wise GEMM over `rows`, then row-wise GEMMs over what it and
  // they make (their epilogues included: a GELU or a bias), ending in a GEMM -> all_reduce pair
  // whose GEMM reads rows they made: the whole chain computes any chunk of rows from the same chunk of `rows`, so
  // a loop over token chunks runs all of it and chunk i's all-reduce hides behind chunk i + 1's
  // GEMMs (issue 25 item 6: Megatron's fc1 and fc2), not only behind the last GEMM's. Nodes
  // between that read nothing the chain makes are hoisted before the loop; anything else ends
  // the match (the pair alone may still match later).
  std::optional<Pair> match_led_all_reduce(const std::vector<Node>& nodes, size_t i) const {
    size_t j = next_work(nodes, i);
    if (j >= nodes.size() || !std::holds_alternative<Launch>(nodes[j])) return std::nullopt;
    int first = segment_of(nodes[j]);
    if (first < 0) return std::nullopt;
    const Op* mm = matmul_op(segment(first));
    if (!mm || !row_wise_gemm(segment(first), mm->inputs[0])) return std::nullopt;
    Value* rows = mm->inputs[0];
    std::set<const Value*> made(segment(first).outputs.begin(), segment(first).outputs.end());
    std::vector<size_t> lead{j}, hoisted;
    for (size_t n = j + 1; n < nodes.size(); ++n) {
      // (an output in an input's memory: conservatively no match, as hoisting might reorder its write)
      if (auto* a = std::get_if<Allocate>(&nodes[n])) {
        if (a->input) return std::nullopt;
        continue;
      }
      int s = segment_of(nodes[n]);
      if (s < 0 || !std::holds_alternative<Launch>(nodes[n])) return std::nullopt;
      const Segment& seg = segment(s);
      if (!reads_any(seg, made)) {
        hoisted.push_back(n);
        continue;
      }
      if (std::optional<Pair> pair = match_gemm_collective(nodes, n, OpKind::all_reduce)) {
        if (!pair->refusal.empty() || !row_local(segment(pair->gemm), rows, made)) return std::nullopt;
        pair->first = i;
        pair->lead = std::move(lead);
        pair->hoisted = std::move(hoisted);
        return pair;
      }
      if (!row_local(seg, rows, made)) return std::nullopt;
      lead.push_back(n);
      made.insert(seg.outputs.begin(), seg.outputs.end());
    }
    return std::nullopt;
  }

  // Whether segment `s` computes any chunk of rows of its outputs from the same chunk of the rows
  // `made` (row-aligned with `rows`): a row-wise GEMM over one of them whose other operands are
  // made before. (Not a generated kernel: its grid is sized by the run's bound sizes, not by the
  // chunk it is handed.)
  bool row_local(const Segment& s, const Value* rows, const std::set<const Value*>& made) const {
    for (const Value* out : s.outputs)
      if (!row_aligned(out, rows)) return false;
    const Op* mm = matmul_op(s);
    if (!mm || !made.count(mm->inputs[0]) || !row_wise_gemm(s, mm->inputs[0])) return false;
    for (const Value* in : s.inputs)
      if (in != mm->inputs[0] && made.count(in)) return false;
    return true;
  }

  std::string describe(int m) const {
    const Op* mm = matmul_op(segment(m));
    return std::string(op_name(mm->kind)) + " " + mm->outputs[0]->name;
  }
  std::string describe_pair(const Pair& pair) const {
    switch (pair.kind) {
      case PairSizes::Kind::all_gather_gemm: return "all_gather -> " + describe(pair.gemm);
      case PairSizes::Kind::gemm_reduce_scatter: return describe(pair.gemm) + " -> reduce_scatter";
      case PairSizes::Kind::gemm_all_reduce: {
        std::string lead;
        for (size_t n : pair.lead) lead += describe(segment_of(p_.nodes[n])) + " -> ";
        return lead + describe(pair.gemm) + " -> all_reduce";
      }
    }
    return {};
  }

  // Why an all-gather -> GEMM pair's gathered value is needed whole (empty where only the pair's
  // GEMM reads it): the fusion returns it, or another segment reads it.
  std::string gathered_needed(const Pair& pair) const {
    const Value* gathered = segment(pair.collective).ops[0]->outputs[0];
    bool returned = std::find(p_.fusion_outputs.begin(), p_.fusion_outputs.end(), gathered) != p_.fusion_outputs.end();
    if (!returned && !read_elsewhere(p_, gathered, {pair.gemm})) return {};
    return "'" + gathered->name + "' is " + (returned ? "returned" : "read by another segment");
  }

  // Why the pair has no ring (empty when it has one): the accumulate step adds, and a ring never
  // holds the gathered value whole.
  std::string ring_refusal(const Pair& pair) const {
    const Op& op = *segment(pair.collective).ops[0];
    if (pair.kind == PairSizes::Kind::all_gather_gemm)
      if (std::string needed = gathered_needed(pair); !needed.empty()) return needed + ", and a ring never holds the gathered rows whole";
    if (pair.kind == PairSizes::Kind::gemm_reduce_scatter && op.string_attr("reduce") != "sum")
      return "its reduce_scatter reduces by " + op.string_attr("reduce") + ", and a ring's accumulate step adds";
    if (pair.kind == PairSizes::Kind::gemm_all_reduce)
      return "a GEMM -> all_reduce pair has no ring (--pipeline chunks=N pipelines it)";
    return {};
  }

  PairSizes sizes_of(const Pair& pair) const {
    const Op& op = *segment(pair.collective).ops[0];
    const Op* mm = matmul_op(segment(pair.gemm));
    if (pair.kind == PairSizes::Kind::all_gather_gemm) return {pair.kind, op.outputs[0], mm->outputs[0], op.inputs[0], pair.parts};
    if (pair.kind == PairSizes::Kind::gemm_all_reduce) return {pair.kind, mm->inputs[0], op.inputs[0], op.inputs[0], pair.parts};
    return {pair.kind, mm->inputs[0], op.inputs[0], op.outputs[0], pair.parts};
  }

  // Chunk i of the pair's collective on the communication stream, the GEMMs of chunk i on the
  // compute pool, an event between them each iteration. A gathered value that only the GEMM
  // reads is `landed`: the other blocks' GEMMs read each chunk where it arrived (no copy into a
  // gathered buffer on the communication stream), and give the place back after them.
  void emit_chunks(const Pair& pair, const std::vector<Node>& nodes, std::vector<Node>& out, const std::string& why) {
    if (pair.kind == PairSizes::Kind::gemm_all_reduce) return emit_all_reduce_chunks(pair, nodes, out, why);
    const Op& op = *segment(pair.collective).ops[0];
    const Segment& gemm = segment(pair.gemm);
    const int c = pair.collective, m = pair.gemm, parts = pair.parts;
    const bool landed = pair.kind == PairSizes::Kind::all_gather_gemm && gathered_needed(pair).empty();
    // a sum reduce-scatter's own block adds what the others sent in its GEMM (max and min: a
    // separate finish, after it)
    const bool adds_landed = pair.kind == PairSizes::Kind::gemm_reduce_scatter && op.string_attr("reduce") == "sum";
    std::vector<ChunkedValue> values;
    if (pair.kind == PairSizes::Kind::all_gather_gemm) {
      values = {{op.inputs[0], ChunkedValue::Layout::rows},
                {op.outputs[0], landed ? ChunkedValue::Layout::landed : ChunkedValue::Layout::blocks}};
      values.back().own = op.inputs[0];
      for (Value* v : gemm.outputs) values.push_back({v, ChunkedValue::Layout::blocks});
    } else {
      values = {{matmul_op(gemm)->inputs[0], ChunkedValue::Layout::blocks}, {op.inputs[0], ChunkedValue::Layout::blocks},
                {op.outputs[0], ChunkedValue::Layout::rows}};
      values[1].own = op.outputs[0];  // the own block's partial sums go straight into the output
      if (adds_landed) values[1].landing = c;
    }
    // the other blocks' stream of a sum reduce-scatter (made before open_loop, which forks it)
    const int feed = adds_landed && parts > 1 ? feed_stream() : -1;
    ForChunks loop = open_loop(parts, std::move(values), {}, describe_pair(pair) + ": " + why, nodes, pair.first, pair.last, out);
    loop.count = chunks_;
    loop.pool_streams = kComputeStreams;
    int comm = loop.first_pool_stream - 1, event = p_.events++;
    if (pair.kind == PairSizes::Kind::all_gather_gemm) {
      // the own block first (its rows are here: it waits for nothing, and is enqueued before
      // the collective, whose host calls would delay it), then the others in the order they
      // arrive (the previous rank's first)
      loop.body.push_back(Launch{m, kIterationStream, 0, true});
      loop.body.push_back(Communicate{c, comm, landed ? ChunkPhase::land : ChunkPhase::whole});
      loop.body.push_back(Record{comm, event});
      // (where the blocks land one by one, each launch waits for its own: the nearest first)
      loop.body.push_back(Wait{kIterationStream, event, false, landed ? op.outputs[0] : nullptr});
      for (int j = 1; j < parts; ++j) loop.body.push_back(Launch{m, kIterationStream, -j, true});
      // the chunks' places (a peer's next-but-one chunk overwrites them) once those GEMMs are done
      if (landed) loop.body.push_back(Release{kIterationStream, op.outputs[0]});
    } else if (adds_landed) {
      // the other ranks' blocks first (the next rank's first), sent as soon as their GEMMs are
      // done; the own block's GEMM waits for the other ranks' parts of it and adds them as it
      // writes the output (cuBLASLt's C: no add kernel waiting for SMs behind the GEMMs), then
      // gives their places back. While it waits, the pool's other stream runs chunk i + 1's GEMMs.
      // Each part may go as soon as its own GEMM is done (events `event` on, one a part: the
      // communicator waits for each before its transfer where it sends part by part, else for all).
      const int made = event;
      p_.events += std::max(parts - 2, 0);
      int arrived = p_.events++;
      Value* partial = op.inputs[0];
      // The other blocks' GEMMs, whose partial sums travel, run in chunk order on one urgent
      // stream (the device's greatest priority): chunk i + 1's start as chunk i's end, and the
      // own blocks' GEMMs, on the pool's streams, take the SMs they leave. On the pool's two
      // streams, as before, two chunks' GEMMs shared the device from the start (four H100s,
      // chunks=2: chunk 0's own block ended 1453 us in, of 1515), and an own GEMM whose C had
      // landed slowed the next chunk's, whose parts then went late; the urgent stream keeps
      // every part leaving as early as the GEMMs allow.
      for (int j = 1; j < parts; ++j) {
        loop.body.push_back(Launch{m, feed, j, true});
        loop.body.push_back(Record{feed, made + j - 1});
      }
      loop.body.push_back(Communicate{c, comm, ChunkPhase::send, made});
      loop.body.push_back(Communicate{c, comm, ChunkPhase::land});
      loop.body.push_back(Record{comm, arrived});
      // (where the parts land one by one, the own GEMM waits for each just before it reads it:
      // the nearest rank's, its C, first)
      loop.body.push_back(Wait{kIterationStream, arrived, false, partial});
      loop.body.push_back(Launch{m, kIterationStream, 0, true, partial});
      loop.body.push_back(Release{kIterationStream, partial});
    } else {
      // max and min: the other ranks' blocks first (the next rank's first), sent while the own
      // block's GEMM runs; this rank's part finished once that GEMM is done
      int own_done = p_.events++;
      for (int j = 1; j < parts; ++j) loop.body.push_back(Launch{m, kIterationStream, j, true});
      loop.body.push_back(Record{kIterationStream, event});
      loop.body.push_back(Launch{m, kIterationStream, 0, true});
      loop.body.push_back(Record{kIterationStream, own_done});
      loop.body.push_back(Wait{comm, event});
      loop.body.push_back(Communicate{c, comm, ChunkPhase::send});
      loop.body.push_back(Wait{comm, own_done});
      loop.body.push_back(Communicate{c, comm, ChunkPhase::finish});
    }
    close_loop(std::move(loop), out, feed);
  }

  // GEMM -> all-reduce: no blocks (every rank computes partial sums of every row), so chunk i is
  // rows i of the GEMM's input, of P and of y: chunk i's GEMM (its epilogue too: a row-parallel
  // linear's bias is bias / n on each rank, localize_shards, so every row still sums to one bias)
  // on the compute pool, then chunk i's all-reduce on the communication stream once that GEMM is
  // done, while chunk i + 1's GEMM runs. Every rank has every row, so every rank runs the same
  // chunks, in the same order: the same all-reduce calls everywhere.
  // Led by row-wise segments (Pair::lead), each iteration runs them on chunk i of the rows first,
  // on the same stream; what they make is written chunk by chunk into whole buffers (another
  // segment after the loop may read it), and the hoisted nodes run before the loop.
  void emit_all_reduce_chunks(const Pair& pair, const std::vector<Node>& nodes, std::vector<Node>& out, const std::string& why) {
    const Op& op = *segment(pair.collective).ops[0];
    std::vector<ChunkedValue> values;
    // the first GEMM's rows (the lead's, else the pair's), then what each lead GEMM makes
    const int first = pair.lead.empty() ? pair.gemm : segment_of(nodes[pair.lead.front()]);
    values.push_back({matmul_op(segment(first))->inputs[0], ChunkedValue::Layout::rows});
    for (size_t n : pair.lead)
      for (Value* v : segment(segment_of(nodes[n])).outputs) values.push_back({v, ChunkedValue::Layout::rows});
    values.push_back({op.inputs[0], ChunkedValue::Layout::rows});
    values.push_back({op.outputs[0], ChunkedValue::Layout::rows});
    // the hoisted nodes (and the allocations of what they make) before the loop, in their order
    std::set<size_t> hoisted(pair.hoisted.begin(), pair.hoisted.end());
    std::set<const Value*> hoisted_values;
    for (size_t n : pair.hoisted)
      for (const Value* v : segment(segment_of(nodes[n])).outputs) hoisted_values.insert(v);
    std::vector<Node> range;
    for (size_t n = pair.first; n <= pair.last; ++n) {
      auto* a = std::get_if<Allocate>(&nodes[n]);
      (hoisted.count(n) || (a && hoisted_values.count(a->value)) ? out : range).push_back(nodes[n]);
    }
    ForChunks loop = open_loop(pair.parts, std::move(values), {}, describe_pair(pair) + ": " + why, range, 0, range.size() - 1, out);
    loop.count = chunks_;
    loop.pool_streams = kComputeStreams;
    const int comm = loop.first_pool_stream - 1, computed = p_.events++;
    for (size_t n : pair.lead) loop.body.push_back(Launch{segment_of(nodes[n]), kIterationStream});
    loop.body.push_back(Launch{pair.gemm, kIterationStream});
    loop.body.push_back(Record{kIterationStream, computed});
    loop.body.push_back(Wait{comm, computed});
    loop.body.push_back(Communicate{pair.collective, comm});
    close_loop(std::move(loop), out);
  }

  // The ring: one step per rank, each step's GEMM on the compute stream while the communication
  // stream passes a block to the next rank (all-gather: the block just multiplied; reduce-scatter:
  // the running sum just added to).
  //   all_gather -> GEMM, step s on rank r: out[block (r - s)] = GEMM(the block held: x at s = 0,
  //     then the block received from r - 1), while that block goes on to r + 1.
  //   GEMM -> reduce_scatter, step s: P = GEMM(x[block (r - s - 1)]) + the sum received from
  //     r - 1 for that block; sent on to r + 1; the last step's block is this rank's own, into y.
  void emit_ring(const Pair& pair, const std::vector<Node>& nodes, std::vector<Node>& out, const std::string& why) {
    const Op& op = *segment(pair.collective).ops[0];
    const Segment& gemm = segment(pair.gemm);
    std::vector<ChunkedValue> values;
    std::vector<Value*> allocated;
    if (pair.kind == PairSizes::Kind::all_gather_gemm) {
      values.push_back({op.outputs[0], ChunkedValue::Layout::ring_buffer, 0, op.inputs[0], nullptr});
      for (Value* v : gemm.outputs) values.push_back({v, ChunkedValue::Layout::ring_block, 0});
    } else {
      values.push_back({matmul_op(gemm)->inputs[0], ChunkedValue::Layout::ring_block, -1});
      values.push_back({op.inputs[0], ChunkedValue::Layout::ring_buffer, 0, nullptr, op.outputs[0]});
      allocated.push_back(op.outputs[0]);
    }
    ForChunks loop = open_loop(pair.parts, std::move(values), allocated, describe_pair(pair) + ": ring, " + why, nodes, pair.first,
                               pair.last, out);
    loop.schedule = ForChunks::Schedule::ring;
    loop.count = pair.parts;
    loop.pool_streams = 1;
    const int comm = loop.first_pool_stream - 1, compute = loop.first_pool_stream;
    const int arrived = p_.events++, done = p_.events++;
    if (pair.kind == PairSizes::Kind::all_gather_gemm) {
      loop.body.push_back(Wait{compute, arrived, true});
      loop.body.push_back(Launch{pair.gemm, compute});
      loop.body.push_back(Record{compute, done});
      // the block received now overwrites the one step s - 1 multiplied
      loop.body.push_back(Wait{comm, done, true});
      loop.body.push_back(SendRecv{comm, op.outputs[0], op.outputs[0]});
      loop.body.push_back(Record{comm, arrived});
    } else {
      loop.body.push_back(Launch{pair.gemm, compute});
      loop.body.push_back(Wait{compute, arrived, true});
      loop.body.push_back(Accumulate{compute, op.inputs[0]});
      loop.body.push_back(Record{compute, done});
      loop.body.push_back(Wait{comm, done});
      loop.body.push_back(SendRecv{comm, op.inputs[0], nullptr});
      loop.body.push_back(Record{comm, arrived});
    }
    close_loop(std::move(loop), out);
  }

  // --pipeline auto where streams overlap: every way to run the pair, one picked per run.
  void emit_choice(const Pair& pair, const std::vector<Node>& nodes, std::vector<Node>& out) {
    Choose choose{sizes_of(pair), {"off"}, {}};
    choose.variants.emplace_back(nodes.begin() + std::ptrdiff_t(pair.first), nodes.begin() + std::ptrdiff_t(pair.last) + 1);
    choose.names.push_back("chunks");
    choose.variants.emplace_back();
    emit_chunks(pair, nodes, choose.variants.back(), "chunks chosen per run (--pipeline auto)");
    if (ring_refusal(pair).empty() && pair.parts > 1) {
      choose.names.push_back("ring");
      choose.variants.emplace_back();
      emit_ring(pair, nodes, choose.variants.back(), "chosen per run (--pipeline auto)");
    }
    out.push_back(std::move(choose));
  }

  // Allocates the pair's outputs that the loop writes whole (the Allocate nodes already between
  // first and last, and those the CPU program has none of; never a ring's scratch-only values; a
  // landed value only where its collective copies the chunks), forks the communication stream
  // and the compute pool from the run's stream, and returns the loop to fill.
  ForChunks open_loop(int parts, std::vector<ChunkedValue> values, const std::vector<Value*>& also_allocated, const std::string& what,
                      const std::vector<Node>& nodes, size_t first, size_t last, std::vector<Node>& out) {
    std::map<const Value*, int> made_by;  // the pair's outputs, by the segment that makes them
    for (size_t n = first; n <= last; ++n)
      if (int s = segment_of(nodes[n]); s >= 0)
        for (const Value* o : segment(s).outputs) made_by[o] = s;
    std::set<const Value*> scratch_only;
    std::map<const Value*, int> landed_by;
    for (const ChunkedValue& v : values) {
      if (v.layout == ChunkedValue::Layout::ring_buffer) scratch_only.insert(v.value);
      if (v.layout == ChunkedValue::Layout::landed) landed_by[v.value] = made_by.at(v.value);
    }
    auto allocate = [&](Allocate a) {
      if (auto it = landed_by.find(a.value); it != landed_by.end()) a.unless_landed = it->second;
      out.push_back(a);
    };
    std::set<const Value*> allocated;
    for (size_t n = first; n <= last; ++n)
      if (auto* a = std::get_if<Allocate>(&nodes[n]); a && !scratch_only.count(a->value)) {
        allocate(*a);
        allocated.insert(a->value);
      }
    std::vector<Value*> wanted = also_allocated;
    for (const ChunkedValue& v : values)
      if (made_by.count(v.value) && !scratch_only.count(v.value)) wanted.push_back(v.value);
    for (Value* v : wanted)
      if (allocated.insert(v).second) allocate(Allocate{v});
    ForChunks loop;
    loop.parts = parts;
    loop.values = std::move(values);
    make_shared_streams();
    loop.first_pool_stream = comm_ + 1;
    loop.why = what;
    int fork = p_.events++;
    out.push_back(Record{0, fork});
    for (int s = comm_; s < p_.streams; ++s) out.push_back(Wait{s, fork});
    return loop;
  }

  // The loop, then the run's stream waits for the communication stream and the compute pool (and
  // the urgent stream, `also`, where the loop used it).
  void close_loop(ForChunks loop, std::vector<Node>& out, int also = -1) {
    std::vector<int> joined;
    for (int s = loop.first_pool_stream - 1; s < loop.first_pool_stream + loop.pool_streams; ++s) joined.push_back(s);
    if (also >= 0) joined.push_back(also);
    out.push_back(std::move(loop));
    for (int s : joined) {
      int done = p_.events++;
      out.push_back(Record{s, done});
      out.push_back(Wait{0, done});
    }
  }

  // One communication stream and one compute pool serve every loop (each loop joins them): made
  // by the first loop.
  void make_shared_streams() {
    if (comm_ >= 0) return;
    comm_ = p_.streams;
    p_.streams = comm_ + 1 + kComputeStreams;
  }

  // The urgent stream of the GEMM -> reduce-scatter loops' other blocks (Program::urgent_streams),
  // made once, after the communication stream and the pool (so open_loop forks it). The
  // communication stream becomes urgent with it: where a communicator moves the chunks by kernels
  // (NCCL's), they must not queue behind every chunk's urgent GEMMs (with the copy engines it
  // launches no kernels, and its priority changes nothing).
  int feed_stream() {
    make_shared_streams();
    if (feed_ < 0) {
      feed_ = p_.streams++;
      p_.urgent_streams.insert(feed_);
      p_.urgent_streams.insert(comm_);
    }
    return feed_;
  }

  Program& p_;
  const ProgramPassOptions& options_;
  int comm_ = -1;
  int feed_ = -1;
  int chunks_;
  std::string why_;
  int pairs_ = 0;
};

}  // namespace

Program pipeline_collectives(Program program, const ProgramPassOptions& options) {
  using P = ProgramPassOptions::Pipeline;
  int chunks = 0;
  std::string why;
  const bool cuda = program.segmentation.target == Target::cuda;
  if (options.pipeline == P::chunks) {
    chunks = options.chunks;
    why = std::to_string(chunks) + " chunks (--pipeline chunks=" + std::to_string(chunks) + ")";
  } else if (options.pipeline == P::automatic && cuda) {
    // the most chunks the model may choose; the loop is cut to the chosen count per run
    chunks = kMostAutoChunks;
  } else if (options.pipeline == P::automatic) {
    // The CPU runs every node in order, one after another, so a pipelined pair costs its
    // collective and its GEMMs plus the loop's overhead: by the cost model's own formula with
    // nothing overlapping, off is never slower, whatever the measured rates; nothing to measure.
    if (Rewriter(program, options, 0, "").count_pairs() > 0)
      program.notes.push_back("pipeline_collectives: --pipeline auto is off on the CPU (nothing overlaps there: the nodes run in order)");
    return program;
  } else if (options.pipeline == P::ring) {
    chunks = 1;
  }
  if (chunks < 1) return program;
  Rewriter(program, options, chunks, why).run();
  return program;
}

}  // namespace alloy::host_ir
