// Which ops a matmul's cuBLASLt epilogue takes, checked through the CUDA segmentation (decided on
// the host, so these run without a GPU), and the backward example running on the CPU.
#include "alloy/segment/schedulers/matmul_epilogue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "alloy/ir/parser.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"
#include "test_util.h"

namespace alloy {
namespace {


using V = std::vector<std::string>;

struct Segmented {
  std::unique_ptr<Fusion> fusion;
  Segmentation s;
};

Segmented segment_text(const std::string& text) {
  Segmented out;
  out.fusion = decompose_composites(*parse_fusion(text, "t.fusion", std::nullopt));
  out.s = segment_for_cuda(*out.fusion);
  return out;
}

Segmented segment_example(const std::string& relative) {
  Segmented out;
  out.fusion = decompose_composites(*parse_fusion_file(testing::source_path(relative)));
  out.s = segment_for_cuda(*out.fusion);
  return out;
}

V schedulers(const Segmentation& s) {
  V out;
  for (auto& seg : s.segments) out.push_back(scheduler_name(seg.scheduler));
  return out;
}

V op_names(const Segment& seg) {
  V out;
  for (const Op* op : seg.ops) out.push_back(op->outputs[0]->name);
  return out;
}

V value_names(const std::vector<Value*>& values) {
  V out;
  for (const Value* v : values) out.push_back(v->name);
  return out;
}

// The matmul segments, in order.
std::vector<const Segment*> matmuls(const Segmentation& s) {
  std::vector<const Segment*> out;
  for (auto& seg : s.segments)
    if (seg.scheduler == SchedulerKind::matmul) out.push_back(&seg);
  return out;
}

EpilogueKind kind_of(const Segment& seg) {
  EXPECT_TRUE(seg.epilogue) << "segment " << seg.id << " has no epilogue match";
  return seg.epilogue ? seg.epilogue->kind : EpilogueKind::none;
}

// Whether some refusal's reason contains `text`.
bool refused_with(const Segmentation& s, const std::string& text) {
  for (const Refusal& r : s.refusals)
    if (r.why.find(text) != std::string::npos) return true;
  return false;
}

// ---- forward ----

TEST(MatmulEpilogue, MlpForward_FirstLinearTakesTanhGelu_SecondKeepsItsBias) {
  Segmented f = segment_example("examples/mlp.fusion");
  ASSERT_EQ(schedulers(f.s), (V{"matmul", "matmul"})) << f.s.str();
  const Segment& fc = f.s.segments[0];
  EXPECT_EQ(kind_of(fc), EpilogueKind::gelu_bias);
  EXPECT_EQ(op_names(fc), (V{"h", "g"}));
  EXPECT_EQ(value_names(fc.outputs), V{"g"});
  EXPECT_EQ(fc.epilogue->bias->name, "b_fc");
  EXPECT_EQ(fc.epilogue->result->name, "g");
  EXPECT_EQ(fc.note, "epilogue: gelu_bias (bias: b_fc, result: g)");
  EXPECT_EQ(kind_of(f.s.segments[1]), EpilogueKind::bias);
  EXPECT_NE(f.s.str().find("[matmul] epilogue: gelu_bias"), std::string::npos) << f.s.str();
}

TEST(MatmulEpilogue, PreActivationUsedLater_IsSavedAsTheAuxOutput) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: bf16[128]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="tanh")
  return g, h
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  const Segment& seg = f.s.segments[0];
  EXPECT_EQ(kind_of(seg), EpilogueKind::gelu_aux_bias);
  EXPECT_EQ(seg.epilogue->aux->name, "h");
  EXPECT_EQ(value_names(seg.outputs), (V{"h", "g"}));
  EXPECT_EQ(seg.note, "epilogue: gelu_aux_bias (bias: b, aux: h, result: g)");
}

