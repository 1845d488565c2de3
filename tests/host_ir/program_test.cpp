// Lowering to the host program, side streams included: decided on the host, so these run without a GPU.
#include "alloy/host_ir/program.h"

#include <gtest/gtest.h>

#include <set>

#include "alloy/host_ir/side_streams.h"
#include "alloy/ir/parser.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/pipeline/pipeline.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"
#include "alloy/segment/segmenter.h"
#include "test_util.h"

namespace alloy {
namespace {

using host_ir::Program;

host_ir::Program lower_for_cuda(const Fusion& fusion) {
  return host_ir::assign_side_streams(host_ir::lower_to_program(segment_for_cuda(fusion)));
}

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

// ---- pipelined collectives (issue 13): the program's structure, decided without a GPU --------

namespace alloy {
namespace {

using host_ir::ForChunks;

std::vector<const ForChunks*> loops_of(const Program& p) {
  std::vector<const ForChunks*> loops;
  for (const auto& node : p.nodes)
    if (auto* f = std::get_if<ForChunks>(&node)) loops.push_back(f);
  return loops;
}

CompiledFusion compile_sequence_parallel(Target target, const std::string& pipeline) {
  auto f = parse_fusion_file(testing::source_path("examples/tp_mlp_sequence_parallel.fusion"));
  return compile_fusion(*f, target, {.program = parse_pipeline_option(pipeline)});
}

TEST(PipelinedProgram, SequenceParallelMlp_GathersAndScattersChunksOnTheirOwnStreamBesideTheGemms) {
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();  // the CPU half ran; this one is reported skipped
#endif
    CompiledFusion c = compile_sequence_parallel(target, "chunks=4");
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 2u) << p.str();
    for (const ForChunks* loop : loops) {
      EXPECT_EQ(loop->count, 4);
      EXPECT_EQ(loop->parts, 2);
      int comm_stream = -1, gemms = 0;
      std::set<int> compute_streams;
      for (const auto& node : loop->body) {
        if (auto* cm = std::get_if<host_ir::Communicate>(&node)) comm_stream = cm->stream;
        if (auto* l = std::get_if<host_ir::Launch>(&node)) {
          ++gemms;
          compute_streams.insert(l->stream);
          EXPECT_EQ(p.segmentation.segments.at(l->segment).scheduler, target == Target::cuda ? SchedulerKind::matmul : SchedulerKind::cpu_reference);
        }
        // nothing inside the loop allocates, and nothing makes the host wait
        EXPECT_FALSE(std::holds_alternative<host_ir::Allocate>(node)) << p.str();
      }
      EXPECT_GT(comm_stream, 0) << p.str();
      EXPECT_EQ(gemms, 2) << "one GEMM per block of rows\n" << p.str();
      // the reduce-scatter's other blocks on the urgent stream, its own on the pool's
      const bool scatter = loop->why.find("reduce_scatter") != std::string::npos;
      std::set<int> expected{host_ir::kIterationStream};
      if (scatter) expected.insert(*p.urgent_streams.rbegin());
      EXPECT_EQ(compute_streams, expected) << p.str();
      EXPECT_NE(comm_stream, loop->first_pool_stream) << p.str();
      EXPECT_NE(comm_stream, loop->first_pool_stream + 1) << p.str();
    }
    // the first loop all-gathers x, the second reduce-scatters the partial product
    std::string text = p.str();
    EXPECT_NE(text.find("For i in 0..4 (all_gather -> linear h"), std::string::npos) << text;
    EXPECT_NE(text.find("-> reduce_scatter: 4 chunks"), std::string::npos) << text;
    // after each loop the run's stream waits for every stream the loop used
    size_t waits_after = 0;
    bool after_loop = false;
    for (const auto& node : p.nodes) {
      if (std::holds_alternative<ForChunks>(node)) after_loop = true, waits_after = 0;
      else if (auto* w = std::get_if<host_ir::Wait>(&node); w && after_loop && w->stream == 0) ++waits_after;
      else if (std::holds_alternative<host_ir::Launch>(node) && after_loop) break;
    }
    EXPECT_GE(waits_after, 3u) << text;
  }
}

// The allocation of `name` before the first loop, or null.
const host_ir::Allocate* allocation_of(const Program& p, const std::string& name) {
  for (const auto& node : p.nodes) {
    if (std::holds_alternative<ForChunks>(node)) break;
    if (auto* a = std::get_if<host_ir::Allocate>(&node); a && a->value->name == name) return a;
  }
  return nullptr;
}

// Issue 25: where only the GEMM reads the gathered rows, the loop never makes them whole. Its body:
// the own block's GEMM, the all-gather of chunk i in its landed form, the event, the other
// block's GEMM reading the chunk where it landed, then the Release of those places on the same
// compute stream (after that GEMM); the gathered buffer is allocated only for a communicator
// that copies the chunks into it.
TEST(PipelinedProgram, AllGatherGemm_GatheredOnlyByTheGemm_ReadsEachChunkWhereItLands) {
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();  // the CPU half ran; this one is reported skipped
#endif
    CompiledFusion c = compile_sequence_parallel(target, "chunks=4");
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 2u) << p.str();
    const ForChunks& loop = *loops[0];
    ASSERT_EQ(loop.values.size(), 3u) << p.str();
    EXPECT_EQ(loop.values[1].value->name, "x__gathered");
    EXPECT_EQ(loop.values[1].layout, host_ir::ChunkedValue::Layout::landed) << p.str();
    ASSERT_NE(loop.values[1].own, nullptr);
    EXPECT_EQ(loop.values[1].own->name, "x") << "the own block's GEMM reads the device's own rows";
    ASSERT_EQ(loop.body.size(), 6u) << p.str();
    auto* own = std::get_if<host_ir::Launch>(&loop.body[0]);
    auto* gather = std::get_if<host_ir::Communicate>(&loop.body[1]);
    auto* record = std::get_if<host_ir::Record>(&loop.body[2]);
    auto* wait = std::get_if<host_ir::Wait>(&loop.body[3]);
    auto* other = std::get_if<host_ir::Launch>(&loop.body[4]);
    auto* release = std::get_if<host_ir::Release>(&loop.body[5]);
    ASSERT_TRUE(own && gather && record && wait && other && release) << p.str();
    EXPECT_EQ(own->part, 0);
    EXPECT_EQ(gather->phase, host_ir::ChunkPhase::land);
    // skipped where the team lets each GEMM wait for its own block (the copy engines)
    EXPECT_EQ(wait->unless_by_part, loop.values[1].value);
    EXPECT_EQ(other->part, -1);
    EXPECT_EQ(other->stream, host_ir::kIterationStream);
    EXPECT_EQ(release->stream, other->stream) << "released behind the GEMM that reads the chunk, on its stream";
    EXPECT_EQ(release->value, loop.values[1].value);
    // the buffer only for a communicator that copies; the GEMM's output always
    const host_ir::Allocate* gathered = allocation_of(p, "x__gathered");
    ASSERT_NE(gathered, nullptr) << p.str();
    EXPECT_EQ(gathered->unless_landed, gather->segment) << p.str();
    ASSERT_NE(allocation_of(p, "h"), nullptr) << p.str();
    EXPECT_EQ(allocation_of(p, "h")->unless_landed, -1);
    // the reduce-scatter loop's landing is of its own kind (GemmReduceScatter_* below)
    for (const auto& node : loops[1]->body)
      if (auto* rl = std::get_if<host_ir::Release>(&node)) EXPECT_EQ(rl->value->name, "y__computed") << p.str();
  }
  // the whole loop, as --dump program prints it (CPU)
  auto f = parse_fusion(R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=0), w: f32[32, 16] @mesh[0, 1] shard(axis=0)) {
    h = linear(x, w) @mesh[0, 1] shard(axis=1)
    return h
  })", "landed.fusion");
  EXPECT_EQ(compile_fusion(*f, Target::cpu, {.program = parse_pipeline_option("chunks=2")}).executable->program.str(), R"(program (cpu, 4 streams):
  Allocate x__gathered: f32[8, 16], for segment 0 to copy its chunks into (none where its communicator leaves them where they land)
  Allocate h: f32[8, 16]
  Record event 0 on stream 0
  Stream 1 waits for event 0
  Stream 2 waits for event 0
  Stream 3 waits for event 0
  For i in 0..2 (all_gather -> linear h: 2 chunks (--pipeline chunks=2)); chunked: x (rows) x__gathered (blocks of 2, each read where its chunk lands; its own block is x) h (blocks of 2)
    Launch segment 1 [cpu_reference] (x__gathered, w) -> (h) on chunk i of its own block on stream (2 + i % 2)
    Communicate segment 0: all_gather(axis=0) x: f32[4, 16] -> x__gathered: f32[8, 16], team @mesh[0, 1], sends 256 bytes (chunk i, read where it lands) on stream 1
    Record event 1 on stream 1
    Stream (2 + i % 2) waits for event 1, unless the launches wait for each part of x__gathered they read as it lands
    Launch segment 1 [cpu_reference] (x__gathered, w) -> (h) on chunk i of block (rank - 1) mod 2 on stream (2 + i % 2)
    Release chunk i of x__gathered to its collective (nothing below reads where it landed) on stream (2 + i % 2)
  Record event 2 on stream 1
  Stream 0 waits for event 2
  Record event 3 on stream 2
  Stream 0 waits for event 3
  Record event 4 on stream 3
  Stream 0 waits for event 4
)");
}

