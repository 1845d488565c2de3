// The cost model of --pipeline auto (host_ir/cost_model.h): its formula's times and choices for
// given machine numbers.
#include "alloy/host_ir/cost_model.h"

#include <gtest/gtest.h>

namespace alloy::host_ir {
namespace {

// A round machine: 10 us a hop or collective plus 1000 bytes/us (1 GB/s); GEMMs at 1e6 flops/us
// (1 TFLOP/s) with no ramp and no launch cost, overlapping.
MachineCosts round_machine() {
  MachineCosts c;
  c.key = "test machine";
  c.source = "given";
  c.hop_latency_us = 10, c.hop_bytes_per_us = 1000;
  c.gather_latency_us = 10, c.gather_bytes_per_us = 1000;
  c.gemm_flops_per_us = 1e6, c.gemm_half_rows = 0, c.launch_us = 0;
  return c;
}

PairShape shape(int parts, int64_t rows, int64_t k, int64_t n, int64_t bytes) {
  PairShape s;
  s.parts = parts, s.rows = rows, s.k = k, s.n = n, s.block_bytes = bytes;
  return s;
}

TEST(CostModel, Formula_TimesOfEachCandidate) {
  MachineCosts c = round_machine();
  // a block: 1000 rows, K = N = 500: a GEMM of one block is 2*1000*500*500/1e6 = 500 us; 490000
  // bytes on the link: 10 + 490 = 500 us
  PairShape s = shape(2, 1000, 500, 500, 490000);
  EXPECT_DOUBLE_EQ(gemm_us(c, 1000, s), 500);
  EXPECT_DOUBLE_EQ(off_us(c, s), 500 + 1000);                        // collective, then the GEMM over both blocks
  // all-gather -> GEMM, chunks=2: c = 10 + 245 a chunk, g = 250 a block's chunk; the own block's
  // chunk runs at once, the other's once it arrived: chunk 0 ends at max(250, 255) + 250 = 505,
  // chunk 1 at max(505 + 250, 510) + 250 = 1005
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 2), 1005);
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 1), 1000);  // max(500, 500) + 500: the own block hides the link
  PairShape rs = s;
  rs.kind = PairShape::Kind::gemm_reduce_scatter;
  // the other block's chunk (250), sent (255) while the own one runs: 505, then 1005
  EXPECT_DOUBLE_EQ(chunks_us(c, rs, 2), 1005);
  EXPECT_DOUBLE_EQ(chunks_us(c, rs, 1), 1000);  // the send (500) from 500 to 1000, beside the own GEMM
  EXPECT_DOUBLE_EQ(ring_us(c, s), 500 + 1 * std::max(500.0, 500.0)); // g + (n - 1) * max(h, g)
  c.overlaps = false;
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 2), 2 * (255 + 500));
  EXPECT_DOUBLE_EQ(ring_us(c, s), 500 + 500 + 500);
}

TEST(CostModel, BalancedLinkAndGemm_PipelinesAndSaysWhyWithTheNumbers) {
  MachineCosts c = round_machine();
  PipelineChoice choice = choose_pipeline(c, shape(2, 1000, 500, 500, 490000));
  EXPECT_NE(choice.variant, PipelineChoice::Variant::off) << choice.why;
  EXPECT_NE(choice.why.find("off 1500 us"), std::string::npos) << choice.why;
  EXPECT_NE(choice.why.find("ring 1000 us"), std::string::npos) << choice.why;
  EXPECT_NE(choice.why.find("1000 rows a block, K 500, N 500"), std::string::npos) << choice.why;
  EXPECT_NE(choice.why.find("test machine, given"), std::string::npos) << choice.why;
}

TEST(CostModel, ExpensiveLaunches_SmallChunksLose) {
  MachineCosts c = round_machine();
  c.launch_us = 400;  // each GEMM launch costs almost a block's GEMM
  PairShape s = shape(2, 1000, 500, 500, 490000);
  PipelineChoice choice = choose_pipeline(c, s);
  // chunks=S runs 2 * S GEMMs: only few chunks can pay for their launches; 16 never
  EXPECT_TRUE(choice.variant == PipelineChoice::Variant::ring || choice.chunks <= 2) << choice.why;
  EXPECT_GT(chunks_us(c, s, 16), chunks_us(c, s, 2));
}

TEST(CostModel, ALatencyBoundCollective_AndAFreeHop_PicksTheRing) {
  MachineCosts c = round_machine();
  c.gather_latency_us = 2000;  // every collective pays 2 ms; a neighbour hop does not
  PipelineChoice choice = choose_pipeline(c, shape(4, 1000, 500, 500, 490000));
  EXPECT_EQ(choice.variant, PipelineChoice::Variant::ring) << choice.why;
  EXPECT_EQ(choice.why.rfind("ring (model: ", 0), 0u) << choice.why;
}

TEST(CostModel, ASlowLinkAndTinyGemms_OrNothingOverlapping_StaysOff) {
  MachineCosts c = round_machine();
  c.gather_latency_us = 1000, c.hop_latency_us = 1500;  // latency dominates: more messages only cost more
  EXPECT_EQ(choose_pipeline(c, shape(2, 8, 16, 16, 256)).variant, PipelineChoice::Variant::off);
  MachineCosts serial = round_machine();
  serial.overlaps = false;
  for (int64_t rows : {8, 1000, 100000}) {
    PipelineChoice choice = choose_pipeline(serial, shape(4, rows, 500, 500, rows * 1000));
    EXPECT_EQ(choice.variant, PipelineChoice::Variant::off) << choice.why;
    EXPECT_NE(choice.why.find("nothing overlaps"), std::string::npos) << choice.why;
  }
}