TEST(MatmulEpilogue, MatmulWithoutBias_TakesGeluAndReluAlone) {
  Segmented gelu = segment_text(R"(fusion f(a: bf16[M, 32], b: bf16[32, 48]) {
  p = matmul(a, b)
  g = gelu(p, approximate="tanh")
  return g, p
})");
  ASSERT_EQ(schedulers(gelu.s), V{"matmul"}) << gelu.s.str();
  EXPECT_EQ(kind_of(gelu.s.segments[0]), EpilogueKind::gelu_aux);
  Segmented relu = segment_text(R"(fusion f(a: f32[M, 32], b: f32[32, 48]) {
  p = matmul(a, b)
  r = relu(p)
  return r
})");
  ASSERT_EQ(schedulers(relu.s), V{"matmul"}) << relu.s.str();
  EXPECT_EQ(kind_of(relu.s.segments[0]), EpilogueKind::relu);
}

TEST(MatmulEpilogue, GeluOnAnF32Result_StaysOutside_ReluIsTaken) {
  Segmented f = segment_text(R"(fusion f(x: f32[T, 64], w: f32[128, 64], b: f32[128]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="tanh")
  return g
})");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias);
  EXPECT_TRUE(refused_with(f.s, "f32 result: cuBLASLt's GELU may use an approximate tanh")) << f.s.str();
  Segmented relu = segment_text(R"(fusion f(x: f32[T, 64], w: f32[128, 64], b: f32[128]) {
  h = linear(x, w, b)
  r = relu(h)
  return r
})");
  ASSERT_EQ(schedulers(relu.s), V{"matmul"}) << relu.s.str();
  EXPECT_EQ(kind_of(relu.s.segments[0]), EpilogueKind::relu_bias);
}

TEST(MatmulEpilogue, GeluWithoutApproximation_StaysOutsideAndSaysWhy) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: bf16[128]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="none")
  return g
})");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias);
  EXPECT_TRUE(refused_with(f.s, "gelu approximate=\"none\": cuBLASLt's GELU is the tanh approximation")) << f.s.str();
  EXPECT_NE(f.s.str().find("matmul epilogue refused {h=linear, g=gelu}"), std::string::npos) << f.s.str();
}

TEST(MatmulEpilogue, Silu_HasNoEpilogue) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: bf16[128]) {
  h = linear(x, w, b)
  s = silu(h)
  return s
})");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias);
  EXPECT_TRUE(refused_with(f.s, "silu has no cuBLASLt epilogue")) << f.s.str();
}

TEST(MatmulEpilogue, AddOfAFullTensor_IsNotABias) {
  Segmented f = segment_text(R"(fusion f(a: bf16[M, 32], b: bf16[32, 48], c: bf16[M, 48]) {
  p = matmul(a, b)
  y = add(p, c)
  return y
})");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "add of a full tensor (c: bf16[M, 48]) is not a bias")) << f.s.str();
}

TEST(MatmulEpilogue, AddOfAColumn_VariesAlongTheRows_IsNotABias) {
  Segmented f = segment_text(R"(fusion f(a: f32[M, 32], b: f32[32, 48], c: f32[M, 1]) {
  p = matmul(a, b)
  y = add(p, c)
  return y
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "varies along the rows")) << f.s.str();
}

TEST(MatmulEpilogue, VectorBroadcastLikeNumpy_IsTheBias) {
  Segmented f = segment_text(R"(fusion f(a: bf16[B, S, 32], b: bf16[32, 48], v: bf16[48]) {
  p = matmul(a, b)
  y = add(v, p)
  r = relu(y)
  return r
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::relu_bias);
  EXPECT_EQ(f.s.segments[0].epilogue->bias->name, "v");
}

