// Lowering to the host program, side streams included: decided on the host, so these run without a GPU.
#include "alloy/host_ir/program.h"

#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"
#include "alloy/segment/segmenter.h"
#include "test_util.h"

namespace alloy {
namespace {

using host_ir::Program;

host_ir::Program lower_for_cuda(const Fusion& fusion) { return host_ir::lower_to_program(segment_for_cuda(fusion)); }

// The segment a Launch node runs, by the name of its first output, and its stream.
std::vector<std::pair<std::string, int>> launches(const Program& p) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& node : p.nodes)
    if (auto* l = std::get_if<host_ir::Launch>(&node)) {
      const Segment& s = p.segmentation.segments.at(l->segment);
      out.emplace_back(s.outputs.empty() ? "" : s.outputs[0]->name, l->stream);
    }
  return out;
}

// Node index of the Launch whose segment writes `name`.
size_t launch_of(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (auto* l = std::get_if<host_ir::Launch>(&p.nodes[i])) {
      const Segment& s = p.segmentation.segments.at(l->segment);
      for (const Value* out : s.outputs)
        if (out->name == name) return i;
    }
  ADD_FAILURE() << "no launch writes " << name;
  return 0;
}

TEST(HostProgram, BiasGradientsOverlapTheNextGemmOnASideStream) {
  testing::ScopedEnv keep("ALLOY_NO_SIDE_STREAM", "");
  auto f = parse_fusion_file(testing::source_path("examples/mlp_backward.fusion"));
  auto lowered = decompose_composites(*f);
  Program p = lower_for_cuda(*lowered);
  EXPECT_EQ(p.streams, 2) << p.str();
  // db_proj = sum(dy) runs beside dg's GEMM, db_fc = sum(dh) beside dW_fc's; the GEMMs stay on stream 0
  std::map<std::string, int> stream;
  for (auto& [name, s] : launches(p)) stream[name] = s;
  EXPECT_EQ(stream["db_proj"], 1) << p.str();
  EXPECT_EQ(stream["db_fc"], 1) << p.str();
  for (const char* gemm : {"dw_proj", "dh", "dw_fc", "dx"}) EXPECT_EQ(stream[gemm], 0) << gemm << "\n" << p.str();
  // every side launch comes after stream 1 waits for an event just recorded on stream 0, and
  // is followed by a record on stream 1; the program ends with stream 0 waiting for the last one
  for (const char* side : {"db_proj", "db_fc"}) {
    size_t at = launch_of(p, side);
    ASSERT_GE(at, 2u);
    auto* wait = std::get_if<host_ir::Wait>(&p.nodes[at - 1]);
    auto* fork = std::get_if<host_ir::Record>(&p.nodes[at - 2]);
    ASSERT_TRUE(wait && fork) << p.str();
    EXPECT_EQ(wait->stream, 1);
    EXPECT_EQ(fork->stream, 0);
    EXPECT_EQ(wait->event, fork->event);
    auto* done = std::get_if<host_ir::Record>(&p.nodes.at(at + 1));
    ASSERT_TRUE(done) << p.str();
    EXPECT_EQ(done->stream, 1);
  }
  auto* last = std::get_if<host_ir::Wait>(&p.nodes.back());
  ASSERT_TRUE(last) << p.str();
  EXPECT_EQ(last->stream, 0);
  EXPECT_EQ(last->event, p.events - 1);
  EXPECT_NE(p.str().find("on stream 1"), std::string::npos);
}

TEST(HostProgram, ResultsReadOnTheRunsStreamWaitForTheSideStream) {
  testing::ScopedEnv keep("ALLOY_NO_SIDE_STREAM", "");
  // s = sum(x) can overlap the GEMM after it; the GEMM after that reads s, and waits for it
  auto f = parse_fusion(R"(
fusion f(x: f32[64, 32], w: f32[32, 16], v: f32[16, 32]) {
  s = sum(x, dims=[0])
  p = matmul(x, w)
  q = mul(x, s)
  r = matmul(q, w)
  return p, r
})", "t.fusion", std::nullopt);
  Program p = lower_for_cuda(*f);
  ASSERT_EQ(p.streams, 2) << p.str();
  size_t s_at = launch_of(p, "s"), q_at = launch_of(p, "q");
  EXPECT_EQ(std::get<host_ir::Launch>(p.nodes[s_at]).stream, 1);
  int done = std::get<host_ir::Record>(p.nodes.at(s_at + 1)).event;
  // the wait comes after the first GEMM (which overlaps s) and before q, which reads s
  bool waited = false;
  for (size_t i = s_at + 1; i < q_at; ++i)
    if (auto* w = std::get_if<host_ir::Wait>(&p.nodes[i]); w && w->stream == 0 && w->event == done) waited = i > launch_of(p, "p");
  EXPECT_TRUE(waited) << p.str();
  // q itself feeds the next GEMM: it stays on the run's stream
  EXPECT_EQ(std::get<host_ir::Launch>(p.nodes[q_at]).stream, 0) << p.str();
}

TEST(HostProgram, OneStreamWithoutAGemmToOverlapOrWhenTurnedOff) {
  auto ln = parse_fusion_file(testing::source_path("examples/layer_norm.fusion"));
  Program p = lower_for_cuda(*decompose_composites(*ln));
  EXPECT_EQ(p.streams, 1) << p.str();
  EXPECT_EQ(p.events, 0);
  testing::ScopedEnv off("ALLOY_NO_SIDE_STREAM", "1");
  auto mlp = parse_fusion_file(testing::source_path("examples/mlp_backward.fusion"));
  Program q = lower_for_cuda(*decompose_composites(*mlp));
  EXPECT_EQ(q.streams, 1) << q.str();
  for (const auto& node : q.nodes) EXPECT_FALSE(std::holds_alternative<host_ir::Wait>(node)) << q.str();
  // the CPU program never has side streams
  Program cpu = host_ir::lower_to_program(segment_fusion(*decompose_composites(*mlp), Target::cpu));
  EXPECT_EQ(cpu.streams, 1);
}

}  // namespace
}  // namespace alloy
