// The sharding passes as text in, text out: each case is a .fusion text whose `--dump sharding`
// and `--dump program` are compared with expected lines (the examples against files kept in
// golden/, refreshed with ALLOY_UPDATE_GOLDEN=1), then the rules one family at a time, and one
// test per user diagnostic. All in one process: no communication runs here (mpi_test does).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "alloy/ir/parser.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/passes/sharding/propagate_sharding.h"
#include "alloy/pipeline/pipeline.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

struct Dumps {
  std::string sharding, program;
};

Dumps dumps_of(const std::string& text) {
  CompiledFusion c = compile_fusion(*parse_fusion(text, "t.fusion"), Target::cpu);
  return {sharding_report(*c.global), c.executable->program.str()};
}

bool has(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// ---- the examples against their expected dumps -------------------------------------------

class ExampleGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ExampleGolden, ShardingAndProgramMatchTheExpectedText) {
  std::string name = GetParam();
  Dumps d = dumps_of(testing::read_file(testing::source_path("examples/" + name + ".fusion")));
  std::string actual = d.sharding + d.program;
  std::string golden = testing::source_path("tests/multidevice/golden/" + name + ".txt");
  if (const char* update = std::getenv("ALLOY_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(golden) << actual;
    GTEST_SKIP() << "wrote " << golden;
  }
  EXPECT_EQ(actual, testing::read_file(golden)) << "(ALLOY_UPDATE_GOLDEN=1 rewrites the expected text)";
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleGolden,
                         ::testing::Values("tp_mlp", "tp_mlp_sequence_parallel", "tp_mlp_backward", "sharded_layer_norm"));

// ---- the rules, one family at a time ------------------------------------------------------

TEST(ShardingRules, ColumnThenRowParallel_IsOneAllReduce) {
  Dumps d = dumps_of(testing::read_file(testing::source_path("examples/tp_mlp.fusion")));
  EXPECT_TRUE(has(d.sharding, "h: f32[T, 1024] @mesh[0, 1] shard(axis=1)  # propagated: column-parallel from w_fc")) << d.sharding;
  EXPECT_TRUE(has(d.sharding, "partial(sum)  # propagated: row-parallel")) << d.sharding;
  EXPECT_EQ(count(d.program, "Communicate"), 1) << d.program;
  EXPECT_TRUE(has(d.program, "all_reduce(reduce=\"sum\") y__partial")) << d.program;
}

// Partial sums returned and read replicated by another op are all-reduced once: the output is the
// reduction that op asked for, under the output's name (not a second all-reduce of the same sums).
TEST(ShardingRules, APartialReturnedAndReadReplicated_IsAllReducedOnce) {
  Dumps d = dumps_of(R"(fusion f(x: f32[8, 16] @mesh[0, 1] shard(axis=1), w: f32[16, 16] @mesh[0, 1] shard(axis=1)) {
    y = linear(x, w)
    s = sum(y, dims=[1])
    return y, s
  })");
  EXPECT_EQ(count(d.program, "Communicate"), 1) << d.program;
  EXPECT_TRUE(has(d.program, "all_reduce(reduce=\"sum\") y__partial: f32[8, 16] -> y: f32[8, 16]")) << d.program;
  EXPECT_TRUE(has(d.program, "(y) -> (s)")) << d.program;
}

TEST(ShardingRules, PartialIntoAShardedConsumer_IsAReduceScatterNotAnAllReduce) {
  Dumps d = dumps_of(R"(fusion f(a: f32[8, 16] @mesh[0, 1] shard(axis=1), b: f32[16, 4] @mesh[0, 1] shard(axis=0)) {
    c = matmul(a, b) @mesh[0, 1] shard(axis=0)
    return c
  })");
  EXPECT_TRUE(has(d.program, "reduce_scatter(axis=0, reduce=\"sum\") c__computed")) << d.program;
  EXPECT_FALSE(has(d.program, "all_reduce")) << d.program;
}

