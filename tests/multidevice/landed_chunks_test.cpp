// The landed all-gather of a pipelined all-gather -> GEMM loop (issue 25), in one process: a
// two-rank team played by a test communicator that either leaves each peer chunk in a staging
// place of its own (as the copy engines do) or copies into the loop's buffer (the default, as
// NCCL and MPI do). Either way the loop computes the unpipelined values; a landing team is handed
// no buffer, and each chunk's place is given back once after the GEMM that read it (a read after
// the release would see the NaNs the team writes there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "alloy/common/error.h"
#include "alloy/ir/parser.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/pipeline/pipeline.h"
#include "multidevice/test_teams.h"
#include "test_util.h"

namespace alloy {
namespace {

constexpr int64_t kRows = 4, kFeatures = 16;  // a rank's rows of x, and x's columns

// Rank `rank` of two, whose peer's rows of x are `rows[1 - rank]`: a chunk the loop hands over is
// a view of this rank's rows, and the peer's chunk is the same rows of the peer's.
class TwoRankTeam : public testing::UnusedCollectives {
 public:
  TwoRankTeam(int rank, std::vector<Tensor> rows) : UnusedCollectives(rank, 2), rows_(std::move(rows)) {}
  std::string name() const override { return "two-rank test team"; }

  // Only the chunked forms run here; the default all_gather_into_parts gathers through this.
  void all_gather(const Tensor& in, const Tensor& out) override {
    size_t bytes = size_t(in.numel()) * sizeof(float);
    for (int r = 0; r < 2; ++r) std::memcpy(static_cast<char*>(out.data()) + r * bytes, chunk_of(r, in).data(), bytes);
  }

 protected:
  // Rank r's rows that `in` (a view of this rank's rows) is the chunk of.
  Tensor chunk_of(int r, const Tensor& in) const {
    const Tensor& mine = rows_[size_t(rank())];
    int64_t begin = (static_cast<const char*>(in.data()) - static_cast<const char*>(mine.data())) / int64_t(kFeatures * sizeof(float));
    EXPECT_TRUE(begin >= 0 && begin + in.size(0) <= kRows) << "the chunk is not a view of this rank's rows";
    const Tensor& theirs = rows_[size_t(r)];
    return theirs.as_strided(in.sizes(), theirs.strides(), theirs.offset() + begin * theirs.stride(0));
  }
  std::vector<Tensor> rows_;
};

// Leaves the peer's chunk in a staging place of its own until the loop releases it.
class LandingTeam final : public TwoRankTeam {
 public:
  using TwoRankTeam::TwoRankTeam;
  bool lands_in_place() const override { return true; }

  multidevice::LandedParts all_gather_landed(const Tensor& in, const Tensor& parts) override {
    EXPECT_FALSE(parts.defined()) << "a team that lands in place is handed no buffer";
    const uint64_t call = landings_.land("a chunk landed");
    staging_ = Tensor::empty(in.dtype(), in.sizes());
    std::memcpy(staging_.data(), chunk_of(1 - rank(), in).data(), size_t(in.numel()) * sizeof(float));
    multidevice::LandedParts landed{{in, in}, call};
    // at call `bad_call`, a part of the wrong width: the GEMM that reads it fails
    landed.parts[size_t(1 - rank())] = call == landings_.bad_call ? Tensor::empty(DType::f32, {in.size(0), kFeatures + 1}) : staging_;
    return landed;
  }
  void release_landed(const multidevice::LandedParts& landed) override { landings_.release(landed, staging_); }

  // With `by_part`, a reader waits for its own part alone (as the copy engines let it): logged.
  bool waits_by_part() const override { return by_part; }
  void wait_landed_part(const multidevice::LandedParts& landed, int part) override {
    EXPECT_TRUE(by_part);
    landings_.log += "wait " + std::to_string(landed.call) + " part " + std::to_string(part) + "; ";
  }

  testing::Landings landings_;
  bool by_part = false;