// Issue 25: a GEMM -> sum reduce-scatter sends the other blocks' partial sums as soon as their
// GEMMs are done, lands the other ranks' parts of this rank's chunk on the communication stream
// (an event after it), and the own block's GEMM waits for that event on its compute stream and
// adds them as it writes the output (Launch::adds: cuBLASLt's C), then the Release; no finish
// after the own GEMM, and the communication stream never waits for it.
TEST(PipelinedProgram, GemmReduceScatter_TheOwnGemmAddsTheOtherRanksPartsWhereTheyLand) {
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();  // the CPU half ran; this one is reported skipped
#endif
    CompiledFusion c = compile_sequence_parallel(target, "chunks=4");
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 2u) << p.str();
    const ForChunks& loop = *loops[1];
    ASSERT_EQ(loop.values.size(), 3u) << p.str();
    const host_ir::ChunkedValue& partial = loop.values[1];
    EXPECT_EQ(partial.value->name, "y__computed");
    EXPECT_EQ(partial.layout, host_ir::ChunkedValue::Layout::blocks);
    ASSERT_NE(partial.own, nullptr);
    EXPECT_EQ(partial.own->name, "y");
    ASSERT_EQ(loop.body.size(), 8u) << p.str();
    auto* other = std::get_if<host_ir::Launch>(&loop.body[0]);
    auto* computed = std::get_if<host_ir::Record>(&loop.body[1]);
    auto* send = std::get_if<host_ir::Communicate>(&loop.body[2]);
    auto* land = std::get_if<host_ir::Communicate>(&loop.body[3]);
    auto* landed = std::get_if<host_ir::Record>(&loop.body[4]);
    auto* gemm_waits = std::get_if<host_ir::Wait>(&loop.body[5]);
    auto* own = std::get_if<host_ir::Launch>(&loop.body[6]);
    auto* release = std::get_if<host_ir::Release>(&loop.body[7]);
    ASSERT_TRUE(other && computed && send && land && landed && gemm_waits && own && release) << p.str();
    // the other blocks' GEMMs, every chunk's, on the one urgent stream (in chunk order, first on
    // the device), which the loop forks and joins; the own block's on the pool's
    // (and the communication stream, urgent with it: NCCL's kernels do not queue behind them)
    ASSERT_EQ(p.urgent_streams.size(), 2u) << p.str();
    const int urgent = *p.urgent_streams.rbegin();
    EXPECT_EQ(other->stream, urgent) << p.str();
    EXPECT_EQ(p.urgent_streams.count(send->stream), 1u) << p.str();
    EXPECT_GE(urgent, loop.first_pool_stream + loop.pool_streams) << "not a stream of the pool";
    EXPECT_LT(urgent, p.streams);
    EXPECT_EQ(partial.landing, land->segment) << p.str();
    EXPECT_EQ(other->part, 1);
    EXPECT_EQ(other->adds, nullptr);
    EXPECT_EQ(computed->stream, other->stream);
    // the part goes once its GEMM's event is reached (the communicator waits for it)
    EXPECT_EQ(send->part_events, computed->event);
    EXPECT_EQ(send->phase, host_ir::ChunkPhase::send);
    EXPECT_EQ(land->phase, host_ir::ChunkPhase::land);
    EXPECT_EQ(send->stream, land->stream);
    EXPECT_EQ(landed->stream, land->stream);
    EXPECT_EQ(gemm_waits->event, landed->event);
    EXPECT_EQ(gemm_waits->unless_by_part, partial.value) << "skipped where the own GEMM waits for each part as it reads it";
    EXPECT_EQ(gemm_waits->stream, host_ir::kIterationStream);
    EXPECT_EQ(own->part, 0);
    EXPECT_TRUE(own->relative);
    EXPECT_EQ(own->stream, host_ir::kIterationStream);
    EXPECT_EQ(own->adds, partial.value) << "the own block's GEMM adds the landed parts";
    EXPECT_EQ(release->stream, own->stream) << "released behind the GEMM that adds them, on its stream";
    EXPECT_EQ(release->value, partial.value);
    // the communication stream waits for nothing of the own GEMM: no finish after it
    for (const auto& node : loop.body)
      if (auto* cm = std::get_if<host_ir::Communicate>(&node)) EXPECT_NE(cm->phase, host_ir::ChunkPhase::finish) << p.str();
  }
  // the whole loop, as --dump program prints it (CPU), a row-parallel linear with its bias
  auto f = parse_fusion(R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=1), w: f32[16, 16] @mesh[0, 1] shard(axis=1), b: f32[16] @mesh[0, 1] replicated) {
    y = linear(x, w, b) @mesh[0, 1] shard(axis=0)
    return y
  })", "landed_sum.fusion");
  EXPECT_EQ(compile_fusion(*f, Target::cpu, {.program = parse_pipeline_option("chunks=2")}).executable->program.str(), R"(program (cpu, 5 streams, streams 1, 4 urgent):
  Launch segment 0 [cpu_reference] (b) -> (b__share)
  Allocate y__computed: f32[8, 16]
  Allocate y: f32[4, 16]
  Record event 0 on stream 0
  Stream 1 waits for event 0
  Stream 2 waits for event 0
  Stream 3 waits for event 0
  Stream 4 waits for event 0
  For i in 0..2 (linear y__computed -> reduce_scatter: 2 chunks (--pipeline chunks=2)); chunked: x (blocks of 2) y__computed (blocks of 2; its own block is y, whose GEMM adds the other ranks' parts where they land: their sum in a scratch chunk where segment 2's communicator reduces them, this value's own block zeroed before the loop as this rank's term) y (rows)
    Launch segment 1 [cpu_reference] (x, w, b__share) -> (y__computed) on chunk i of block (rank + 1) mod 2 on stream 4
    Record event 1 on stream 4
    Communicate segment 2: reduce_scatter(axis=0, reduce="sum") y__computed: f32[8, 16] -> y: f32[4, 16], team @mesh[0, 1], sends 512 bytes (chunk i: send the parts of the other ranks, that of rank (r + j) mod n once event 1 + j - 1 is reached) on stream 1
    Communicate segment 2: reduce_scatter(axis=0, reduce="sum") y__computed: f32[8, 16] -> y: f32[4, 16], team @mesh[0, 1], sends 512 bytes (chunk i: the other ranks' parts of this rank's, left where they land) on stream 1
    Record event 2 on stream 1
    Stream (2 + i % 2) waits for event 2, unless the launches wait for each part of y__computed they read as it lands
    Launch segment 1 [cpu_reference] (x, w, b__share) -> (y__computed) on chunk i of its own block, adding the other ranks' parts of y__computed where they landed (added after it) on stream (2 + i % 2)
    Release chunk i of y__computed to its collective (nothing below reads where it landed) on stream (2 + i % 2)
  Record event 3 on stream 1
  Stream 0 waits for event 3
  Record event 4 on stream 2
  Stream 0 waits for event 4
  Record event 5 on stream 3
  Stream 0 waits for event 5
  Record event 6 on stream 4
  Stream 0 waits for event 6
)");
}

