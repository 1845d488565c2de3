// The landed reduce-scatter of a pipelined GEMM -> reduce-scatter loop (issue 25), in one
// process: a two-rank team played by a test communicator that either leaves the peer's partial
// sums for this rank in a staging place of its own (as the copy engines do) or reduces them with
// this rank's zeroed term into the loop's scratch chunk (the default, as NCCL and MPI do). Either
// way the own block's GEMM adds them as it writes the output and the loop computes the
// unpipelined values (the bias once); each landing is given back once, after that GEMM (a read
// after the release would see the NaNs the team writes there).
#include <gtest/gtest.h>

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

constexpr int64_t kTokens = 8, kFeatures = 8, kOut = 16;  // x: [kTokens, 2 kFeatures], w: [kOut, 2 kFeatures]

float at(const Tensor& t, int64_t i) { return static_cast<const float*>(t.data())[i]; }

// Rank `rank`'s partial sums of every row: x's and w's feature columns [8 rank, 8 rank + 8), and
// bias / 2 (localize_shards' share of a row-parallel linear's bias).
Tensor partial_sums(const Tensor& x, const Tensor& w, const Tensor& b, int rank) {
  Tensor p = Tensor::empty(DType::f32, {kTokens, kOut});
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t o = 0; o < kOut; ++o) {
      float sum = at(b, o) / 2;
      for (int64_t k = rank * kFeatures; k < (rank + 1) * kFeatures; ++k) sum += at(x, t * 2 * kFeatures + k) * at(w, o * 2 * kFeatures + k);
      static_cast<float*>(p.data())[t * kOut + o] = sum;
    }
  return p;
}

// Rank `rank` of two, whose peer's partial sums (every row) are `peer`: the chunk the loop hands
// over is a [2, rows, kOut] view of its whole partial sums, and the peer's part for this rank is
// the same rows of the peer's block for this rank.
class ScatterTeam final : public testing::UnusedCollectives {
 public:
  ScatterTeam(int rank, Tensor peer, bool lands) : UnusedCollectives(rank, 2), peer_(std::move(peer)), lands_(lands) {}
  std::string name() const override { return "two-rank scatter test team"; }

  bool lands_in_place() const override { return lands_; }

  void reduce_scatter_parts_send(const Tensor& parts, PartialReduce op) override {
    EXPECT_EQ(op, PartialReduce::sum);
    EXPECT_EQ(parts.size(0), 2);
    landings_.log += "send; ";
  }
  // Where the parts land in place (as the copy engines), each part is sent once its GEMM is done:
  // its readiness waited for (nothing to wait for on the CPU), then logged.
  void reduce_scatter_parts_send_when_ready(const Tensor& parts, PartialReduce op, const std::function<void(int)>& ready) override {
    if (!lands_) return Communicator::reduce_scatter_parts_send_when_ready(parts, op, ready);
    EXPECT_EQ(op, PartialReduce::sum);
    ready(1 - rank());
    landings_.log += "send part " + std::to_string(1 - rank()) + "; ";
  }

  // The copying form's reduction (through the default reduce_scatter_parts_landed): this rank's
  // term must be zeros, the own GEMM's partial sums being still to come.
  void reduce_scatter_parts(const Tensor& parts, const Tensor& out, PartialReduce op) override {
    EXPECT_EQ(op, PartialReduce::sum);
    Tensor own = multidevice::part_of(parts, rank());
    for (int64_t i = 0; i < own.numel(); ++i)
      if (static_cast<const float*>(own.data())[i] != 0.0f) own_term_was_zero_ = false;
    Tensor peer = peer_part(parts);
    ASSERT_TRUE(out.is_contiguous() && out.sizes() == peer.sizes()) << out.str();
    std::memcpy(out.data(), peer.data(), size_t(peer.numel()) * sizeof(float));
    landings_.log += "reduce; ";
  }