 private:
  Tensor staging_;
};

Tensor filled(std::vector<int64_t> sizes, uint64_t seed) {
  Tensor t = Tensor::empty(DType::f32, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<float*>(t.data())[i] = float((i * 7 + int64_t(seed) * 3) % 11) - 5.0f;
  return t;
}

// h = x w^T of the gathered rows of both ranks, with this rank's w (its 16 output features).
Tensor reference(const std::vector<Tensor>& x, const Tensor& w) {
  Tensor h = Tensor::empty(DType::f32, {2 * kRows, w.size(0)});
  for (int64_t t = 0; t < 2 * kRows; ++t)
    for (int64_t o = 0; o < w.size(0); ++o) {
      double sum = 0;
      for (int64_t k = 0; k < kFeatures; ++k)
        sum += double(static_cast<const float*>(x[size_t(t / kRows)].data())[(t % kRows) * kFeatures + k]) *
               double(static_cast<const float*>(w.data())[o * kFeatures + k]);
      static_cast<float*>(h.data())[t * w.size(0) + o] = float(sum);
    }
  return h;
}

const char* kGatherGemm = R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=0), w: f32[32, 16] @mesh[0, 1] shard(axis=0)) {
  h = linear(x, w) @mesh[0, 1] shard(axis=1)
  return h
})";

struct LoopRun {
  Tensor h, gathered;  // the GEMM's result, and the gathered buffer the run left (undefined: none)
};

// Rank `rank`'s part of kGatherGemm through `team`, pipelined in `chunks` chunks.
LoopRun run_rank(TwoRankTeam& team, const std::vector<Tensor>& x, const Tensor& w, int chunks) {
  auto f = parse_fusion(kGatherGemm, "landed.fusion");
  CompiledFusion c = compile_fusion(*f, Target::cpu, {.program = parse_pipeline_option("chunks=" + std::to_string(chunks))});
  host_ir::RunState state;
  state.team = &team;
  state.poison = true;
  state.values.resize(c.local->values().size());
  state.values[c.local->inputs()[0]->id] = x[size_t(team.rank())];
  state.values[c.local->inputs()[1]->id] = w;
  c.executable->run(state);
  const Value* gathered = nullptr;
  for (const auto& v : c.local->values())
    if (v->name == "x__gathered") gathered = v.get();
  EXPECT_NE(gathered, nullptr);
  return {state.at(c.local->outputs()[0]), gathered ? state.values[gathered->id] : Tensor()};
}

TEST(LandedChunks, TheGemmsReadEachChunkWhereItLanded_AndReleaseItAfterThem) {
  std::vector<Tensor> x = {filled({kRows, kFeatures}, 1), filled({kRows, kFeatures}, 2)};
  Tensor w_global = filled({32, kFeatures}, 3);
  for (int rank : {0, 1}) {
    Tensor w = w_global.as_strided({16, kFeatures}, w_global.strides(), rank * 16 * kFeatures);
    for (int chunks : {1, 3, 4}) {  // 3: chunks of 1, 1 and 2 rows
      SCOPED_TRACE("rank " + std::to_string(rank) + ", " + std::to_string(chunks) + " chunks");
      LandingTeam team(rank, x);
      LoopRun run = run_rank(team, x, w, chunks);
      EXPECT_TRUE(testing::tensors_close(run.h, reference(x, w)));
      EXPECT_FALSE(run.gathered.defined()) << "the gathered rows were never made whole";
      std::string expected;
      for (int i = 1; i <= chunks; ++i) expected += "land " + std::to_string(i) + "; release " + std::to_string(i) + "; ";
      EXPECT_EQ(team.landings_.log, expected);
    }
  }
}