// A gathered value that another segment reads too (or the fusion returns) is gathered whole, as
// before: the plain all-gather into the buffer, no Release, the buffer always allocated.
TEST(PipelinedProgram, AllGatherGemm_GatheredValueReadElsewhere_IsGatheredIntoTheWholeBuffer) {
  auto f = parse_fusion(R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=0), w1: f32[32, 16] @mesh[0, 1] shard(axis=0)) {
    h = linear(x, w1) @mesh[0, 1] shard(axis=1)
    x_all = neg(x) @mesh[0, 1] replicated
    return h, x_all
  })", "read_elsewhere.fusion");
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#endif
    CompiledFusion c = compile_fusion(*f, target, {.program = parse_pipeline_option("chunks=2")});
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 1u) << p.str();
    EXPECT_EQ(loops[0]->values.at(1).value->name, "x__gathered");
    EXPECT_EQ(loops[0]->values.at(1).layout, host_ir::ChunkedValue::Layout::blocks) << p.str();
    for (const auto& node : loops[0]->body) {
      EXPECT_FALSE(std::holds_alternative<host_ir::Release>(node)) << p.str();
      if (auto* cm = std::get_if<host_ir::Communicate>(&node)) EXPECT_EQ(cm->phase, host_ir::ChunkPhase::whole) << p.str();
    }
    const host_ir::Allocate* gathered = allocation_of(p, "x__gathered");
    ASSERT_NE(gathered, nullptr) << p.str();
    EXPECT_EQ(gathered->unless_landed, -1) << p.str();
    std::string text = p.str();
    EXPECT_NE(text.find("x__gathered (blocks of 2; its own block is x)"), std::string::npos) << text;
    EXPECT_EQ(text.find("where it lands"), std::string::npos) << text;
  }
}

