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
  // all-gather -> GEMM, chunks=2: c = 10 + 245 a chunk, g = 250 a block's chunk; chunk i's [own,
  // other] on compute stream i % 2, the device running the earliest ready launch: own 0 (0-250),
  // own 1 (250-500, while the other's chunk 0, here at 255, waits), other 0 (500-750), other 1
  // (here at 510; 750-1000)
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 2), 1000);
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 1), 1000);  // max(500, 500) + 500: the own block hides the link
  PairShape rs = s;
  rs.kind = PairShape::Kind::gemm_reduce_scatter;
  // chunk i's [other, own]: other 0 (0-250) sent, lands at 505; other 1 (250-500) lands at 760;
  // the own launches add what landed: own 0 (505-755), own 1 (760-1010)
  EXPECT_DOUBLE_EQ(chunks_us(c, rs, 2), 1010);
  // one chunk hides nothing: the own GEMM waits for the other's partial sums to land (off's time)
  EXPECT_DOUBLE_EQ(chunks_us(c, rs, 1), 1500);
  EXPECT_DOUBLE_EQ(ring_us(c, s), 500 + 1 * std::max(500.0, 500.0)); // g + (n - 1) * max(h, g)
  c.overlaps = false;
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 2), 2 * (255 + 500));
  EXPECT_DOUBLE_EQ(ring_us(c, s), 500 + 500 + 500);
}

// Four ranks, the link three times a block's GEMM: by NCCL, the other blocks' GEMMs wait for the
// whole chunk, and a reduce-scatter's parts go once all are made; by the copy engines each GEMM
// waits for its own block, which land one by one (the nearest first), each part goes once its
// own GEMM is done, and the own GEMM starts once the first has landed.
TEST(CostModel, ByTheCopyEngines_EachBlockMovesOnItsOwn) {
  MachineCosts c = round_machine();
  PairShape s = shape(4, 1000, 500, 500, 1490000);  // a block's GEMM 500 us; the chunk's link 10 + 1490 = 1500 us
  // own 0-500; the three others once the chunk landed at 1500: 1500-3000
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 1), 3000);
  c.chunks_take_no_sms = true;
  // blocks land at 500, 1000 and 1500: each found landed when its turn comes (500, 1000, 1500)
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 1), 2000);
  // two chunks: chunk 0's blocks land at 250, 500, 750, chunk 1's at 1000, 1250, 1500; own 0
  // (0-250), own 1 (250-500), others 0 (500-1250), others 1 (1250-2000)
  EXPECT_DOUBLE_EQ(chunks_us(c, s, 2), 2000);
  // GEMM -> reduce-scatter, one chunk: the others (0-1500); by the copy engines each part goes when
  // its GEMM ends (500-1000, 1000-1500, 1500-2000), the own GEMM takes the first as its C
  // (1500-2000) and adds the last once it landed (2000) ...
  PairShape rs = s;
  rs.kind = PairShape::Kind::gemm_reduce_scatter;
  EXPECT_DOUBLE_EQ(chunks_us(c, rs, 1), 2000);
  // two ranks: one block a chunk, the same times either way
  PairShape two = shape(2, 1000, 500, 500, 1490000);
  double by_part = chunks_us(c, two, 2);
  c.chunks_take_no_sms = false;
  EXPECT_DOUBLE_EQ(chunks_us(c, two, 2), by_part);
  // ... by NCCL all three once the last GEMM is done (1500-3000), the own GEMM 3000-3500
  EXPECT_DOUBLE_EQ(chunks_us(c, rs, 1), 3500);
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
  // where the chunks go by the copy engines, the ring (NCCL kernels beside its GEMMs) is no candidate
  c.chunks_take_no_sms = true;
  choice = choose_pipeline(c, shape(4, 1000, 500, 500, 490000));
  EXPECT_NE(choice.variant, PipelineChoice::Variant::ring) << choice.why;
  EXPECT_EQ(choice.why.find("ring "), std::string::npos) << choice.why;
  EXPECT_NE(choice.why.find("chunks by the copy engines (no ring)"), std::string::npos) << choice.why;
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