TEST(ShardingRules, ReshapeMergingTheShardedOuterAxis_KeepsTheSharding) {
  Dumps d = dumps_of(R"(fusion f(x: f32[B, S, 64] @mesh[0, 1] shard(axis=0)) {
    y = reshape(x, shape=[-1, 64])
    z = reshape(y, shape=[B, S, 8, 8])
    return z
  })");
  EXPECT_TRUE(has(d.sharding, "y: f32[B*S, 64] @mesh[0, 1] shard(axis=0)")) << d.sharding;
  EXPECT_TRUE(has(d.sharding, "z: f32[B, S, 8, 8] @mesh[0, 1] shard(axis=0)")) << d.sharding;
  EXPECT_EQ(count(d.program, "Communicate"), 0) << d.program;
}

TEST(ShardingRules, ReshapeMergingAnInnerShardedAxis_GathersFirst) {
  Dumps d = dumps_of(R"(fusion f(x: f32[4, 6, 8] @mesh[0, 1] shard(axis=1)) {
    y = reshape(x, shape=[24, 8])
    return y
  })");
  EXPECT_TRUE(has(d.program, "all_gather(axis=1) x")) << d.program;
}

TEST(ShardingRules, ReshapeSplittingTheShardedAxis_KeepsItWhereTheMeshDividesTheOuterPart_ElseGathers) {
  Dumps divides = dumps_of(R"(fusion f(x: f32[8, 4] @mesh[0, 1] shard(axis=0)) {
    y = reshape(x, shape=[4, 2, 4])
    return y
  })");
  EXPECT_TRUE(has(divides.sharding, "y: f32[4, 2, 4] @mesh[0, 1] shard(axis=0)")) << divides.sharding;
  EXPECT_EQ(count(divides.program, "Communicate"), 0) << divides.program;
  // 6 rows over 2 devices split into [3, 2]: no device holds a whole part of the 3
  Dumps odd = dumps_of(R"(fusion f(x: f32[6, 4] @mesh[0, 1] shard(axis=0)) {
    y = reshape(x, shape=[3, 2, 4])
    return y
  })");
  EXPECT_TRUE(has(odd.sharding, "y: f32[3, 2, 4] @mesh[0, 1] replicated")) << odd.sharding;
  EXPECT_TRUE(has(odd.program, "all_gather(axis=0) x")) << odd.program;
}

TEST(ShardingRules, Permute_MovesTheShardedAxis) {
  Dumps d = dumps_of(R"(fusion f(x: f32[4, 6, 8] @mesh[0, 1] shard(axis=2)) {
    y = permute(x, dims=[2, 0, 1])
    return y
  })");
  EXPECT_TRUE(has(d.sharding, "y: f32[8, 4, 6] @mesh[0, 1] shard(axis=0)")) << d.sharding;
}

TEST(ShardingRules, SliceAndCatAlongTheShardedAxis_Gather_AlongAnotherAxis_DoNot) {
  Dumps along = dumps_of(R"(fusion f(x: f32[8, 6] @mesh[0, 1] shard(axis=0)) {
    y = slice(x, starts=[2, 0], ends=[6, 6])
    z = cat(x, x, dim=0)
    return y, z
  })");
  EXPECT_TRUE(has(along.program, "all_gather(axis=0) x")) << along.program;
  Dumps across = dumps_of(R"(fusion f(x: f32[8, 6] @mesh[0, 1] shard(axis=0)) {
    y = slice(x, starts=[0, 1], ends=[8, 5])
    z = cat(x, y, dim=1)
    return z
  })");
  EXPECT_EQ(count(across.program, "Communicate"), 0) << across.program;
  EXPECT_TRUE(has(across.sharding, "z: f32[8, 10] @mesh[0, 1] shard(axis=0)")) << across.sharding;
}

