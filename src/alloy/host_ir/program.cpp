#include "alloy/host_ir/program.h"

#include <cstdlib>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "alloy/ir/op_table.h"
#include "alloy/ir/printer.h"

namespace alloy::host_ir {
namespace {

// "Communicate all_gather(axis=0) x: bf16[T/2, 1600] -> x__gathered: bf16[T, 1600], team
// @mesh[0, 1], sends T*1600 bytes": what moves, between whom, and how much this device sends.
std::string communication_str(const Segment& s) {
  const Op& op = *s.ops.at(0);
  const Value* in = op.inputs[0];
  const Value* out = op.outputs[0];
  std::string attrs;
  for (const NamedAttr& a : op.attrs) attrs += (attrs.empty() ? "" : ", ") + a.name + "=" + a.value.str();
  std::string text = "Communicate segment " + std::to_string(s.id) + ": " + std::string(op_name(op.kind)) + "(" + attrs + ") " +
                     in->name + ": " + in->type_str() + " -> " + out->name + ": " + out->type_str();
  if (out->sharding) text += ", team " + mesh_str(out->sharding->mesh);
  Extent bytes = Extent::constant(dtype_size(in->dtype()));
  for (const Extent& e : in->shape()) bytes = bytes * e;
  if (op.kind == OpKind::shard_slice) return text + ", moves nothing (this device's part)";
  return text + ", sends " + bytes.str(true) + " bytes";
}

}  // namespace

Program lower_to_program(Segmentation segmentation) {
  Program program;
  const bool cuda = segmentation.target == Target::cuda;
  for (const Segment& s : segmentation.segments) {
    if (s.scheduler == SchedulerKind::communication) {
      program.nodes.push_back(Communicate{s.id});
      continue;
    }
    // CPU reference kernels and views return their own results; GPU kernels write into buffers
    // the program allocates from the stream-ordered pool.
    if (cuda && s.scheduler != SchedulerKind::noop)
      for (Value* out : s.outputs) program.nodes.push_back(Allocate{out, segmentation.direct_target(out)});
    program.nodes.push_back(Launch{s.id, 0});
  }
  program.segmentation = std::move(segmentation);
  return program;
}

namespace {

std::string stream_str(int stream, const ForChunks* loop) {
  if (stream != kIterationStream) return std::to_string(stream);
  return "(" + std::to_string(loop->first_pool_stream) + " + i % " + std::to_string(loop->pool_streams) + ")";
}

std::string chunked_str(const ChunkedValue& v, const ForChunks& f) {
  switch (v.layout) {
    case ChunkedValue::Layout::rows: return v.value->name + " (rows)";
    case ChunkedValue::Layout::blocks:
      if (v.landing >= 0)
        return v.value->name + " (blocks of " + std::to_string(f.parts) + "; its own block is " + (v.own ? v.own->name : "?") +
               ", whose GEMM adds the other ranks' parts where they land: their sum in a scratch chunk where segment " +
               std::to_string(v.landing) + "'s communicator reduces them, this value's own block zeroed before the loop as this rank's term)";
      return v.value->name + " (blocks of " + std::to_string(f.parts) + (v.own ? "; its own block is " + v.own->name : "") + ")";
    case ChunkedValue::Layout::landed:
      return v.value->name + " (blocks of " + std::to_string(f.parts) + ", each read where its chunk lands" +
             (v.own ? "; its own block is " + v.own->name : "") + ")";
    case ChunkedValue::Layout::ring_block: {
      std::string shift = v.shift == 0 ? "" : v.shift > 0 ? " + " + std::to_string(v.shift) : " - " + std::to_string(-v.shift);
      return v.value->name + " (block (rank - s" + shift + ") mod " + std::to_string(f.parts) + ")";
    }
    case ChunkedValue::Layout::ring_buffer: {
      std::string text = v.value->name + " (two scratch blocks";
      if (v.first) text += "; " + v.first->name + " at step 0";
      if (v.last) text += "; " + v.last->name + " at the last step";
      return text + ")";
    }
  }
  return v.value->name;
}

void print_nodes(std::ostream& os, const Program& p, const std::vector<Node>& nodes, const std::string& indent, const ForChunks* loop) {
  for (const Node& node : nodes) {
    if (auto* a = std::get_if<Allocate>(&node)) {
      os << indent << "Allocate " << a->value->name << ": " << a->value->type_str();
      if (a->input) os << " = the memory of input " << a->input->name << " (written in place)";
      if (a->unless_landed >= 0)
        os << ", for segment " << a->unless_landed << " to copy its chunks into (none where its communicator leaves them where they land)";
      os << "\n";
    } else if (auto* l = std::get_if<Launch>(&node)) {
      const Segment& s = p.segmentation.segments.at(l->segment);
      os << indent << "Launch segment " << s.id << " [" << scheduler_name(s.scheduler) << "] (";
      for (size_t i = 0; i < s.inputs.size(); ++i) os << (i ? ", " : "") << s.inputs[i]->name;
      os << ") -> (";
      for (size_t i = 0; i < s.outputs.size(); ++i) os << (i ? ", " : "") << s.outputs[i]->name;
      os << ")";
      if (l->relative && l->part == 0) os << " on chunk i of its own block";
      else if (l->relative) os << " on chunk i of block (rank " << (l->part > 0 ? "+ " : "- ") << std::abs(l->part) << ") mod " << (loop ? loop->parts : 0);
      else if (l->part >= 0) os << " on chunk i of block " << l->part;
      if (l->adds)
        os << ", adding the other ranks' parts of " << l->adds->name << " where they landed"
           << (p.segmentation.target == Target::cuda ? " (cuBLASLt: the first as its C, beta = 1)" : " (added after it)");
      if (l->stream != 0) os << " on stream " << stream_str(l->stream, loop);
      os << "\n";
    } else if (auto* r = std::get_if<Record>(&node)) {
      os << indent << "Record event " << r->event << " on stream " << stream_str(r->stream, loop) << "\n";
    } else if (auto* w = std::get_if<Wait>(&node)) {
      os << indent << "Stream " << stream_str(w->stream, loop) << " waits for event " << w->event
         << (w->previous_step ? " of step s - 1 (none in step 0)" : "")
         << (w->unless_by_part ? ", unless the launches wait for each part of " + w->unless_by_part->name + " they read as it lands" : "")
         << "\n";
    } else if (auto* c = std::get_if<Communicate>(&node)) {
      os << indent << communication_str(p.segmentation.segments.at(c->segment));
      const bool gathered = p.segmentation.segments.at(c->segment).ops.at(0)->kind == OpKind::all_gather;
      if (loop) os << (c->phase == ChunkPhase::send && c->part_events >= 0
                           ? " (chunk i: send the parts of the other ranks, that of rank (r + j) mod n once event " +
                                 std::to_string(c->part_events) + " + j - 1 is reached)"
                       : c->phase == ChunkPhase::send   ? " (chunk i: send the parts of the other ranks)"
                       : c->phase == ChunkPhase::finish ? " (chunk i: finish this rank's part)"
                       : c->phase == ChunkPhase::land   ? (gathered ? " (chunk i, read where it lands)"
                                                                    : " (chunk i: the other ranks' parts of this rank's, left where they land)")
                                                        : " (chunk i)");
      if (c->stream != 0) os << " on stream " << stream_str(c->stream, loop);
      os << "\n";
    } else if (auto* sr = std::get_if<SendRecv>(&node)) {
      os << indent << "SendRecv " << sr->send->name << " of step s to rank + 1, receiving "
         << (sr->receive ? sr->receive->name : std::string("the running sum")) << " of step s + 1 from rank - 1 (none in the last step)";
      if (sr->stream != 0) os << " on stream " << stream_str(sr->stream, loop);
      os << "\n";
    } else if (auto* acc = std::get_if<Accumulate>(&node)) {
      os << indent << "Accumulate " << acc->into->name << " += the running sum received (none in step 0)";
      if (acc->stream != 0) os << " on stream " << stream_str(acc->stream, loop);
      os << "\n";
    } else if (auto* rl = std::get_if<Release>(&node)) {
      os << indent << "Release chunk i of " << rl->value->name << " to its collective (nothing below reads where it landed) on stream "
         << stream_str(rl->stream, loop) << "\n";
    } else if (auto* f = std::get_if<ForChunks>(&node)) {
      if (f->schedule == ForChunks::Schedule::ring)
        os << indent << "Ring s in 0.." << f->parts << " over the team (" << f->why << "); bound:";
      else
        os << indent << "For i in 0.." << f->count << " (" << f->why << "); chunked:";
      for (const ChunkedValue& v : f->values) os << " " << chunked_str(v, *f);
      os << "\n";
      print_nodes(os, p, f->body, indent + "  ", f);
    } else if (auto* choose = std::get_if<Choose>(&node)) {
      os << indent << "Choose per run (--pipeline auto: the cost model, from the run's sizes and the machine's measured rates)";
      os << "; last run: " << (choose->last->empty() ? std::string("none yet") : *choose->last) << "\n";
      for (size_t k = 0; k < choose->variants.size(); ++k) {
        os << indent << "  " << choose->names[k] << ":\n";
        print_nodes(os, p, choose->variants[k], indent + "    ", loop);
      }
    }
  }
}

}  // namespace

std::string Program::str() const {
  std::ostringstream os;
  os << "program (" << (segmentation.target == Target::cpu ? "cpu" : "cuda");
  if (streams > 1) os << ", " << streams << " streams";
  if (!urgent_streams.empty()) {
    os << (urgent_streams.size() == 1 ? ", stream " : ", streams ");
    for (int s : urgent_streams) os << (s == *urgent_streams.begin() ? "" : ", ") << s;
    os << " urgent";
  }
  os << "):\n";
  for (const std::string& note : notes) os << "  # " << note << "\n";
  print_nodes(os, *this, nodes, "  ", nullptr);
  // what the run does after the program: each in-place output a kernel did not write in place
  for (const InPlaceOutput& o : segmentation.in_place)
    if (!o.direct) os << "  Copy " << o.value->name << " into input " << o.input->name << " after the run: " << o.why << "\n";
  return os.str();
}

}  // namespace alloy::host_ir