TEST(MatmulEpilogue, BroadcastInDimBias_JoinsTheSegment) {
  Segmented f = segment_text(R"(fusion f(a: bf16[M, 32], b: bf16[32, 48], v: bf16[48]) {
  p = matmul(a, b)
  vb = broadcast_in_dim(v, shape=[M, 48], broadcast_dims=[1])
  y = add(p, vb)
  g = gelu(y, approximate="tanh")
  return g
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  const Segment& seg = f.s.segments[0];
  EXPECT_EQ(kind_of(seg), EpilogueKind::gelu_bias);
  EXPECT_EQ(op_names(seg), (V{"p", "vb", "y", "g"}));
  EXPECT_EQ(value_names(seg.inputs), (V{"a", "b", "v"}));
  EXPECT_EQ(seg.epilogue->bias->name, "v");
}

TEST(MatmulEpilogue, ExpandedRowVectorBias_IsTaken) {
  Segmented f = segment_text(R"(fusion f(a: f32[M, 32], b: f32[32, 48], v: f32[1, 48]) {
  p = matmul(a, b)
  ve = expand(v, shape=[M, 48])
  y = add(p, ve)
  return y
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias);
  EXPECT_EQ(f.s.segments[0].epilogue->bias->name, "v");
}

TEST(MatmulEpilogue, OutputCastRoundTrip_WritesTheHalfResultDirectly) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: f32[128]) {
  p = linear(x, w)
  p32 = cast(p, dtype=f32)
  h = add(p32, b)
  g = gelu(h, approximate="tanh")
  y = cast(g, dtype=bf16)
  return y
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  const Segment& seg = f.s.segments[0];
  EXPECT_EQ(kind_of(seg), EpilogueKind::gelu_bias);
  EXPECT_EQ(op_names(seg), (V{"p", "p32", "h", "g", "y"}));
  EXPECT_EQ(seg.epilogue->result->name, "y");
  EXPECT_EQ(seg.epilogue->bias->name, "b");
}

TEST(MatmulEpilogue, WideResultWithoutCastBack_StaysOutside) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64]) {
  p = linear(x, w)
  p32 = cast(p, dtype=f32)
  g = gelu(p32, approximate="tanh")
  return g
})");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "would skip rounding the product to bf16")) << f.s.str();
}

TEST(MatmulEpilogue, CastToAnotherHalfType_StaysOutside) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64]) {
  p = linear(x, w)
  y = cast(p, dtype=f16)
  return y
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "cast to f16: cuBLASLt writes the product's dtype (bf16)")) << f.s.str();
}

TEST(MatmulEpilogue, ReluWithPreActivationUsedLater_StaysOutside) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: bf16[128]) {
  h = linear(x, w, b)
  r = relu(h)
  return r, h
})");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias);
  EXPECT_TRUE(refused_with(f.s, "relu_aux saves a bit mask, not h")) << f.s.str();
}

TEST(MatmulEpilogue, SecondBiasAdd_StaysOutside) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: bf16[128], c: bf16[128]) {
  h = linear(x, w, b)
  y = add(h, c)
  return y
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias);
  EXPECT_TRUE(refused_with(f.s, "a second bias add")) << f.s.str();
}

TEST(MatmulEpilogue, ProductAlsoReturned_KeepsTheBiasAddOutside) {
  Segmented f = segment_text(R"(fusion f(a: f32[M, 32], b: f32[32, 48], v: f32[48]) {
  p = matmul(a, b)
  y = add(p, v)
  return y, p
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "p is also used outside the GEMM")) << f.s.str();
}

TEST(MatmulEpilogue, BatchedRightOperand_TakesNoEpilogue) {
  Segmented f = segment_text(R"(fusion f(a: f32[B, M, 32], b: f32[B, 32, 48], v: f32[48]) {
  p = matmul(a, b)
  y = add(p, v)
  return y
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "batched or vector right operand")) << f.s.str();
}

TEST(MatmulEpilogue, BiasComputedFromTheProduct_KeepsTheAddOutside) {
  Segmented f = segment_text(R"(fusion f(a: f32[M, 32], b: f32[32, 48]) {
  p = matmul(a, b)
  s = sum(p, dims=[0])
  y = add(p, s)
  return y
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "p is also used outside the GEMM")) << f.s.str();
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "normalization"})) << f.s.str();
}