  multidevice::LandedParts reduce_scatter_parts_landed(const Tensor& parts, const Tensor& sum) override {
    if (!lands_) return Communicator::reduce_scatter_parts_landed(parts, sum);
    EXPECT_FALSE(sum.defined()) << "a team that lands in place is handed no chunk to sum into";
    const uint64_t call = landings_.land("a landing");
    staging_ = peer_part(parts);
    multidevice::LandedParts landed{{staging_}, call, {1 - rank()}};
    // at call `bad_call`, a part of the wrong width: the GEMM that adds it fails
    if (call == landings_.bad_call) landed.parts[0] = Tensor::empty(DType::f32, {staging_.size(0), kOut + 1});
    return landed;
  }
  void release_landed(const multidevice::LandedParts& landed) override {
    if (!lands_) return Communicator::release_landed(landed);
    landings_.release(landed, staging_);
  }
  // Where it lands in place, the own GEMM waits for each part just before it reads it: logged.
  bool waits_by_part() const override { return lands_; }
  void wait_landed_part(const multidevice::LandedParts& landed, int part) override {
    EXPECT_TRUE(lands_);
    landings_.log += "wait " + std::to_string(landed.call) + " part " + std::to_string(part) + "; ";
  }

  testing::Landings landings_;
  bool own_term_was_zero_ = true;

 private:
  // A copy of the peer's partial sums for this rank's rows that `parts` holds chunk i of (the
  // view's offset into the loop's whole buffer, which starts at its storage's start).
  Tensor peer_part(const Tensor& parts) const {
    int64_t begin = parts.offset() / parts.stride(1), rows = parts.size(1);
    int64_t block = kTokens / 2;
    Tensor part = Tensor::empty(DType::f32, {rows, kOut});
    std::memcpy(part.data(), static_cast<const float*>(peer_.data()) + (rank() * block + begin) * kOut, size_t(rows * kOut) * sizeof(float));
    return part;
  }

  Tensor peer_;
  bool lands_;
  Tensor staging_;
};

Tensor filled(std::vector<int64_t> sizes, uint64_t seed, float scale = 1) {
  Tensor t = Tensor::empty(DType::f32, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<float*>(t.data())[i] = scale * (float((i * 7 + int64_t(seed) * 3) % 11) - 5.0f);
  return t;
}

// Columns [8 rank, 8 rank + 8) of a [rows, 16] tensor, packed.
Tensor columns(const Tensor& t, int rank) {
  Tensor out = Tensor::empty(DType::f32, {t.size(0), kFeatures});
  for (int64_t r = 0; r < t.size(0); ++r)
    std::memcpy(static_cast<float*>(out.data()) + r * kFeatures, static_cast<const float*>(t.data()) + r * 2 * kFeatures + rank * kFeatures,
                kFeatures * sizeof(float));
  return out;
}

// y = x w^T + b, rows [4 rank, 4 rank + 4): this rank's block of the reduce-scattered output.
Tensor reference(const Tensor& x, const Tensor& w, const Tensor& b, int rank) {
  Tensor y = Tensor::empty(DType::f32, {kTokens / 2, kOut});
  for (int64_t t = 0; t < kTokens / 2; ++t)
    for (int64_t o = 0; o < kOut; ++o) {
      double sum = at(b, o);
      for (int64_t k = 0; k < 2 * kFeatures; ++k) sum += double(at(x, (rank * kTokens / 2 + t) * 2 * kFeatures + k)) * at(w, o * 2 * kFeatures + k);
      static_cast<float*>(y.data())[t * kOut + o] = float(sum);
    }
  return y;
}

const char* kGemmScatter = R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=1), w: f32[16, 16] @mesh[0, 1] shard(axis=1), b: f32[16] @mesh[0, 1] replicated) {
  y = linear(x, w, b) @mesh[0, 1] shard(axis=0)
  return y
})";

struct Inputs {
  Tensor x = filled({kTokens, 2 * kFeatures}, 1), w = filled({kOut, 2 * kFeatures}, 2), b = filled({kOut}, 3, 2);  // b even: b / 2 exact
};

// Rank `team.rank()`'s part of kGemmScatter through `team`, pipelined in `chunks` chunks.
Tensor run_rank(ScatterTeam& team, const Inputs& in, int chunks, std::string* program = nullptr) {
  auto f = parse_fusion(kGemmScatter, "landed_sums.fusion");
  CompiledFusion c = compile_fusion(*f, Target::cpu, {.program = parse_pipeline_option("chunks=" + std::to_string(chunks))});
  if (program) *program = c.executable->program.str();
  host_ir::RunState state;
  state.team = &team;
  state.poison = true;
  state.values.resize(c.local->values().size());
  state.values[c.local->inputs()[0]->id] = columns(in.x, team.rank());
  state.values[c.local->inputs()[1]->id] = columns(in.w, team.rank());
  state.values[c.local->inputs()[2]->id] = in.b;
  for (const auto& v : c.local->values())  // bias / 2's literal (the executor binds them so)
    if (v->literal) {
      Tensor literal = Tensor::empty(v->dtype(), {});
      store_double(literal.data(), v->dtype(), 0, v->literal->as_double());
      state.values[v->id] = literal;
    }
  c.executable->run(state);
  return state.at(c.local->outputs()[0]);
}

