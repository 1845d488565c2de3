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

bool generated_kernel(const Segment& s) {
  return s.scheduler == "pointwise" || s.scheduler == "reduction" || s.scheduler == "normalization";
}

bool side_stream_allowed() {
  const char* env = std::getenv("ALLOY_NO_SIDE_STREAM");
  return !(env && *env && std::string(env) != "0");
}

// Whether segments[i] should run on the side stream: a generated kernel whose next segment with
// device work is a GEMM that reads none of its results, directly or through views made between.
bool overlaps_next_gemm(const std::vector<Segment>& segments, size_t i) {
  if (!generated_kernel(segments[i])) return false;
  std::set<const Value*> derived(segments[i].outputs.begin(), segments[i].outputs.end());
  auto reads_derived = [&](const Segment& s) {
    return std::any_of(s.inputs.begin(), s.inputs.end(), [&](const Value* v) { return derived.count(v) > 0; });
  };
  for (size_t j = i + 1; j < segments.size(); ++j) {
    const Segment& next = segments[j];
    if (next.scheduler == "noop") {
      if (reads_derived(next)) derived.insert(next.outputs.begin(), next.outputs.end());
      continue;
    }
    return next.scheduler == "matmul" && !reads_derived(next);
  }
  return false;
}

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
  const bool side_allowed = cuda && side_stream_allowed();
  std::map<const Value*, int> side_values;  // produced on the side stream -> the event after it
  int side_waited = -1;                      // the latest side event the run's stream waits for
  auto wait_for_side = [&](int event) {
    if (event > side_waited) {
      program.nodes.push_back(Wait{0, event});
      side_waited = event;
    }
  };
  const auto& segments = segmentation.segments;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    bool side = side_allowed && overlaps_next_gemm(segments, i);
    if (!side) {
      // the run's stream reads a side kernel's results only after it (views too: a view the
      // host cannot make is a copy on the run's stream)
      int needed = -1;
      for (const Value* in : s.inputs)
        if (auto it = side_values.find(in); it != side_values.end()) needed = std::max(needed, it->second);
      if (needed >= 0) wait_for_side(needed);
    }
    // CPU reference kernels and views return their own results; GPU kernels write into buffers
    // the program allocates from the stream-ordered pool.
    if (s.scheduler == "communication") {
      program.nodes.push_back(Communicate{s.id});
      continue;
    }
    bool preallocate = cuda && s.scheduler != "noop";
    if (preallocate)
      for (Value* out : s.outputs) program.nodes.push_back(Allocate{out});
    if (side) {
      program.streams = 2;
      int fork = program.events++;
      program.nodes.push_back(Record{0, fork});
      program.nodes.push_back(Wait{1, fork});
      program.nodes.push_back(Launch{s.id, 1});
      int done = program.events++;
      program.nodes.push_back(Record{1, done});
      for (const Value* out : s.outputs) side_values[out] = done;
    } else {
      program.nodes.push_back(Launch{s.id, 0});
    }
  }
  if (program.events > 0) wait_for_side(program.events - 1);  // the run ends with the side stream joined
  program.segmentation = std::move(segmentation);
  return program;
}

std::string Program::str() const {
  std::ostringstream os;
  os << "program (" << (segmentation.target == Target::cpu ? "cpu" : "cuda");
  if (streams > 1) os << ", " << streams << " streams";
  os << "):\n";
  for (const Node& node : nodes) {
    if (auto* a = std::get_if<Allocate>(&node)) {
      os << "  Allocate " << a->value->name << ": " << a->value->type_str() << "\n";
    } else if (auto* l = std::get_if<Launch>(&node)) {
      const Segment& s = segmentation.segments.at(l->segment);
      os << "  Launch segment " << s.id << " [" << s.scheduler << "] (";
      for (size_t i = 0; i < s.inputs.size(); ++i) os << (i ? ", " : "") << s.inputs[i]->name;
      os << ") -> (";
      for (size_t i = 0; i < s.outputs.size(); ++i) os << (i ? ", " : "") << s.outputs[i]->name;
      os << ")";
      if (l->stream != 0) os << " on stream " << l->stream;
      os << "\n";
    } else if (auto* r = std::get_if<Record>(&node)) {
      os << "  Record event " << r->event << " on stream " << r->stream << "\n";
    } else if (auto* w = std::get_if<Wait>(&node)) {
      os << "  Stream " << w->stream << " waits for event " << w->event << "\n";
    } else if (auto* c = std::get_if<Communicate>(&node)) {
      os << "  " << communication_str(segmentation.segments.at(c->segment)) << "\n";
    }
  }
  return os.str();
}

}  // namespace alloy::host_ir