TEST(CostModel, ChunksNeverExceedTheRows_AndAPairWithoutARingNeverGetsOne) {
  MachineCosts c = round_machine();
  c.gather_latency_us = 0;
  PairShape s = shape(2, 3, 500, 500, 3000);
  s.ring_ok = false;
  PipelineChoice choice = choose_pipeline(c, s);
  EXPECT_NE(choice.variant, PipelineChoice::Variant::ring) << choice.why;
  EXPECT_LE(choice.chunks, 3) << choice.why;
  EXPECT_EQ(choice.why.find("chunks=4"), std::string::npos) << choice.why;
  EXPECT_EQ(choice.why.find("ring"), std::string::npos) << choice.why;
  PairShape one = shape(1, 1000, 500, 500, 490000);  // a team of one has no ring
  EXPECT_NE(choose_pipeline(c, one).variant, PipelineChoice::Variant::ring);
}

// GEMM -> all-reduce (the Megatron MLP's row-parallel linear): every rank computes every row, and
// a ring all-reduce of B bytes is a reduce-scatter and an all-gather of B / n a rank, each costed
// as the measured all-gather of that block: 2 coll(B / n).
PairShape all_reduce_shape(int parts, int64_t rows, int64_t k, int64_t n, int64_t bytes) {
  PairShape s = shape(parts, rows, k, n, bytes);
  s.kind = PairShape::Kind::gemm_all_reduce;
  s.ring_ok = false;
  return s;
}

TEST(CostModel, GemmAllReduce_Formula) {
  MachineCosts c = round_machine();
  // 1000 rows, K = N = 500: the GEMM is 500 us; P is 980000 bytes, 490000 a rank's share:
  // all-reduce = 2 * (10 + 490) = 1000 us
  PairShape s = all_reduce_shape(2, 1000, 500, 500, 980000);
  EXPECT_DOUBLE_EQ(all_reduce_us(c, 980000, 2), 1000);
  EXPECT_DOUBLE_EQ(all_reduce_us(c, 980000, 1), 0);  // a team of one moves nothing
  EXPECT_DOUBLE_EQ(off_us(c, s), 500 + 1000);        // the GEMM over every row, then the all-reduce
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 1), 1500);        // one chunk overlaps nothing
  // chunks=2: g = 250, a = 2 * (10 + 245) = 510: chunk 0's all-reduce from 250 to 760, chunk 1's
  // GEMM ends at 500 beside it, its all-reduce from 760 to 1270: only the last one is exposed
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 2), 1270);
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 4), 125 + 4 * 265);
  // three ranks: each moves 2 (n - 1) / n of P, costed as 2 all-gathers of P / 3
  EXPECT_DOUBLE_EQ(all_reduce_us(c, 990000, 3), 2 * (10 + 330));
  c.overlaps = false;
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 2), 2 * (250 + 510));
}

TEST(CostModel, GemmAllReduce_MoreChunksHideMoreUntilTheirLatencyDominates_NeverARing) {
  MachineCosts c = round_machine();
  PairShape s = all_reduce_shape(2, 1000, 500, 500, 980000);
  // 1500, 1270, 1185, 1202.5, 1331.25: the exposed last chunk shrinks, each chunk's latency adds up
  EXPECT_LT(chunks_us(c, s, 2), off_us(c, s));
  EXPECT_LT(chunks_us(c, s, 4), chunks_us(c, s, 2));
  EXPECT_GT(chunks_us(c, s, 8), chunks_us(c, s, 4));
  EXPECT_GT(chunks_us(c, s, 16), chunks_us(c, s, 8));
  PipelineChoice choice = choose_pipeline(c, s);
  EXPECT_EQ(choice.variant, PipelineChoice::Variant::chunks) << choice.why;
  EXPECT_EQ(choice.chunks, 4) << choice.why;
  EXPECT_EQ(choice.why.rfind("chunks=4 (model: off 1500 us, chunks=1 1500 us, chunks=2 1270 us, chunks=4 1185 us", 0), 0u) << choice.why;
  EXPECT_NE(choice.why.find("1000 rows (every rank's), K 500, N 500, 980000 bytes all-reduced, 2 ranks"), std::string::npos) << choice.why;
  EXPECT_EQ(choice.why.find("ring"), std::string::npos) << choice.why;
  s.ring_ok = true;  // even where a caller says it may: an all-reduce pair has no ring program
  EXPECT_NE(choose_pipeline(c, s).variant, PipelineChoice::Variant::ring);
  // expensive launches: many small GEMMs lose
  c.launch_us = 200;
  EXPECT_LE(choose_pipeline(c, s).chunks, 2) << choose_pipeline(c, s).why;
}

TEST(CostModel, GemmAllReduce_NegligibleCommunication_StaysOff) {
  MachineCosts c = round_machine();
  // 1000 bytes to all-reduce beside a 500 us GEMM: chunks could win 0.5 us at most, less than the 3% margin
  for (double latency : {0.0, 10.0}) {
    c.gather_latency_us = latency;
    PipelineChoice choice = choose_pipeline(c, all_reduce_shape(2, 1000, 500, 500, 1000));
    EXPECT_EQ(choice.variant, PipelineChoice::Variant::off) << choice.why;
  }
  // and where nothing overlaps (the CPU), whatever the sizes
  MachineCosts serial = round_machine();
  serial.overlaps = false;
  for (int64_t rows : {8, 1000, 100000})
    EXPECT_EQ(choose_pipeline(serial, all_reduce_shape(4, rows, 500, 500, rows * 2000)).variant, PipelineChoice::Variant::off);
}

}  // namespace
}  // namespace alloy::host_ir