TEST(LandedSums, TheOwnGemmAddsThePeersPartsWhereTheyLanded_AndReleasesThemAfterIt) {
  Inputs in;
  for (int rank : {0, 1}) {
    for (int chunks : {1, 3, 4}) {  // 3: chunks of 1, 1 and 2 rows
      SCOPED_TRACE("rank " + std::to_string(rank) + ", " + std::to_string(chunks) + " chunks");
      ScatterTeam team(rank, partial_sums(in.x, in.w, in.b, 1 - rank), /*lands=*/true);
      std::string program;
      Tensor y = run_rank(team, in, chunks, &program);
      EXPECT_TRUE(testing::tensors_close(y, reference(in.x, in.w, in.b, rank))) << program;
      std::string expected;
      for (int i = 1; i <= chunks; ++i)
        expected += "send part " + std::to_string(1 - rank) + "; land " + std::to_string(i) + "; wait " + std::to_string(i) + " part 0; release " +
                    std::to_string(i) + "; ";
      EXPECT_EQ(team.landings_.log, expected);
      EXPECT_NE(program.find("send the parts of the other ranks, that of rank (r + j) mod n once event"), std::string::npos) << program;
    }
  }
}

TEST(LandedSums, ATeamThatReduces_SumsThePeersPartsWithAZeroTermIntoAScratchChunk) {
  Inputs in;
  for (int rank : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ScatterTeam team(rank, partial_sums(in.x, in.w, in.b, 1 - rank), /*lands=*/false);
    Tensor y = run_rank(team, in, 3);
    EXPECT_TRUE(testing::tensors_close(y, reference(in.x, in.w, in.b, rank)));
    EXPECT_TRUE(team.own_term_was_zero_) << "this rank's term of the reduction is its zeroed own block";
    EXPECT_EQ(team.landings_.log, "send; reduce; send; reduce; send; reduce; ");
  }
}

// A run cut short between a landing and its Release gives it back, and the next run goes on.
TEST(LandedSums, ARunCutShortAfterALanding_ReleasesIt) {
  Inputs in;
  ScatterTeam team(0, partial_sums(in.x, in.w, in.b, 1), /*lands=*/true);
  team.landings_.bad_call = 2;
  EXPECT_ANY_THROW(run_rank(team, in, 3));
  EXPECT_EQ(team.landings_.log, "send part 1; land 1; wait 1 part 0; release 1; send part 1; land 2; wait 2 part 0; release 2; ");
  team.landings_.log.clear();
  EXPECT_TRUE(testing::tensors_close(run_rank(team, in, 2), reference(in.x, in.w, in.b, 0)));
  EXPECT_EQ(team.landings_.log, "send part 1; land 3; wait 3 part 0; release 3; send part 1; land 4; wait 4 part 0; release 4; ");
}

// The default form, called directly: reduced into the caller's chunk, which is the one part;
// nothing to give back; without a chunk it is a bug, said as one.
TEST(LandedSums, TheDefaultReduceScatterLanded_ReturnsTheSum) {
  Inputs in;
  ScatterTeam team(1, partial_sums(in.x, in.w, in.b, 0), /*lands=*/false);
  Tensor parts = Tensor::empty(DType::f32, {2, 2, kOut});
  std::memset(parts.data(), 0, size_t(parts.numel()) * sizeof(float));
  Tensor sum = Tensor::empty(DType::f32, {2, kOut});
  multidevice::LandedParts landed = team.reduce_scatter_parts_landed(parts, sum);
  EXPECT_EQ(landed.call, 0u);
  ASSERT_EQ(landed.parts.size(), 1u);
  EXPECT_EQ(landed.parts[0].data(), sum.data());
  team.release_landed(landed);  // nothing
  EXPECT_THROW(team.reduce_scatter_parts_landed(parts, Tensor()), InternalError);
}

}  // namespace
}  // namespace alloy