TEST(MatmulEpilogue, BiasComputedAfterTheMatmul_IsPlacedBeforeItsSegment) {
  Segmented f = segment_text(R"(fusion f(a: f32[M, 32], b: f32[32, 48], v: f32[48]) {
  p = matmul(a, b)
  e = exp(v)
  y = add(p, e)
  return y
})");
  ASSERT_EQ(schedulers(f.s), (V{"pointwise", "matmul"})) << f.s.str();
  EXPECT_EQ(op_names(f.s.segments[0]), V{"e"});
  EXPECT_EQ(kind_of(f.s.segments[1]), EpilogueKind::bias);
  EXPECT_EQ(f.s.segments[1].epilogue->bias->name, "e");
}

// ---- backward ----

TEST(MatmulEpilogue, MlpBackward_IsFourGemmsWithTheirEpilogues) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");  // the bias-gradient kinds are off by default
  Segmented f = segment_example("examples/mlp_backward.fusion");
  ASSERT_EQ(schedulers(f.s), (V{"matmul", "matmul", "matmul", "matmul"})) << f.s.str();
  const Segment& dw_proj = f.s.segments[0];
  EXPECT_EQ(kind_of(dw_proj), EpilogueKind::bgrad_a);
  EXPECT_EQ(op_names(dw_proj), (V{"dy_t", "dw_proj", "db_proj"}));
  EXPECT_EQ(dw_proj.epilogue->bias->name, "db_proj");
  const Segment& dg = f.s.segments[1];
  EXPECT_EQ(kind_of(dg), EpilogueKind::dgelu_bgrad);
  EXPECT_EQ(op_names(dg), (V{"dg", "dh", "db_fc"}));
  EXPECT_EQ(dg.epilogue->aux->name, "h");
  EXPECT_EQ(dg.epilogue->result->name, "dh");
  EXPECT_EQ(dg.note, "epilogue: dgelu_bgrad (bias gradient: db_fc, aux: h, result: dh)");
  EXPECT_EQ(value_names(dg.outputs), (V{"dh", "db_fc"}));
  EXPECT_EQ(kind_of(f.s.segments[2]), EpilogueKind::none);
  EXPECT_EQ(op_names(f.s.segments[2]), (V{"dh_t", "dw_fc"}));
  EXPECT_EQ(kind_of(f.s.segments[3]), EpilogueKind::none);
}

// By default (measured faster) the bias-gradient kinds are off: dGELU stays in the GEMM and the
// sums run as generated column reductions, each with its reason.
TEST(MatmulEpilogue, MlpBackward_ByDefault_LeavesTheBiasGradientsToColumnKernels) {
  Segmented f = segment_example("examples/mlp_backward.fusion");
  const Segment* dg = nullptr;
  int sums = 0;
  for (const Segment& s : f.s.segments) {
    if (s.epilogue && s.epilogue->aux) dg = &s;
    for (const Op* op : s.ops) sums += op->kind == OpKind::sum && s.scheduler != SchedulerKind::matmul;
    if (s.scheduler == SchedulerKind::matmul) EXPECT_NE(kind_of(s), EpilogueKind::dgelu_bgrad);
  }
  ASSERT_NE(dg, nullptr) << f.s.str();
  EXPECT_EQ(kind_of(*dg), EpilogueKind::dgelu);
  EXPECT_EQ(sums, 2) << f.s.str();
  EXPECT_NE(f.s.str().find("dgelu_bgrad is off (ALLOY_DISABLE_EPILOGUES)"), std::string::npos) << f.s.str();
}

TEST(MatmulEpilogue, WeightGradientOfTransposedActivations_TakesBgradB) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");  // the bias-gradient kinds are off by default
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 32], dy: bf16[T, 48]) {
  x_t = permute(x, dims=[1, 0])
  dw_t = matmul(x_t, dy)
  db = sum(dy, dims=[0])
  return dw_t, db
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bgrad_b);
  EXPECT_EQ(f.s.segments[0].epilogue->bias->name, "db");
}