// The rates measured on two H200s (copy engines between them) and issue 25's pairs at
// 8192x8192x28672 bf16: the forms the model picks are those that measured fastest there
// (bench/results/2026-11-27-NVIDIA_H200-x2-issue25-notes.md): all-gather -> GEMM chunks=1
// (2569 us; chunks=2 2505-2548, off 2725-2782), GEMM -> reduce-scatter chunks=2 (2563-2629;
// chunks=1, whose own GEMM waits for the landing, 2763-2778, off 2738-2840, the ring 2851).
// Two H200s' machine: the link's and the GEMM's rates, a GEMM's fixed cost, chunks by the copy engines.
MachineCosts two_h200s(double hop_us, double hop_bytes_per_us, double gather_us, double gather_bytes_per_us, double flops_per_us,
                       double launch_us) {
  MachineCosts c;
  c.key = "NVIDIA H200, nccl + copy engines, 2 ranks", c.source = "given";
  c.hop_latency_us = hop_us, c.hop_bytes_per_us = hop_bytes_per_us, c.gather_latency_us = gather_us, c.gather_bytes_per_us = gather_bytes_per_us;
  c.gemm_flops_per_us = flops_per_us, c.gemm_half_rows = 0, c.launch_us = launch_us;
  c.chunks_take_no_sms = true;
  return c;
}

TEST(CostModel, TwoH200sAtTheIssuesPairs_PickTheFormsThatMeasuredFastest) {
  MachineCosts c = two_h200s(18.2, 233e3, 27, 232e3, 907e6, 28.2);
  PairShape ag = shape(2, 4096, 8192, 14336, 67108864);
  PipelineChoice a = choose_pipeline(c, ag);
  EXPECT_EQ(a.variant, PipelineChoice::Variant::chunks) << a.why;
  EXPECT_EQ(a.chunks, 1) << a.why;
  PairShape rs = shape(2, 4096, 14336, 8192, 67108864);
  rs.kind = PairShape::Kind::gemm_reduce_scatter;
  PipelineChoice r = choose_pipeline(c, rs);
  EXPECT_EQ(r.variant, PipelineChoice::Variant::chunks) << r.why;
  EXPECT_EQ(r.chunks, 2) << r.why;
  EXPECT_NEAR(chunks_us(c, rs, 1), off_us(c, rs), 0.05 * off_us(c, rs)) << "one landed chunk hides nothing";
}

// The same two H200s at the three TP MLP widths' pairs (8192 rows, K x N 1600 x 6400, 4096 x
// 11008, 8192 x 28672; session 30, bench/results/2026-11-27-NVIDIA_H200-x2-session30-notes.md),
// with a GEMM's fixed cost as measured inside a run (machine_costs' chain of two probe GEMMs less
// one): 8 us, about the [8, 4096] x [4096, 4096] probe's 32 MB of weight read at 4.8 TB/s (not
// yet measured so; the whole run of one GEMM, ~29 us, was every chunk's before). The picks are
// faster than off wherever they measured: the reduce-scatter at 1600 x 6400 chunks=2 (197 us
// against off's 221, where a launch of 29 us kept it off), at 4096 x 11008 chunks=2 (535; off
// 710); the all-gathers chunks=1 (179 and 533 us; off 246 and 665); the big pair's as above.
TEST(CostModel, TwoH200sAtTheTpMlpWidths_ChunkEveryPairThatMeasuredFasterChunked) {
  MachineCosts c = two_h200s(20.3, 232e3, 32.5, 270e3, 896e6, 8);
  struct Expected {
    int64_t k, n;
    int ag_chunks, rs_chunks;
  };
  for (const Expected& e : {Expected{1600, 6400, 1, 2}, Expected{4096, 11008, 1, 2}, Expected{8192, 28672, 1, 2}}) {
    SCOPED_TRACE(std::to_string(e.k) + " x " + std::to_string(e.n));
    PipelineChoice a = choose_pipeline(c, shape(2, 4096, e.k, e.n / 2, 4096 * e.k * 2));
    EXPECT_EQ(a.variant, PipelineChoice::Variant::chunks) << a.why;
    EXPECT_EQ(a.chunks, e.ag_chunks) << a.why;
    PairShape rs = shape(2, 4096, e.n / 2, e.k, 4096 * e.k * 2);
    rs.kind = PairShape::Kind::gemm_reduce_scatter;
    PipelineChoice r = choose_pipeline(c, rs);
    EXPECT_EQ(r.variant, PipelineChoice::Variant::chunks) << r.why;
    EXPECT_EQ(r.chunks, e.rs_chunks) << r.why;
  }
  // with the whole run's 29 us a launch, the small reduce-scatter stayed off
  c.launch_us = 29.1;
  PairShape small = shape(2, 4096, 3200, 1600, 4096 * 1600 * 2);
  small.kind = PairShape::Kind::gemm_reduce_scatter;
  EXPECT_EQ(choose_pipeline(c, small).variant, PipelineChoice::Variant::off) << choose_pipeline(c, small).why;
}