// gather shards along a row axis its input and index share (each device gathers its own rows);
// iota, with no inputs to take a part of, is replicated on the fusion's mesh: cross-entropy over
// sharded rows needs no communication.
TEST(ShardingRules, GatherAlongTheRowsSharding_AndIotaReplicated_NeedNoCommunication) {
  Dumps d = dumps_of(R"(fusion f(x: f32[T, 64] @mesh[0, 1] shard(axis=0), t: i64[T] @mesh[0, 1] shard(axis=0)) {
    u = unsqueeze(t, dim=1)
    g = gather(x, u, dim=1)
    ids = iota(length=64)
    hit = eq(ids, u)
    return g, hit
  })");
  EXPECT_TRUE(has(d.sharding, "g: f32[T, 1] @mesh[0, 1] shard(axis=0)")) << d.sharding;
  EXPECT_TRUE(has(d.sharding, "ids: i64[64] @mesh[0, 1] replicated")) << d.sharding;
  EXPECT_TRUE(has(d.sharding, "hit: bool[T, 64] @mesh[0, 1] shard(axis=0)")) << d.sharding;
  EXPECT_EQ(count(d.program, "Communicate"), 0) << d.program;
}

// Sharded along the gathered axis, x is gathered whole first: a device's index values name any
// position of the axis.
TEST(ShardingRules, GatherOfAnInputShardedAlongDim_GathersTheInputFirst) {
  Dumps d = dumps_of(R"(fusion f(x: f32[8, 64] @mesh[0, 1] shard(axis=1), t: i64[8, 1]) {
    g = gather(x, t, dim=1)
    return g
  })");
  EXPECT_TRUE(has(d.program, "all_gather(axis=1) x")) << d.program;
}

TEST(ShardingRules, ABroadcastOfAShardedAxis_TakesItsShardingFromItsConsumer) {
  Dumps d = dumps_of(R"(fusion f(x: f32[T, 64] @mesh[0, 1] shard(axis=0), b: f32[64]) {
    bb = broadcast_in_dim(b, shape=[T, 64], broadcast_dims=[1])
    y = add(x, bb)
    return y
  })");
  EXPECT_TRUE(has(d.sharding, "b: f32[64] @mesh[0, 1] replicated  # default")) << d.sharding;
  EXPECT_TRUE(has(d.sharding, "bb: f32[T, 64] @mesh[0, 1] shard(axis=0)  # propagated: from its consumer y")) << d.sharding;
  EXPECT_EQ(count(d.program, "Communicate"), 0) << d.program;  // each device broadcasts its own rows
}

TEST(ShardingRules, ReductionsOverTheShardedAxis_ArePartial) {
  Dumps d = dumps_of(R"(fusion f(x: f32[T, 64] @mesh[0, 1] shard(axis=1)) {
    s = sum(x, dims=[1])
    m = max(x, dims=[1])
    a = mean(x, dims=[1])
    k = sum(x, dims=[0])
    return s, m, a, k
  })");
  EXPECT_TRUE(has(d.sharding, "partial(sum)  # propagated: reduction over sharded x")) << d.sharding;
  EXPECT_TRUE(has(d.sharding, "partial(max)")) << d.sharding;
  EXPECT_TRUE(has(d.program, "all_reduce(reduce=\"max\")")) << d.program;
  EXPECT_TRUE(has(d.sharding, "k: f32[64] @mesh[0, 1] shard(axis=0)")) << d.sharding;
  // the max's NaNs: a flag of them combined by max too (MPI's and NCCL's max keep the number)
  EXPECT_TRUE(has(d.program, "all_reduce(reduce=\"max\") m__partial__nan_f32: f32[T] -> m__partial__nan_any")) << d.program;
  EXPECT_TRUE(has(d.program, "(m__partial__nan_hit, m__partial__reduced_numbers) -> (m)")) << d.program;
  EXPECT_EQ(count(d.program, "Communicate"), 4) << d.program;
}

TEST(ShardingRules, AUsersAnnotation_IsNeverChanged) {
  Dumps d = dumps_of(R"(fusion f(x: f32[8, 64] @mesh[0, 1] shard(axis=0)) {
    y = exp(x) @mesh[0, 1] replicated
    z = neg(y)
    return z
  })");
  EXPECT_TRUE(has(d.sharding, "y: f32[8, 64] @mesh[0, 1] replicated  # user (t.fusion:2:16)")) << d.sharding;
  EXPECT_TRUE(has(d.program, "all_gather(axis=0)")) << d.program;
}