TEST(PipelinedProgram, OffOrAutoOnTheCpu_LeavesTheProgramUnchunked_AndDumpAfterNamesThePass) {
  for (const char* mode : {"off", "auto"}) {
    CompiledFusion c = compile_sequence_parallel(Target::cpu, mode);
    EXPECT_TRUE(loops_of(c.executable->program).empty()) << mode << "\n" << c.executable->program.str();
    ASSERT_EQ(c.after.size(), 5u);  // segment, lower, executables, side_streams, pipeline_collectives
    EXPECT_EQ(c.after[4].first, "pipeline_collectives");
    if (std::string(mode) == "off") EXPECT_EQ(c.after[4].second.rfind("(unchanged)", 0), 0u) << c.after[4].second;
  }
  // auto on the CPU says why it is off
  std::string text = compile_sequence_parallel(Target::cpu, "auto").executable->program.str();
  EXPECT_NE(text.find("# pipeline_collectives: --pipeline auto is off on the CPU (nothing overlaps there"), std::string::npos) << text;
}

std::vector<const host_ir::Choose*> choices_of(const Program& p) {
  std::vector<const host_ir::Choose*> out;
  for (const auto& node : p.nodes)
    if (auto* c = std::get_if<host_ir::Choose>(&node)) out.push_back(c);
  return out;
}

// On CUDA, auto keeps every way to run each pair (off, chunks, ring) and the cost model picks one
// per run: the program holds them all, each a complete program of its own.
TEST(PipelinedProgram, AutoOnCuda_HoldsOffChunksAndRingForTheCostModelToPickPerRun) {
#if !ALLOY_HAVE_CUDA
  ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#else
  CompiledFusion c = compile_sequence_parallel(Target::cuda, "auto");
  const Program& p = c.executable->program;
  auto choices = choices_of(p);
  ASSERT_EQ(choices.size(), 2u) << p.str();
  for (const host_ir::Choose* choose : choices) {
    EXPECT_EQ(choose->names, (std::vector<std::string>{"off", "chunks", "ring"}));
    ASSERT_EQ(choose->variants.size(), 3u);
    auto loop_in = [](const std::vector<host_ir::Node>& nodes) -> const ForChunks* {
      for (const auto& node : nodes)
        if (auto* f = std::get_if<ForChunks>(&node)) return f;
      return nullptr;
    };
    EXPECT_EQ(loop_in(choose->variants[0]), nullptr);
    ASSERT_NE(loop_in(choose->variants[1]), nullptr);
    EXPECT_EQ(loop_in(choose->variants[1])->schedule, ForChunks::Schedule::chunks);
    EXPECT_EQ(loop_in(choose->variants[1])->count, 16) << "the most chunks the model may choose";
    ASSERT_NE(loop_in(choose->variants[2]), nullptr);
    EXPECT_EQ(loop_in(choose->variants[2])->schedule, ForChunks::Schedule::ring);
  }
  EXPECT_NE(p.str().find("Choose per run (--pipeline auto: the cost model"), std::string::npos) << p.str();
  EXPECT_NE(p.str().find("last run: none yet"), std::string::npos) << p.str();
#endif
}