TEST(MatmulEpilogue, BiasGradientDefinedBeforeTheMatmul_IsStillTaken) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");  // the bias-gradient kinds are off by default
  Segmented f = segment_text(R"(fusion f(x: f32[T, 32], dy: f32[T, 48]) {
  db = sum(dy, dims=[0])
  dy_t = permute(dy, dims=[1, 0])
  dw = matmul(dy_t, x)
  return dw, db
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bgrad_a);
  EXPECT_EQ(op_names(f.s.segments[0]), (V{"db", "dy_t", "dw"}));
}

TEST(MatmulEpilogue, GeluBackwardWithoutApproximation_StaysOutside) {
  Segmented f = segment_text(R"(fusion f(dy: bf16[T, 48], w: bf16[48, 96], h: bf16[T, 96]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h)
  return dh
})");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise"})) << f.s.str();
  EXPECT_TRUE(refused_with(f.s, "cuBLASLt's dGELU is the derivative of the tanh approximation")) << f.s.str();
}

TEST(MatmulEpilogue, GeluBackwardWithoutBiasGradient_IsDgelu_ButNotInF32) {
  const char* text = R"(fusion f(dy: DT[T, 48], w: DT[48, 96], h: DT[T, 96]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h, approximate="tanh")
  return dh
})";
  auto with = [&](const std::string& dtype) {
    std::string t = text;
    for (size_t at = t.find("DT"); at != std::string::npos; at = t.find("DT")) t.replace(at, 2, dtype);
    return segment_text(t);
  };
  Segmented f16 = with("f16");
  ASSERT_EQ(schedulers(f16.s), V{"matmul"}) << f16.s.str();
  EXPECT_EQ(kind_of(f16.s.segments[0]), EpilogueKind::dgelu);
  Segmented f32 = with("f32");
  EXPECT_EQ(schedulers(f32.s), (V{"matmul", "pointwise"})) << f32.s.str();
  EXPECT_TRUE(refused_with(f32.s, "f32 result")) << f32.s.str();
}

TEST(MatmulEpilogue, ReluBackward_IsRefusedForWantOfTheBitMask) {
  Segmented f = segment_text(R"(fusion f(dy: bf16[T, 48], w: bf16[48, 96], h: bf16[T, 96]) {
  dg = matmul(dy, w)
  dh = relu_backward(dg, h)
  db = sum(dh, dims=[0])
  return dh, db
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "relu_backward: cuBLASLt's dReLU reads the ReLU bit mask")) << f.s.str();
  EXPECT_TRUE(refused_with(f.s, "h is an input")) << f.s.str();
}

TEST(MatmulEpilogue, MatchingDirectly_ReportsEveryPart) {
  auto f = parse_fusion(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: bf16[128]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="tanh")
  s = silu(g)
  return s, h
})", "t.fusion", std::nullopt);
  const Op& linear = *f->ops()[0];
  EpilogueMatch m = match_matmul_epilogue(*f, linear);
  EXPECT_EQ(m.kind, EpilogueKind::gelu_aux_bias);
  EXPECT_EQ(m.result->name, "g");
  EXPECT_EQ(m.aux->name, "h");
  ASSERT_EQ(m.not_taken.size(), 1u);
  EXPECT_EQ(m.not_taken[0].op->outputs[0]->name, "s");
  // an op another match already took is left alone
  EpilogueMatch without = match_matmul_epilogue(*f, linear, {f->ops()[1].get()});
  EXPECT_EQ(without.kind, EpilogueKind::bias);
}

// ---- ReLU's bit mask: relu_aux forward, drelu backward ----

TEST(MatmulEpilogue, ReluWithItsMask_IsReluAuxBias_WritingTheMask) {
  Segmented f = segment_example("examples/mlp_relu.fusion");
  ASSERT_EQ(schedulers(f.s), (V{"matmul", "matmul"})) << f.s.str();
  const Segment& first = f.s.segments[0];
  EXPECT_EQ(kind_of(first), EpilogueKind::relu_aux_bias);
  EXPECT_EQ(op_names(first), (V{"h", "a", "mask"}));
  EXPECT_EQ(first.note, "epilogue: relu_aux_bias (bias: b1, aux: mask, result: a)");
  EXPECT_EQ(value_names(first.outputs), (V{"a", "mask"}));
  EXPECT_EQ(kind_of(f.s.segments[1]), EpilogueKind::bias);
}