TEST(ShardingRules, AnAnnotatedCompositeStatement_KeepsItsAnnotationThroughTheDecomposition) {
  // the only annotation is on a statement that decompose_composites rewrites (a fuzzer's find:
  // the mesh was lost with it and the next pass met values without shardings)
  Dumps d = dumps_of(R"(fusion f(x: bf16[4, 4, 8], w: bf16[8]) {
    y = rms_norm(x, w, normalized_ndim=1, eps=1.0e-6)
    @mesh[0, 1] shard(axis=0) return y
  })");
  EXPECT_TRUE(has(d.sharding, "y: bf16[4, 4, 8] @mesh[0, 1] shard(axis=0)  # user (t.fusion:3:5)")) << d.sharding;
  EXPECT_TRUE(has(d.sharding, "x: bf16[4, 4, 8] @mesh[0, 1] ")) << d.sharding;
}

TEST(ShardingRules, TheCostRule_GathersTheSmallerOperand) {
  // x (T counted as 4096: 4096*64 elements) against w (64*64): the weight moves
  Dumps d = dumps_of(R"(fusion f(x: f32[T, 64] @mesh[0, 1] shard(axis=0), w: f32[64, 64] @mesh[0, 1] shard(axis=0)) {
    y = linear(x, w)
    return y
  })");
  EXPECT_TRUE(has(d.program, "all_gather(axis=0) w")) << d.program;
  EXPECT_TRUE(has(d.sharding, "y: f32[T, 64] @mesh[0, 1] shard(axis=0)  # propagated: batch-parallel from x")) << d.sharding;
}

// ---- the sharding decided at the bound sizes (issue 25) ------------------------------------

// The sequence-parallel MLP with only the layouts of its inputs stated, and of its output where
// `output` says so: tokens split over the mesh, w_fc by output features and w_proj by input
// features (Megatron's). Moving the tokens (x gathered in front, the output reduce-scattered:
// 2 * T * C * 4 bytes) or the weights (w_fc, b_fc, w_proj gathered: 2 * 4C * C * 4 + 4C * 4)
// is cheaper depending on T.
std::string sequence_parallel_mlp(int c, const std::string& mesh = "@mesh[0, 1]", bool output = true) {
  std::string C = std::to_string(c), H = std::to_string(4 * c);
  return "fusion sp(x: f32[T, " + C + "] " + mesh + " shard(axis=0), w_fc: f32[" + H + ", " + C + "] " + mesh +
         " shard(axis=0),\n          b_fc: f32[" + H + "] " + mesh + " shard(axis=0), w_proj: f32[" + C + ", " + H + "] " + mesh +
         " shard(axis=1),\n          b_proj: f32[" + C + "] " + mesh + " replicated) {\n"
         "  h = linear(x, w_fc, b_fc)\n  g = gelu(h, approximate=\"tanh\")\n  y = linear(g, w_proj, b_proj)" +
         (output ? " " + mesh + " shard(axis=0)" : "") + "\n  return y\n}\n";
}

Dumps dumps_at(const std::string& text, const Bindings& sizes) {
  CompileOptions options;
  options.sizes = sizes;
  CompiledFusion c = compile_fusion(*parse_fusion(text, "t.fusion"), Target::cpu, options);
  return {sharding_report(*c.global), c.executable->program.str()};
}

bool moves_the_tokens(const Dumps& d) {
  return has(d.program, "all_gather(axis=0) x:") && has(d.program, "reduce_scatter(axis=0, reduce=\"sum\") y__computed") &&
         !has(d.program, "w_fc__gathered") && !has(d.program, "w_proj__gathered");
}
bool moves_the_weights(const Dumps& d) {
  return has(d.program, "all_gather(axis=0) w_fc:") && has(d.program, "all_gather(axis=1) w_proj:") &&
         !has(d.program, "x__gathered") && !has(d.program, "reduce_scatter");
}