// The ring: one step a rank; the GEMM on the compute stream, the neighbour exchange on the
// communication stream (different ones, neither the run's), events between them; the all-gather
// ring never allocates the gathered rows (two scratch blocks instead), the reduce-scatter ring
// accumulates on the GEMM's stream and finishes in y.
TEST(PipelinedProgram, Ring_SendRecvAndGemmsOnDifferentStreams_NoGatheredBuffer) {
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();  // the CPU half ran; this one is reported skipped
#endif
    CompiledFusion c = compile_sequence_parallel(target, "ring");
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 2u) << p.str();
    for (const auto& node : p.nodes)
      if (auto* a = std::get_if<host_ir::Allocate>(&node)) EXPECT_NE(a->value->name, "x__gathered") << p.str();
    for (size_t k = 0; k < loops.size(); ++k) {
      const ForChunks* loop = loops[k];
      EXPECT_EQ(loop->schedule, ForChunks::Schedule::ring);
      EXPECT_EQ(loop->parts, 2);
      std::set<int> gemm_streams, exchange_streams, accumulate_streams;
      int gemms = 0, previous_step_waits = 0;
      for (const auto& node : loop->body) {
        if (auto* l = std::get_if<host_ir::Launch>(&node)) {
          ++gemms;
          gemm_streams.insert(l->stream);
          EXPECT_EQ(p.segmentation.segments.at(l->segment).scheduler, target == Target::cuda ? SchedulerKind::matmul : SchedulerKind::cpu_reference);
        }
        if (auto* sr = std::get_if<host_ir::SendRecv>(&node)) exchange_streams.insert(sr->stream);
        if (auto* a = std::get_if<host_ir::Accumulate>(&node)) accumulate_streams.insert(a->stream);
        if (auto* w = std::get_if<host_ir::Wait>(&node); w && w->previous_step) ++previous_step_waits;
        EXPECT_FALSE(std::holds_alternative<host_ir::Allocate>(node)) << p.str();
        EXPECT_FALSE(std::holds_alternative<host_ir::Communicate>(node)) << "a ring has no collective\n" << p.str();
      }
      EXPECT_EQ(gemms, 1) << "one GEMM a step\n" << p.str();
      ASSERT_EQ(gemm_streams.size(), 1u);
      ASSERT_EQ(exchange_streams.size(), 1u) << p.str();
      EXPECT_GT(*gemm_streams.begin(), 0);
      EXPECT_GT(*exchange_streams.begin(), 0);
      EXPECT_NE(*gemm_streams.begin(), *exchange_streams.begin()) << p.str();
      EXPECT_GE(previous_step_waits, 1) << p.str();
      if (k == 1) EXPECT_EQ(accumulate_streams, gemm_streams) << p.str();
      else EXPECT_TRUE(accumulate_streams.empty()) << p.str();
    }
    std::string text = p.str();
    EXPECT_NE(text.find("Ring s in 0..2 over the team (all_gather -> linear h: ring, --pipeline ring)"), std::string::npos) << text;
    EXPECT_NE(text.find("x__gathered (two scratch blocks; x at step 0)"), std::string::npos) << text;
    EXPECT_NE(text.find("y__computed (two scratch blocks; y at the last step)"), std::string::npos) << text;
    EXPECT_NE(text.find("SendRecv x__gathered of step s to rank + 1"), std::string::npos) << text;
    EXPECT_NE(text.find("Accumulate y__computed += the running sum received"), std::string::npos) << text;
  }
}

// A gathered value that something else reads too has no ring (the ring never holds it whole):
// the pair stays as lowered and the dump says why; --pipeline ring with nothing to pipeline says so.
// A matmul of a 3-D activation by a matrix is rows along axis 0, as a linear of one is: both
// pairs of a [B, S, C] MLP written with matmul pipeline (held-out round, session 37: only 2-D
// matmuls did); a batched matmul (a 3-D second operand) is no row-wise GEMM and stays.
TEST(PipelinedProgram, MatmulOfA3dActivationByAMatrix_IsPipelinedAsALinearIs) {
  auto f = parse_fusion(R"(fusion f(x: f32[8, 6, 32] @mesh[0, 1] shard(axis=0), w1: f32[32, 48] @mesh[0, 1] shard(axis=1), w2: f32[48, 32] @mesh[0, 1] shard(axis=0)) {
    h = matmul(x, w1) @mesh[0, 1] shard(axis=2)
    g = relu(h)
    y = matmul(g, w2) @mesh[0, 1] shard(axis=0)
    return y
  })", "mm3.fusion");
  CompiledFusion c = compile_fusion(*f, Target::cpu, {.program = parse_pipeline_option("chunks=2")});
  std::string text = c.executable->program.str();
  ASSERT_EQ(loops_of(c.executable->program).size(), 2u) << text;
  EXPECT_NE(text.find("For i in 0..2 (all_gather -> matmul h: 2 chunks"), std::string::npos) << text;
  EXPECT_NE(text.find("For i in 0..2 (matmul y__computed -> reduce_scatter: 2 chunks"), std::string::npos) << text;
  auto batched = parse_fusion(R"(fusion f(x: f32[4, 6, 32] @mesh[0, 1] shard(axis=0), w: f32[4, 32, 48] @mesh[0, 1] shard(axis=0)) {
    h = matmul(x, w) @mesh[0, 1] shard(axis=2)
    return h
  })", "bmm.fusion");
  CompiledFusion b = compile_fusion(*batched, Target::cpu, {.program = parse_pipeline_option("chunks=2")});
  EXPECT_TRUE(loops_of(b.executable->program).empty()) << b.executable->program.str();
}

TEST(PipelinedProgram, Ring_WhereItCannotRun_SaysWhyInTheDump) {
  auto f = parse_fusion(R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=0), w1: f32[32, 16] @mesh[0, 1] shard(axis=0)) {
    h = linear(x, w1) @mesh[0, 1] shard(axis=1)
    x_all = neg(x) @mesh[0, 1] replicated
    return h, x_all
  })", "ring.fusion");
  CompiledFusion c = compile_fusion(*f, Target::cpu, {.program = parse_pipeline_option("ring")});
  std::string text = c.executable->program.str();
  EXPECT_TRUE(loops_of(c.executable->program).empty()) << text;
  EXPECT_NE(text.find("stays unpipelined: 'x__gathered' is read by another segment"), std::string::npos) << text;
  // a GEMM -> all_reduce pair has no ring
  auto megatron = parse_fusion_file(testing::source_path("examples/tp_mlp.fusion"));
  CompiledFusion m = compile_fusion(*megatron, Target::cpu, {.program = parse_pipeline_option("ring")});
  std::string unpipelined = m.executable->program.str();
  EXPECT_TRUE(loops_of(m.executable->program).empty()) << unpipelined;
  EXPECT_NE(unpipelined.find("# pipeline_collectives: linear y__partial -> all_reduce stays unpipelined: a GEMM -> all_reduce pair has "
                             "no ring (--pipeline chunks=N pipelines it)"),
            std::string::npos)
      << unpipelined;
  auto plain = parse_fusion(R"(fusion f(x: f32[8, 16] @mesh[0, 1] replicated) {
    y = exp(x)
    return y
  })", "plain.fusion");
  std::string none = compile_fusion(*plain, Target::cpu, {.program = parse_pipeline_option("ring")}).executable->program.str();
  EXPECT_NE(none.find("# pipeline_collectives: nothing to pipeline"), std::string::npos) << none;
}