TEST(MatmulEpilogue, ReluMaskWithoutBias_IsReluAux_WhateverTheOrderOfDefinition) {
  Segmented f = segment_text(R"(fusion f(x: f32[T, 64], w: f32[64, 256]) {
  p = matmul(x, w)
  m = relu_mask(p)
  r = relu(p)
  return r, m
})");
  ASSERT_EQ(schedulers(f.s), V{"matmul"}) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::relu_aux);
  EXPECT_EQ(f.s.segments[0].epilogue->aux->name, "m");
  EXPECT_EQ(f.s.segments[0].epilogue->result->name, "r");
}

// cuBLASLt's mask rows are a multiple of 128 bits apart: other widths (or a symbol not known to
// be such a multiple) leave relu and the mask to generated kernels, saying why.
TEST(MatmulEpilogue, ReluMaskOfOtherWidths_RunsAsABitmaskKernel) {
  for (const char* n : {"100", "96", "H"}) {
    SCOPED_TRACE(n);
    std::string text = std::string("fusion f(x: bf16[T, 64], w: bf16[") + n + ", 64], b: bf16[" + n + "]) {\n" +
                       "  h = linear(x, w, b)\n  a = relu(h)\n  m = relu_mask(h)\n  return a, m\n}\n";
    Segmented g = segment_text(text);
    EXPECT_EQ(schedulers(g.s), (V{"matmul", "pointwise", "bitmask"})) << g.s.str();
    EXPECT_EQ(kind_of(g.s.segments[0]), EpilogueKind::bias);
    EXPECT_TRUE(refused_with(g.s, std::string("cuBLASLt's ReLU bit mask needs ") + n + " output features to be a multiple of 128"))
        << g.s.str();
    EXPECT_TRUE(refused_with(g.s, "m = relu_mask packs 32 elements to a word: it runs as a bitmask kernel of its own")) << g.s.str();
  }
}

TEST(MatmulEpilogue, ReluAux_CanBeDisabled) {
  testing::ScopedEnv off("ALLOY_DISABLE_EPILOGUES", "relu_aux_bias");
  Segmented f = segment_example("examples/mlp_relu.fusion");
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "pointwise", "bitmask", "matmul"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias);
  EXPECT_TRUE(refused_with(f.s, "relu_aux_bias is off (ALLOY_DISABLE_EPILOGUES): the mask runs as a bitmask kernel")) << f.s.str();
}

TEST(MatmulEpilogue, ReluWhosePreActivationIsReadByOthersToo_StaysOutside) {
  Segmented f = segment_text(R"(fusion f(x: bf16[T, 64], w: bf16[128, 64], b: bf16[128]) {
  h = linear(x, w, b)
  a = relu(h)
  m = relu_mask(h)
  return a, m, h
})");
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::bias) << f.s.str();
  EXPECT_TRUE(refused_with(f.s, "relu_aux saves a bit mask, not h")) << f.s.str();
}

TEST(MatmulEpilogue, MlpReluBackward_TakesDreluReadingTheMask) {
  Segmented f = segment_example("examples/mlp_relu_backward.fusion");
  const Segment* da = nullptr;
  for (const Segment& s : f.s.segments)
    if (s.scheduler == SchedulerKind::matmul && s.epilogue && s.epilogue->aux) da = &s;
  ASSERT_NE(da, nullptr) << f.s.str();
  EXPECT_EQ(kind_of(*da), EpilogueKind::drelu);  // drelu_bgrad is off by default, like dgelu_bgrad
  EXPECT_EQ(op_names(*da), (V{"da", "dh"}));
  EXPECT_EQ(da->note, "epilogue: drelu (aux: mask, result: dh)");
  EXPECT_TRUE(refused_with(f.s, "drelu_bgrad is off (ALLOY_DISABLE_EPILOGUES)")) << f.s.str();
  for (const Segment& s : f.s.segments) EXPECT_NE(s.scheduler, SchedulerKind::bitmask) << f.s.str();
}