TEST(ShardingDecision, SequenceParallelMlp_MovesTheTokensAtSmallT_TheWeightsAtLargeT) {
  std::string text = sequence_parallel_mlp(256);
  Dumps small = dumps_at(text, {{"T", 64}});  // tokens 2 * 64 KiB, against weights 2 MiB
  EXPECT_TRUE(moves_the_tokens(small)) << small.program;
  EXPECT_TRUE(has(small.sharding, "h: f32[T, 1024] @mesh[0, 1] shard(axis=1)  # propagated: column-parallel from w_fc")) << small.sharding;
  Dumps large = dumps_at(text, {{"T", 65536}});  // tokens 2 * 64 MiB
  EXPECT_TRUE(moves_the_weights(large)) << large.program;
  // with T unbound the rule counts it as 4096 (tokens 2 * 4 MiB): the weights
  EXPECT_TRUE(moves_the_weights(dumps_of(text))) << dumps_of(text).program;
}

// The decision is the bytes at the bound sizes: h's choice is x gathered (T * 256 * 4 bytes)
// against w_fc and b_fc gathered (1024 * 256 * 4 + 1024 * 4 = 1052672), equal at T = 1028.
TEST(ShardingDecision, TheChoiceSwitchesWhereTheBytesCross) {
  std::string text = sequence_parallel_mlp(256);
  EXPECT_TRUE(moves_the_tokens(dumps_at(text, {{"T", 1024}})));
  EXPECT_TRUE(moves_the_weights(dumps_at(text, {{"T", 1032}})));
}

// An output the user did not annotate keeps the layout it has where no size is bound (so a
// caller lays the outputs out before it knows the sizes); what the op computes at the bound
// sizes is resharded into it: at T = 64, partial sums reduce-scattered into split tokens.
TEST(ShardingDecision, AnUnannotatedOutput_KeepsItsUnboundLayout) {
  std::string text = sequence_parallel_mlp(256, "@mesh[0, 1]", false);
  Dumps unbound = dumps_of(text);
  EXPECT_TRUE(has(unbound.sharding, "y: f32[T, 256] @mesh[0, 1] shard(axis=0)  # propagated: batch-parallel from g")) << unbound.sharding;
  Dumps small = dumps_at(text, {{"T", 64}});
  EXPECT_TRUE(moves_the_tokens(small)) << small.program;
  EXPECT_TRUE(has(small.sharding, "y: f32[T, 256] @mesh[0, 1] shard(axis=0)  # pinned: the layout 'y' has where no size is bound"))
      << small.sharding;
  // where the bound sizes decide as the unbound ones do, nothing is pinned: the same plan
  EXPECT_EQ(dumps_at(text, {{"T", 65536}}).sharding, unbound.sharding);
}

// A cached executor decides per binding: a plan per decision, a new decision at the first sizes
// that make it, the sizes seen before a look-up; every run equals the unsharded one. A mesh of
// one device (this is a job of one process): the cost rule counts the same bytes on any mesh.
TEST(ShardingDecision, ACachedExecutor_DecidesAgainForNewSizes) {
  std::string text = sequence_parallel_mlp(16, "@mesh[0]");  // weights 8448 bytes: tokens cheaper below T = 66
  FusionExecutor sharded(parse_fusion(text, "sp.fusion"), {DeviceChoice::cpu});
  auto plain = parse_fusion(text, "sp.fusion");
  for (auto& v : plain->values()) v->sharding.reset(), v->sharding_source = {};
  FusionExecutor reference(std::move(plain), {DeviceChoice::cpu});
  auto inputs_at = [](int64_t t) {
    std::vector<Tensor> in;
    for (std::vector<int64_t> sizes : std::vector<std::vector<int64_t>>{{t, 16}, {64, 16}, {64}, {16, 64}, {16}})
      in.push_back(random_tensor(DType::f32, sizes, uint64_t(t + int64_t(in.size()))));
    return in;
  };
  struct Step {
    int64_t t;
    bool tokens;
    int plans;
  };
  // the unbound plan (T counted as 4096: the weights) is built first; T = 8 decides the tokens
  for (Step step : {Step{8, true, 2}, Step{1024, false, 2}, Step{8, true, 2}, Step{40, true, 2}}) {
    SCOPED_TRACE("T = " + std::to_string(step.t));
    std::vector<Tensor> in = inputs_at(step.t);
    std::vector<Tensor> out = sharded.run(in);
    EXPECT_TRUE(testing::tensors_close(out.at(0), reference.run(in).at(0)));
    Dumps d{sharded.dump("sharding"), sharded.dump("program")};  // the last run's plan
    EXPECT_TRUE(step.tokens ? moves_the_tokens(d) : moves_the_weights(d)) << d.program;
    EXPECT_EQ(sharded.plans_built(), step.plans);
    // given inputs, a dump shows the plan for their sizes without running
    std::vector<Tensor> other = inputs_at(step.tokens ? 1024 : 8);
    Dumps for_other{sharded.dump("sharding", &other), sharded.dump("program", &other)};
    EXPECT_TRUE(step.tokens ? moves_the_weights(for_other) : moves_the_tokens(for_other)) << for_other.program;
  }
  EXPECT_EQ(sharded.output_shardings().at(0)->shard_axis, std::optional<int>(0));
}