CompiledFusion compile_example(const std::string& name, Target target, const std::string& pipeline) {
  auto f = parse_fusion_file(testing::source_path("examples/" + name + ".fusion"));
  return compile_fusion(*f, target, {.program = parse_pipeline_option(pipeline)});
}

// The loop's body of a GEMM -> all_reduce pair: the `lead` GEMMs that make its rows and the GEMM
// of chunk i on the compute pool, an event, the all-reduce of chunk i on the communication stream
// (neither the run's stream nor the pool's); nothing allocated inside the loop; every chunked
// value cut by its rows (the lead's input and what each lead GEMM makes, the partial sums, the
// result).
void expect_gemm_all_reduce_loop(const Program& p, const ForChunks& loop, int chunks, const std::string& partial, int lead = 0) {
  EXPECT_EQ(loop.schedule, ForChunks::Schedule::chunks);
  EXPECT_EQ(loop.count, chunks);
  EXPECT_EQ(loop.pool_streams, 2);
  ASSERT_EQ(loop.values.size(), 3u + size_t(lead)) << p.str();
  for (const host_ir::ChunkedValue& v : loop.values) EXPECT_EQ(v.layout, host_ir::ChunkedValue::Layout::rows) << v.value->name;
  EXPECT_EQ(loop.values[size_t(lead) + 1].value->name, partial);
  ASSERT_EQ(loop.body.size(), 4u + size_t(lead)) << p.str();
  for (int j = 0; j <= lead; ++j) {
    auto* gemm = std::get_if<host_ir::Launch>(&loop.body[size_t(j)]);
    ASSERT_TRUE(gemm) << p.str();
    EXPECT_EQ(gemm->stream, host_ir::kIterationStream);
    EXPECT_EQ(gemm->part, -1) << "no blocks: every rank computes every row";
    // each GEMM reads the value chunked before what it makes
    const Segment& s = p.segmentation.segments.at(size_t(gemm->segment));
    EXPECT_EQ(s.outputs.at(0), loop.values[size_t(j) + 1].value) << p.str();
    EXPECT_NE(std::find(s.inputs.begin(), s.inputs.end(), loop.values[size_t(j)].value), s.inputs.end()) << p.str();
  }
  auto* record = std::get_if<host_ir::Record>(&loop.body[size_t(lead) + 1]);
  auto* wait = std::get_if<host_ir::Wait>(&loop.body[size_t(lead) + 2]);
  auto* all_reduce = std::get_if<host_ir::Communicate>(&loop.body[size_t(lead) + 3]);
  ASSERT_TRUE(record && wait && all_reduce) << p.str();
  EXPECT_EQ(record->stream, host_ir::kIterationStream);
  EXPECT_EQ(wait->stream, all_reduce->stream);
  EXPECT_EQ(wait->event, record->event);
  EXPECT_EQ(p.segmentation.segments.at(size_t(all_reduce->segment)).ops.at(0)->kind, OpKind::all_reduce);
  EXPECT_GT(all_reduce->stream, 0);
  EXPECT_EQ(all_reduce->stream, loop.first_pool_stream - 1);
}

// Issue 25 item 6: the Megatron MLP's row-parallel linear (GEMM -> all_reduce of its partial sums)
// becomes a loop over chunks of the token rows, the all-reduce of chunk i beside the GEMM of
// chunk i + 1; at chunks=2 and 4, on both targets.
TEST(PipelinedProgram, MegatronMlp_ChunksTheGemmAndAllReducesEachChunkBesideTheNext) {
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();  // the CPU half ran; this one is reported skipped
#endif
    for (int chunks : {2, 4}) {
      CompiledFusion c = compile_example("tp_mlp", target, "chunks=" + std::to_string(chunks));
      const Program& p = c.executable->program;
      auto loops = loops_of(p);
      ASSERT_EQ(loops.size(), 1u) << p.str();
      expect_gemm_all_reduce_loop(p, *loops[0], chunks, "y__partial");
      // the whole buffers before the loop, on the run's stream; the run's stream joins every other after it
      size_t loop_at = 0, allocated_before = 0, joins_after = 0;
      while (!std::holds_alternative<ForChunks>(p.nodes[loop_at])) ++loop_at;
      for (size_t i = 0; i < loop_at; ++i)
        if (auto* a = std::get_if<host_ir::Allocate>(&p.nodes[i]); a && (a->value->name == "y" || a->value->name == "y__partial"))
          ++allocated_before;
      for (size_t i = loop_at + 1; i < p.nodes.size(); ++i)
        if (auto* w = std::get_if<host_ir::Wait>(&p.nodes[i]); w && w->stream == 0) ++joins_after;
      EXPECT_EQ(allocated_before, 2u) << p.str();
      EXPECT_EQ(joins_after, 3u) << p.str();
    }
  }
  // the whole program, as --dump program prints it (CPU)
  EXPECT_EQ(compile_example("tp_mlp", Target::cpu, "chunks=4").executable->program.str(), R"(program (cpu, 4 streams):
  Launch segment 0 [cpu_reference] (x, w_fc, b_fc) -> (h)
  Launch segment 1 [cpu_reference] (h) -> (g)
  Launch segment 2 [cpu_reference] (b_proj) -> (b_proj__share)
  Allocate y__partial: f32[T, 256]
  Allocate y: f32[T, 256]
  Record event 0 on stream 0
  Stream 1 waits for event 0
  Stream 2 waits for event 0
  Stream 3 waits for event 0
  For i in 0..4 (linear y__partial -> all_reduce: 4 chunks (--pipeline chunks=4)); chunked: g (rows) y__partial (rows) y (rows)
    Launch segment 3 [cpu_reference] (g, w_proj, b_proj__share) -> (y__partial) on stream (2 + i % 2)
    Record event 1 on stream (2 + i % 2)
    Stream 1 waits for event 1
    Communicate segment 4: all_reduce(reduce="sum") y__partial: f32[T, 256] -> y: f32[T, 256], team @mesh[0, 1], sends 1024*T bytes (chunk i) on stream 1
  Record event 2 on stream 1
  Stream 0 waits for event 2
  Record event 3 on stream 2
  Stream 0 waits for event 3
  Record event 4 on stream 3
  Stream 0 waits for event 4
)");
}