TEST(MatmulEpilogue, MlpReluBackward_WithEveryKind_TakesDreluBgrad) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");
  Segmented f = segment_example("examples/mlp_relu_backward.fusion");
  ASSERT_EQ(schedulers(f.s), (V{"matmul", "matmul", "matmul", "matmul"})) << f.s.str();
  const Segment& da = f.s.segments[1];
  EXPECT_EQ(kind_of(da), EpilogueKind::drelu_bgrad);
  EXPECT_EQ(op_names(da), (V{"da", "dh", "db1"}));
  EXPECT_EQ(da.note, "epilogue: drelu_bgrad (bias gradient: db1, aux: mask, result: dh)");
  EXPECT_EQ(value_names(da.outputs), (V{"dh", "db1"}));
}

TEST(MatmulEpilogue, DreluOfOtherWidthsOrDisabled_RunsAsABitmaskKernel) {
  const std::string text = R"(fusion f(dy: bf16[T, 48], w: bf16[48, 100], m: i32[T, 4]) {
  dg = matmul(dy, w)
  dh = relu_backward_mask(dg, m)
  return dh
})";
  Segmented f = segment_text(text);
  EXPECT_EQ(schedulers(f.s), (V{"matmul", "bitmask"})) << f.s.str();
  EXPECT_EQ(kind_of(f.s.segments[0]), EpilogueKind::none);
  EXPECT_TRUE(refused_with(f.s, "relu_backward_mask: cuBLASLt's ReLU bit mask needs 100 output features to be a multiple of 128"))
      << f.s.str();
  testing::ScopedEnv off("ALLOY_DISABLE_EPILOGUES", "drelu");
  std::string wide = R"(fusion f(dy: bf16[T, 48], w: bf16[48, 128], m: i32[T, 4]) {
  dg = matmul(dy, w)
  dh = relu_backward_mask(dg, m)
  return dh
})";
  Segmented g = segment_text(wide);
  EXPECT_EQ(schedulers(g.s), (V{"matmul", "bitmask"})) << g.s.str();
  EXPECT_TRUE(refused_with(g.s, "drelu disabled by ALLOY_DISABLE_EPILOGUES")) << g.s.str();
}

// ---- the backward example runs on the CPU ----

TEST(MatmulEpilogue, MlpBackwardExample_RunsOnTheCpu) {
  auto fusion = parse_fusion_file(testing::source_path("examples/mlp_backward.fusion"));
  std::vector<Tensor> given(fusion->inputs().size());
  std::vector<Tensor> inputs = complete_inputs(*fusion, given, {{"T", 8}}, 3);
  FusionExecutor exec(std::move(fusion), {DeviceChoice::cpu});
  std::vector<Tensor> out = exec.run(inputs);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].sizes(), (std::vector<int64_t>{8, 768}));    // dx
  EXPECT_EQ(out[1].sizes(), (std::vector<int64_t>{3072, 768})); // dw_fc
  EXPECT_EQ(out[2].sizes(), (std::vector<int64_t>{3072}));      // db_fc
  EXPECT_EQ(out[3].sizes(), (std::vector<int64_t>{768, 3072})); // dw_proj
  // db_proj is the column sum of dy, computed here independently
  const Tensor& dy = inputs[0];
  for (int64_t j : {0, 1, 767}) {
    double sum = 0;
    for (int64_t t = 0; t < 8; ++t) sum += load_as_double(dy.data(), dy.dtype(), t * dy.stride(0) + j * dy.stride(1));
    double got = load_as_double(out[4].data(), out[4].dtype(), j);
    EXPECT_NEAR(got, sum, 1e-2 * (1 + std::fabs(sum))) << "db_proj[" << j << "]";
  }
}

}  // namespace
}  // namespace alloy