// The rates session 35's two H200s measured (a GEMM's launch inside a run: 17 us), where the
// reduce-scatter at 1600 x 6400 ran off (236 us; its model 198) though chunks=2 measured 200: the
// unpipelined program's reduce-scatter is NCCL's, ~116 us for a 13 MB block against the copy
// engines' chunked gather costed at 88. With the unpipelined collectives measured apart (30 us +
// 140 GB/s, the off runs' 236 and 704 us less their GEMMs), off costs 234 and 699 us, and both
// reduce-scatters chunk (chunks=2 measured 200 and 522 us); without them the small one stays off.
TEST(CostModel, TheUnpipelinedReduceScatterMeasuredApart_ChunksTheSmallPairThatMeasuredFasterChunked) {
  MachineCosts c = two_h200s(24.5, 237e3, 36.5, 256e3, 897e6, 17);
  PairShape small = shape(2, 4096, 3200, 1600, 4096 * 1600 * 2);
  small.kind = PairShape::Kind::gemm_reduce_scatter;
  EXPECT_EQ(choose_pipeline(c, small).variant, PipelineChoice::Variant::off) << choose_pipeline(c, small).why;
  c.off_scatter_latency_us = 30, c.off_scatter_bytes_per_us = 140e3;
  c.off_gather_latency_us = 30, c.off_gather_bytes_per_us = 200e3;
  EXPECT_NEAR(off_us(c, small), 234, 2);
  PairShape mid = shape(2, 4096, 5504, 4096, 4096 * 4096 * 2);
  mid.kind = PairShape::Kind::gemm_reduce_scatter;
  EXPECT_NEAR(off_us(c, mid), 699, 3);
  for (const PairShape& rs : {small, mid}) {
    PipelineChoice r = choose_pipeline(c, rs);
    EXPECT_EQ(r.variant, PipelineChoice::Variant::chunks) << r.why;
    EXPECT_EQ(r.chunks, 2) << r.why;
    EXPECT_NE(r.why.find("reduce-scatter 30 us + bytes at 140 GB/s"), std::string::npos) << r.why;
  }
  // the all-gather's off is the unpipelined all-gather's: chunks=1 still wins at 1600 x 6400
  PairShape ag = shape(2, 4096, 1600, 3200, 4096 * 1600 * 2);
  EXPECT_NEAR(off_us(c, ag), 30 + 4096 * 1600 * 2 / 200e3 + 17 + 2.0 * 8192 * 1600 * 3200 / 897e6, 0.5);
  EXPECT_EQ(choose_pipeline(c, ag).chunks, 1) << choose_pipeline(c, ag).why;
}

}  // namespace
}  // namespace alloy::host_ir