// off keeps the program as lowered (the pass reports "(unchanged)"), and so does auto on the CPU,
// which says why.
TEST(PipelinedProgram, MegatronMlp_OffKeepsThePlainProgram) {
  for (const char* mode : {"off", "auto"}) {
    CompiledFusion c = compile_example("tp_mlp", Target::cpu, mode);
    const Program& p = c.executable->program;
    EXPECT_TRUE(loops_of(p).empty()) << p.str();
    EXPECT_EQ(p.streams, 1);
    ASSERT_EQ(c.after.size(), 5u);
    if (std::string(mode) == "off") EXPECT_EQ(c.after[4].second.rfind("(unchanged)", 0), 0u) << c.after[4].second;
    else EXPECT_NE(p.str().find("# pipeline_collectives: --pipeline auto is off on the CPU"), std::string::npos) << p.str();
    EXPECT_NE(p.str().find(R"(  Launch segment 3 [cpu_reference] (g, w_proj, b_proj__share) -> (y__partial)
  Communicate segment 4: all_reduce(reduce="sum") y__partial: f32[T, 256] -> y: f32[T, 256], team @mesh[0, 1], sends 1024*T bytes
)"), std::string::npos) << p.str();
  }
}

// On CUDA, auto holds off and the chunked loop (no ring for an all-reduce) for the cost model.
// Under --pipeline auto the GEMM -> all-reduce pair stays as lowered, saying why (its overlap
// with NCCL's kernels measured too small to risk); chunks=N pipelines it (above).
TEST(PipelinedProgram, MegatronMlp_AutoOnCuda_LeavesTheAllReduceAsMeasured) {
#if !ALLOY_HAVE_CUDA
  ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#else
  CompiledFusion c = compile_example("tp_mlp", Target::cuda, "auto");
  const Program& p = c.executable->program;
  EXPECT_TRUE(choices_of(p).empty()) << p.str();
  EXPECT_TRUE(loops_of(p).empty()) << p.str();
  EXPECT_NE(p.str().find("# pipeline_collectives: linear y__partial -> all_reduce stays unpipelined under --pipeline auto (NCCL's "
                         "all-reduce beside the GEMM chunks measured slower than off at small widths, at most 5% faster at large "
                         "ones; --pipeline chunks=N pipelines it)"),
            std::string::npos)
      << p.str();
#endif
}

// Partial sums that another segment reads too (here a reduce-scatter for a consumer that wants
// them sharded) stay as lowered, and the dump says why.
TEST(PipelinedProgram, GemmAllReduce_PartialSumsReadElsewhere_StayUnpipelinedWithANote) {
  auto f = parse_fusion(R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=1), w: f32[16, 16] @mesh[0, 1] shard(axis=1)) {
    y = linear(x, w)
    s = mul(y, 2.0)
    z = add(y, 1.0) @mesh[0, 1] shard(axis=0)
    return s, z
  })", "read_elsewhere.fusion");
  CompiledFusion c = compile_fusion(*f, Target::cpu, {.program = parse_pipeline_option("chunks=2")});
  std::string text = c.executable->program.str();
  EXPECT_TRUE(loops_of(c.executable->program).empty()) << text;
  EXPECT_NE(text.find("# pipeline_collectives: linear y -> all_reduce stays unpipelined: 'y' is read by another "
                      "segment too (only partial sums that the all_reduce alone reads are pipelined)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("nothing to pipeline"), std::string::npos) << text;
}

// What leads a GEMM -> all_reduce loop (issue 25 item 6, the tokens split across the whole
// MLP): the row-wise GEMMs that make its rows, each over rows the previous one made, their
// results whole after the loop (one is returned); nodes between that read nothing they make (the
// share of the bias) run before the loop. A generated kernel between (a GELU of its own, a sum
// over the rows) ends the lead: the pair runs alone.
TEST(PipelinedProgram, GemmAllReduce_LedByTheRowWiseGemmsThatMakeItsRows) {
  const std::string head = R"(fusion f(x: f32[8, 16] @mesh[0, 1] replicated, w1: f32[32, 16] @mesh[0, 1] shard(axis=0),
             b1: f32[32] @mesh[0, 1] shard(axis=0), w2: f32[16, 32] @mesh[0, 1] shard(axis=1), b2: f32[16] @mesh[0, 1] replicated) {
    h = linear(x, w1, b1)
)";
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#endif
    auto led = parse_fusion(head + R"(    y = linear(h, w2, b2)
    return y, h
  })", "led.fusion");
    CompiledFusion c = compile_fusion(*led, target, {.program = parse_pipeline_option("chunks=2")});
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 1u) << p.str();
    expect_gemm_all_reduce_loop(p, *loops[0], 2, "y__partial", 1);
    EXPECT_EQ(loops[0]->values[0].value->name, "x");
    EXPECT_NE(p.str().find("(linear h -> linear y__partial -> all_reduce: 2 chunks"), std::string::npos) << p.str();
    size_t loop_at = 0, share_before = 0, h_before = 0;
    while (!std::holds_alternative<ForChunks>(p.nodes[loop_at])) ++loop_at;
    for (size_t i = 0; i < loop_at; ++i) {
      if (auto* a = std::get_if<host_ir::Allocate>(&p.nodes[i])) h_before += a->value->name == "h";
      if (auto* l = std::get_if<host_ir::Launch>(&p.nodes[i]))
        share_before += p.segmentation.segments.at(size_t(l->segment)).outputs.at(0)->name == "b2__share";
    }
    EXPECT_EQ(h_before, 1u) << "h whole (returned)\n" << p.str();
    EXPECT_EQ(share_before, 1u) << p.str();
  }
  for (const char* between : {"    g = relu(h)\n    y = linear(g, w2, b2)\n    return y\n", "    s = sum(h, dims=[1])\n    y = linear(h, w2, b2)\n    return y, s\n"}) {
    auto stopped = parse_fusion(head + between + "  }", "stopped.fusion");
    CompiledFusion c = compile_fusion(*stopped, Target::cpu, {.program = parse_pipeline_option("chunks=2")});
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 1u) << p.str();
    expect_gemm_all_reduce_loop(p, *loops[0], 2, "y__partial");
    EXPECT_NE(p.str().find("(linear y__partial -> all_reduce: 2 chunks"), std::string::npos) << p.str();
  }
}

