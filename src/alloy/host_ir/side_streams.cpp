#include "alloy/host_ir/side_streams.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "alloy/common/error.h"
#include "alloy/common/settings.h"

namespace alloy::host_ir {
namespace {

bool generated_kernel(const Segment& s) {
  return is_generated_kernel(s.scheduler);
}

bool side_stream_allowed() {
  return !settings::flag("ALLOY_NO_SIDE_STREAM");
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
    if (next.scheduler == SchedulerKind::noop) {
      if (reads_derived(next)) derived.insert(next.outputs.begin(), next.outputs.end());
      continue;
    }
    return next.scheduler == SchedulerKind::matmul && !reads_derived(next);
  }
  return false;
}

}  // namespace

Program assign_side_streams(Program program, const ProgramPassOptions&) {
  if (program.segmentation.target != Target::cuda || !side_stream_allowed()) return program;
  const auto& segments = program.segmentation.segments;
  std::vector<Node> nodes;
  std::map<const Value*, int> side_values;  // produced on the side stream -> the event after it
  int side_waited = -1;                      // the latest side event the run's stream waits for
  auto wait_for_side = [&](int event) {
    if (event > side_waited) {
      nodes.push_back(Wait{0, event});
      side_waited = event;
    }
  };
  // A segment's Allocate nodes come right before its Launch: they move with it.
  std::vector<Node> pending_allocations;
  for (const Node& node : program.nodes) {
    if (std::holds_alternative<Allocate>(node)) {
      pending_allocations.push_back(node);
      continue;
    }
    int segment = -1;
    if (auto* l = std::get_if<Launch>(&node)) segment = l->segment;
    if (auto* c = std::get_if<Communicate>(&node)) segment = c->segment;
    ALLOY_CHECK(segment >= 0, "side_streams runs on a lowered program of Launch, Communicate and Allocate nodes");
    const Segment& s = segments.at(size_t(segment));
    bool side = std::holds_alternative<Launch>(node) && overlaps_next_gemm(segments, size_t(segment));
    if (!side) {
      // the run's stream reads a side kernel's results only after it (views too: a view the
      // host cannot make is a copy on the run's stream)
      int needed = -1;
      for (const Value* in : s.inputs)
        if (auto it = side_values.find(in); it != side_values.end()) needed = std::max(needed, it->second);
      if (needed >= 0) wait_for_side(needed);
    }
    nodes.insert(nodes.end(), pending_allocations.begin(), pending_allocations.end());
    pending_allocations.clear();
    if (side) {
      program.streams = std::max(program.streams, 2);
      int fork = program.events++;
      nodes.push_back(Record{0, fork});
      nodes.push_back(Wait{1, fork});
      nodes.push_back(Launch{segment, 1});
      int done = program.events++;
      nodes.push_back(Record{1, done});
      for (const Value* out : s.outputs) side_values[out] = done;
    } else {
      nodes.push_back(node);
    }
  }
  nodes.insert(nodes.end(), pending_allocations.begin(), pending_allocations.end());
  program.nodes = std::move(nodes);
  if (program.events > 0) {
    std::vector<Node>& out = program.nodes;
    if (program.events - 1 > side_waited) out.push_back(Wait{0, program.events - 1});  // joined before the run ends
  }
  return program;
}

}  // namespace alloy::host_ir