TEST(ShardingRules, PropagationDoesNotDependOnStatementOrder) {
  // the same dataflow written in two orders gives every value the same sharding
  std::string a = sharding_report(*compile_fusion(*parse_fusion(R"(fusion f(x: f32[8, 4] @mesh[0, 1] shard(axis=0), y: f32[8, 4]) {
    p = exp(x)
    q = add(y, 1.0)
    r = mul(p, q)
    return r
  })", "a"), Target::cpu).global);
  std::string b = sharding_report(*compile_fusion(*parse_fusion(R"(fusion f(x: f32[8, 4] @mesh[0, 1] shard(axis=0), y: f32[8, 4]) {
    q = add(y, 1.0)
    p = exp(x)
    r = mul(p, q)
    return r
  })", "b"), Target::cpu).global);
  auto line_of = [](const std::string& text, const std::string& name) {
    size_t at = text.find("\n" + name + ":");
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  for (const char* v : {"p", "q", "r"}) EXPECT_EQ(line_of(a, v), line_of(b, v));
  EXPECT_TRUE(has(a, "q: f32[8, 4] @mesh[0, 1] shard(axis=0)")) << a;  // from its consumer r
}

TEST(ShardingRules, LocalShapes_AreGlobalOnesDivided) {
  CompiledFusion c = compile_fusion(*parse_fusion(testing::read_file(testing::source_path("examples/tp_mlp.fusion")), "t"), Target::cpu);
  EXPECT_EQ(c.local->find_value("h")->type_str(), "f32[T, 512]");
  EXPECT_EQ(c.local->find_value("w_fc")->type_str(), "f32[512, 256]");
  EXPECT_EQ(c.local->find_value("y")->type_str(), "f32[T, 256]");
  EXPECT_EQ(c.global->find_value("h")->type_str(), "f32[T, 1024]");
}

TEST(ShardingRules, AFusionWithoutAMesh_IsUntouched) {
  CompiledFusion c = compile_fusion(*parse_fusion(testing::read_file(testing::source_path("examples/mlp.fusion")), "t"), Target::cpu);
  EXPECT_FALSE(c.mesh.has_value());
  EXPECT_EQ(c.global, nullptr);
}

// ---- user diagnostics ----------------------------------------------------------------------

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ShardingErrors, MeshesThatDiffer_AreRejectedAtTheSecond) {
  std::string e = error_of([] {
    compile_fusion(*parse_fusion("fusion f(a: f32[4] @mesh[0, 1] replicated,\n b: f32[4] @mesh[0, 1, 2] replicated) {\n"
                                 "  c = add(a, b)\n  return c\n}", "m.fusion"),
                   Target::cpu);
  });
  EXPECT_TRUE(has(e, "m.fusion:2:2")) << e;
  EXPECT_TRUE(has(e, "'b' is on @mesh[0, 1, 2] but 'a' is on @mesh[0, 1]")) << e;
}

TEST(ShardingErrors, ACollectiveWrittenInAFusionWithAMesh_IsRejectedAtItsLine) {
  std::string e = error_of([] {
    compile_fusion(*parse_fusion("fusion f(x: f32[4, 2] @mesh[0, 1] shard(axis=0)) {\n  y = all_gather(x, axis=0)\n  return y\n}",
                                 "g.fusion"),
                   Target::cpu);
  });
  EXPECT_TRUE(has(e, "g.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "all_gather is a resharding step that Alloy inserts itself")) << e;
}

TEST(ShardingErrors, AConstantSizeTheMeshDoesNotDivide_NamesValueAxisSizeAndMesh) {
  std::string e = error_of([] {
    compile_fusion(*parse_fusion("fusion f(x: f32[7, 4] @mesh[0, 1] shard(axis=0)) {\n  y = exp(x)\n  return y\n}", "d.fusion"),
                   Target::cpu);
  });
  EXPECT_TRUE(has(e, "d.fusion:1:10")) << e;
  EXPECT_TRUE(has(e, "'x' is sharded along axis 0 of size 7, which the 2 devices of @mesh[0, 1] do not divide evenly")) << e;
}

TEST(ShardingErrors, ASymbolicSizeTheMeshDoesNotDivide_IsCaughtWhenBound) {
  auto fusion = parse_fusion("fusion f(x: f32[T, 4] @mesh[0] shard(axis=0)) {\n  y = exp(x)\n  return y\n}", "s.fusion");
  FusionExecutor ok(fusion->clone(), {DeviceChoice::cpu});
  EXPECT_EQ(ok.run({Tensor::empty(DType::f32, {5, 4})}).at(0).size(0), 5);  // a mesh of one divides everything
  std::string e = error_of([] {
    compile_fusion(*parse_fusion("fusion f(x: f32[6, 4] @mesh[0, 1, 2, 3] shard(axis=0)) {\n  y = exp(x)\n  return y\n}", "s.fusion"),
                   Target::cpu);
  });
  EXPECT_TRUE(has(e, "size 6, which the 4 devices of @mesh[0, 1, 2, 3] do not divide evenly")) << e;
}

TEST(ShardingErrors, AMeshLargerThanTheJob_SaysHowToLaunchIt) {
  if (multidevice::process().size > 1) GTEST_SKIP() << "runs in a job of one process";
  FusionExecutor executor(parse_fusion(testing::read_file(testing::source_path("examples/tp_mlp.fusion")), "t"), {DeviceChoice::cpu});
  std::string e = error_of([&] { executor.run({}); });
  EXPECT_TRUE(has(e, "the mesh has 2 devices")) << e;
  EXPECT_TRUE(has(e, "mpirun -n 2")) << e;
}

TEST(ShardingErrors, ADeviceListedTwice_IsAParseError) {
  std::string e = error_of([] { parse_fusion("fusion f(a: f32[4] @mesh[0, 0] replicated) {\n  return a\n}", "p.fusion"); });
  EXPECT_TRUE(has(e, "p.fusion:1:29")) << e;
  EXPECT_TRUE(has(e, "device 0 appears twice in the mesh")) << e;
}

TEST(ShardingErrors, DumpAfterAnUnknownPass_NamesThePasses) {
  FusionExecutor executor(parse_fusion(testing::read_file(testing::source_path("examples/tp_mlp.fusion")), "t"), {DeviceChoice::cpu});
  std::string e = error_of([&] { executor.dump("after=no_such_pass"); });
  EXPECT_TRUE(has(e, "propagate_sharding")) << e;
  EXPECT_TRUE(has(executor.dump("after=insert_resharding"), "all_reduce(y__partial")) << executor.dump("after=insert_resharding");
}

// A pass's dump keeps the fusion's in-place returns (the passes drop them; the segmenter reads
// them from the fusion as declared): parsed again, it writes where the fusion writes.
TEST(ShardingErrors, DumpsAfterEachPass_KeepTheInPlaceReturns) {
  FusionExecutor executor(parse_fusion("fusion f(x: f32[4, 2] @mesh[0] replicated) {\n  y = mul(x, 2.0)\n  s = softmax(y, dim=1)\n"
                                       "  return s, y -> x\n}\n",
                                       "p.fusion"),
                          {DeviceChoice::cpu});
  for (const char* pass : {"decompose_composites", "propagate_sharding", "insert_resharding", "localize_shards"}) {
    std::string text = executor.dump(std::string("after=") + pass);
    EXPECT_TRUE(has(text, "return s, y -> x")) << pass << "\n" << text;
  }
}

}  // namespace
}  // namespace alloy