// Where the team lets a reader wait for its own part, the GEMM of the peer's block waits for that
// part, after the landing and before the release, and computes the same values.
TEST(LandedChunks, WhereThePartsLandOneByOne_EachGemmWaitsForItsOwnBlock) {
  std::vector<Tensor> x = {filled({kRows, kFeatures}, 1), filled({kRows, kFeatures}, 2)};
  Tensor w_global = filled({32, kFeatures}, 3);
  for (int rank : {0, 1}) {
    Tensor w = w_global.as_strided({16, kFeatures}, w_global.strides(), rank * 16 * kFeatures);
    for (int chunks : {1, 3}) {
      SCOPED_TRACE("rank " + std::to_string(rank) + ", " + std::to_string(chunks) + " chunks");
      LandingTeam team(rank, x);
      team.by_part = true;
      LoopRun run = run_rank(team, x, w, chunks);
      EXPECT_TRUE(testing::tensors_close(run.h, reference(x, w)));
      std::string expected;
      for (int i = 1; i <= chunks; ++i)
        expected += "land " + std::to_string(i) + "; wait " + std::to_string(i) + " part " + std::to_string(1 - rank) + "; release " +
                    std::to_string(i) + "; ";
      EXPECT_EQ(team.landings_.log, expected);
    }
  }
}

// A run cut short between a chunk's landing and its Release gives the chunk back (else the team
// would hold it, and its peers wait for it, forever), and the next run goes on.
TEST(LandedChunks, ARunCutShortAfterALanding_ReleasesIt) {
  std::vector<Tensor> x = {filled({kRows, kFeatures}, 1), filled({kRows, kFeatures}, 2)};
  Tensor w_global = filled({32, kFeatures}, 3);
  Tensor w = w_global.as_strided({16, kFeatures}, w_global.strides(), 0);
  LandingTeam team(0, x);
  team.landings_.bad_call = 2;
  EXPECT_ANY_THROW(run_rank(team, x, w, 3));
  EXPECT_EQ(team.landings_.log, "land 1; release 1; land 2; release 2; ");
  team.landings_.log.clear();
  EXPECT_TRUE(testing::tensors_close(run_rank(team, x, w, 2).h, reference(x, w)));
  EXPECT_EQ(team.landings_.log, "land 3; release 3; land 4; release 4; ");
}

TEST(LandedChunks, ATeamThatCopies_GathersIntoTheWholeBufferAsBefore) {
  std::vector<Tensor> x = {filled({kRows, kFeatures}, 4), filled({kRows, kFeatures}, 5)};
  Tensor w_global = filled({32, kFeatures}, 6);
  for (int rank : {0, 1}) {
    Tensor w = w_global.as_strided({16, kFeatures}, w_global.strides(), rank * 16 * kFeatures);
    TwoRankTeam team(rank, x);
    LoopRun run = run_rank(team, x, w, 3);
    EXPECT_TRUE(testing::tensors_close(run.h, reference(x, w)));
    ASSERT_TRUE(run.gathered.defined()) << "a team that copies gets the whole buffer";
    // every block copied in, the own one too (the default's all_gather_into_parts)
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(std::memcmp(static_cast<const char*>(run.gathered.data()) + r * kRows * kFeatures * sizeof(float), x[size_t(r)].data(),
                            kRows * kFeatures * sizeof(float)),
                0)
          << "block " << r;
  }
}

// The default form, called directly: the chunks copied into the caller's buffer, the parts are
// views of it, nothing to give back; without a buffer it is a bug, said as one.
TEST(LandedChunks, TheDefaultAllGatherLanded_ReturnsTheBuffersParts) {
  std::vector<Tensor> x = {filled({kRows, kFeatures}, 7), filled({kRows, kFeatures}, 8)};
  TwoRankTeam team(1, x);
  Tensor buffer = Tensor::empty(DType::f32, {2, kRows, kFeatures});
  multidevice::LandedParts landed = team.all_gather_landed(x[1], buffer);
  EXPECT_EQ(landed.call, 0u);
  ASSERT_EQ(landed.parts.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(landed.parts[size_t(r)].data(), multidevice::part_of(buffer, r).data());
    EXPECT_TRUE(testing::tensors_close(landed.parts[size_t(r)], x[size_t(r)]));
  }
  team.release_landed(landed);  // nothing
  EXPECT_THROW(team.all_gather_landed(x[1], Tensor()), InternalError);
}

}  // namespace
}  // namespace alloy