// The column-parallel fc1's backward (dx = dh @ w_fc, partial sums all-reduced) is the same pair.
TEST(PipelinedProgram, MegatronMlpBackward_TheInputGradientsGemmAndAllReduceArePipelined) {
  for (Target target : {Target::cpu, Target::cuda}) {
#if !ALLOY_HAVE_CUDA
    if (target == Target::cuda) ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#endif
    CompiledFusion c = compile_example("tp_mlp_backward", target, "chunks=4");
    const Program& p = c.executable->program;
    auto loops = loops_of(p);
    ASSERT_EQ(loops.size(), 1u) << p.str();
    expect_gemm_all_reduce_loop(p, *loops[0], 4, "dx__partial");
    EXPECT_NE(p.str().find("(matmul dx__partial -> all_reduce: 4 chunks (--pipeline chunks=4)); chunked: dh (rows) dx__partial (rows) dx (rows)"),
              std::string::npos)
        << p.str();
  }
}

TEST(PipelinedProgram, BadPipelineOption_IsAUserErrorSayingWhatIsExpected) {
  for (const char* bad : {"", "on", "rings", "ring=2", "chunks=", "chunks=0", "chunks=-2", "chunks=2x", "chunks=99999"}) {
    std::string error = "no error";
    try {
      parse_pipeline_option(bad);
    } catch (const UserError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("--pipeline"), std::string::npos) << bad << ": " << error;
  }
  EXPECT_EQ(parse_pipeline_option("chunks=8").chunks, 8);
  EXPECT_EQ(parse_pipeline_option("ring").pipeline, host_ir::ProgramPassOptions::Pipeline::ring);
}

}  // namespace
}  // namespace alloy

namespace alloy {
namespace {

// The pipeline's steps past the fusion passes are named, kept and timed: after=segment is the
// segmentation, after=lower the program before its passes, and `--dump steps` lists them all.
TEST(Pipeline, EveryStepIsNamedKeptAndTimed) {
  auto f = parse_fusion(testing::read_file(testing::source_path("examples/mlp.fusion")), "mlp.fusion");
  CompiledFusion c = compile_fusion(*f, Target::cuda);
  std::vector<std::string_view> names;
  for (auto& [name, text] : c.after) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string_view>{"segment", "lower", "executables", "side_streams", "pipeline_collectives"}));
  EXPECT_EQ(c.after[0].second, c.executable->program.segmentation.str());
  EXPECT_NE(c.after[1].second.find("Launch segment 0 [matmul]"), std::string::npos) << c.after[1].second;
  EXPECT_NE(c.after[2].second.find("segment 0 [matmul]: cuda executable"), std::string::npos) << c.after[2].second;
  std::vector<std::string_view> timed;
  for (auto& [name, us] : c.step_us) {
    timed.push_back(name);
    EXPECT_GE(us, 0.0) << name;
  }
  EXPECT_EQ(timed, (std::vector<std::string_view>{"decompose_composites", "unify_extents", "segment", "lower", "executables",
                                                  "side_streams", "pipeline_collectives"}));
  EXPECT_NE(c.steps_report().find("executables"), std::string::npos);
  for (std::string_view step : {"segment", "lower", "executables"}) EXPECT_TRUE(is_lowered_step(step)) << step;
  EXPECT_FALSE(is_lowered_step("decompose_composites"));
}

}  // namespace
}  // namespace alloy
