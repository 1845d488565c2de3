// The CUDA segmentation is decided on the host, so these run without a GPU.
#include "alloy/segment/schedulers/cuda_segmenter.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/segment/schedulers/kernel_analysis.h"
#include "backend/cuda/kernel_cases.h"
#include "test_util.h"

namespace alloy {
namespace {

std::vector<std::string> schedulers(const Segmentation& s) {
  std::vector<std::string> out;
  for (auto& seg : s.segments) out.push_back(scheduler_name(seg.scheduler));
  return out;
}

using V = std::vector<std::string>;

TEST(CudaSegmenter, TracedLayerNormIsOneKernel) {
  auto f = parse_fusion_file(testing::source_path("examples/layer_norm.fusion"));
  Segmentation s = segment_for_cuda(*f);
  // views of the inputs are made on the host inside the kernel's segment: one launch
  ASSERT_EQ(schedulers(s), V{"normalization"}) << s.str();
  EXPECT_EQ(s.segments[0].outputs.size(), 3u);
}

TEST(CudaSegmenter, ChainedNormalizationsOverTheSameRowsShareOneKernel) {
  auto f = parse_fusion(R"(
fusion f(x: bf16[B, 64], w: bf16[64], b: bf16[64]) {
  y = softmax(x, dim=-1)
  z = layer_norm(y, w, b, normalized_ndim=1, eps=1e-5)
  r = rms_norm(z, w, normalized_ndim=1)
  return r
})", "t.fusion", std::nullopt);
  auto lowered = decompose_composites(*f);
  Segmentation s = segment_for_cuda(*lowered);
  // softmax, layer norm and RMSNorm reduce the same axis: one persistent kernel, five reductions
  EXPECT_EQ(schedulers(s), V{"normalization"}) << s.str();
}

TEST(CudaSegmenter, MlpIsTwoMatmulsWithTheGeluInTheFirstEpilogue) {
  auto f = parse_fusion_file(testing::source_path("examples/mlp.fusion"));
  Segmentation s = segment_for_cuda(*f);
  // the tanh GELU runs in the first GEMM's epilogue (segment/schedulers/matmul_epilogue.h)
  EXPECT_EQ(schedulers(s), (V{"matmul", "matmul"})) << s.str();
}

TEST(CudaSegmenter, PointwiseChainWithBroadcastIsOneKernel) {
  auto f = parse_fusion(R"(
fusion f(a: bf16[N, 4], b: bf16[4], c: f32[N, 1]) {
  m = mul(a, b)
  s = add(m, c)
  g = gelu(s)
  return g
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  EXPECT_EQ(schedulers(s), V{"pointwise"}) << s.str();
}

TEST(CudaSegmenter, ReductionsOverDifferentAxesSplit) {
  auto f = parse_fusion(R"(
fusion f(x: f32[8, 16]) {
  rows = sum(x, dims=[1])
  total = sum(rows, dims=[0])
  return total
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  EXPECT_EQ(schedulers(s), (V{"reduction", "reduction"})) << s.str();
  ASSERT_FALSE(s.refusals.empty());
  EXPECT_NE(s.refusals[0].why.find("not over the whole domain"), std::string::npos) << s.str();
}

// The layer norm backward: dx from two row sums, beside dw and db, sums over the rows of values
// the row kernel computes per element: one inner_outer kernel, whose note names both kinds of
// reductions; likewise the RMSNorm backward (dw only).
TEST(CudaSegmenter, LayerNormAndRmsNormBackwardsAreOneInnerOuterKernel) {
  for (const std::string& text : {testing::layer_norm_backward("bf16"), testing::rms_norm_backward("f32")}) {
    auto f = parse_fusion(text, "t.fusion", std::nullopt);
    Segmentation s = segment_for_cuda(*f);
    ASSERT_EQ(schedulers(s), V{"inner_outer"}) << s.str();
    const KernelAnalysis& a = *s.segments[0].analysis;
    EXPECT_EQ(a.reduced_axes, std::vector<int>{1});
    ASSERT_EQ(a.outer_reductions.size(), text.find("db32") == std::string::npos ? 1u : 2u);
    EXPECT_EQ(a.outer_reductions[0]->outputs[0]->name, "dw32");
    EXPECT_TRUE(a.at(f->outputs()[1]).per_column) << "dw is stored once per column";
    EXPECT_FALSE(a.single_pass);
    EXPECT_NE(s.str().find("segment 0 [inner_outer] (row reductions "), std::string::npos) << s.str();
    EXPECT_NE(s.str().find("over the rows: dw32"), std::string::npos) << s.str();
  }
}

// The column sums first, the row sums of the 3-D rows after: the row reductions set the domain
// whatever the order, and the column sums over [0, 1] are its outer reductions.
TEST(CudaSegmenter, ColumnSumsBeforeTheRowSumsOf3dRowsAreOneInnerOuterKernel) {
  auto f = parse_fusion(R"(fusion f(x: f32[B, S, D]) {
  c = sum(x, dims=[0, 1])
  r = sum(x, dims=[2], keepdim=true)
  y = sub(x, r)
  return c, y
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), V{"inner_outer"}) << s.str();
  EXPECT_EQ(s.segments[0].analysis->reduced_axes, std::vector<int>{2});
}

// A column sum read with a per-element value, a var_mean over the rows: the inner-outer kernel ends
// before them, and the refusal says why.
TEST(CudaSegmenter, WhatAnInnerOuterKernelCannotTake_IsRefusedWithItsReason) {
  auto f = parse_fusion(R"(fusion f(x: f32[N, D], w: f32[D]) {
  r = sum(x, dims=[1], keepdim=true)
  y = sub(x, r)
  c = sum(y, dims=[0])
  cw = mul(c, w)
  return y, cw
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), (V{"inner_outer", "pointwise"})) << s.str();
  ASSERT_FALSE(s.refusals.empty());
  EXPECT_NE(s.refusals[0].why.find("cw = mul reads c, a reduction over the rows complete only after every row, with w"), std::string::npos)
      << s.str();
  auto g = parse_fusion(R"(fusion g(x: f32[N, D]) {
  r = sum(x, dims=[1], keepdim=true)
  y = sub(x, r)
  v, m = var_mean(y, dims=[0], correction=1)
  return y, v
})", "t.fusion", std::nullopt);
  Segmentation t = segment_for_cuda(*g);
  ASSERT_EQ(schedulers(t), (V{"normalization", "reduction"})) << t.str();
  ASSERT_FALSE(t.refusals.empty());
  EXPECT_NE(t.refusals[0].why.find("var_mean over the rows beside row reductions: only sum, mean, max and min"), std::string::npos)
      << t.str();
}

TEST(CudaSegmenter, ViewOfAComputedOutputIsANoopSegment) {
  auto f = parse_fusion(R"(
fusion f(x: f32[8, 16]) {
  e = exp(x)
  r = reshape(e, shape=[128])
  return r
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  EXPECT_EQ(schedulers(s), (V{"pointwise", "noop"})) << s.str();
}

// RoPE (examples/rope.fusion): the slices are host views, neg(x2) is applied as the cat's first
// source loads, and the cat and everything after it are one kernel: y its only output.
TEST(CudaSegmenter, RopeIsOneKernelWithNoFallback) {
  auto f = parse_fusion_file(testing::source_path("examples/rope.fusion"));
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), (V{"pointwise"})) << s.str();
  ASSERT_EQ(s.segments[0].outputs.size(), 1u) << s.str();
  EXPECT_EQ(s.segments[0].outputs[0]->name, "y");
  auto analysis = analyze_kernel(s.segments[0].ops, s.segments[0].inputs, s.segments[0].outputs);
  ASSERT_TRUE(std::holds_alternative<KernelAnalysis>(analysis)) << std::get<std::string>(analysis);
  const KernelAnalysis& a = std::get<KernelAnalysis>(analysis);
  ASSERT_EQ(a.cat_leaves.size(), 1u);
  const CatLeaf& cat = a.cat_leaves.begin()->second;
  ASSERT_EQ(cat.sources.size(), 2u);
  EXPECT_EQ(cat.sources[0]->name, "x2");  // read from x2, negated as it loads
  ASSERT_EQ(cat.chains[0].size(), 1u);
  EXPECT_EQ(op_name(cat.chains[0][0]->kind), "neg");
  EXPECT_TRUE(cat.chains[1].empty());
  for (const Op* op : a.compute_ops) EXPECT_NE(op_name(op->kind), "neg") << "neg is computed, not folded into the cat";
}

// A cat operand of one input through one-input pointwise ops is folded into the cat's load; one
// of two tensor operands, read elsewhere, or stored, is computed by a kernel before the cat.
TEST(CudaSegmenter, CatOfAComputedValueStartsTheNextKernel) {
  auto f = parse_fusion(R"(
fusion f(x: f32[8], y: f32[8]) {
  e = add(x, y)
  c = cat(e, y, dim=0)
  return c
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  // the second kernel only copies: the cat's sources into its result
  EXPECT_EQ(schedulers(s), (V{"pointwise", "pointwise"})) << s.str();
  ASSERT_FALSE(s.refusals.empty());
  EXPECT_NE(s.refusals[0].why.find("cat of e, which is not a segment input"), std::string::npos) << s.str();
  for (const char* text : {"fusion f(x: f32[8], y: f32[8]) {\n  e = exp(x)\n  c = cat(e, y, dim=0)\n  return c, e\n}\n",
                           "fusion f(x: f32[8], y: f32[8]) {\n  e = exp(x)\n  c = cat(e, e, dim=0)\n  return c\n}\n"}) {
    Segmentation two = segment_for_cuda(*parse_fusion(text, "t.fusion", std::nullopt));
    EXPECT_EQ(two.segments.size(), 2u) << text << two.str();
  }
  Segmentation one = segment_for_cuda(*parse_fusion("fusion f(x: f32[8], y: f32[8]) {\n  e = exp(x)\n  c = cat(e, y, dim=0)\n  return c\n}\n",
                                                      "t.fusion", std::nullopt));
  EXPECT_EQ(schedulers(one), (V{"pointwise"})) << one.str();
}

TEST(CudaSegmenter, CatOfInputsAndViewsJoinsTheKernelThatReadsIt) {
  auto f = parse_fusion(R"(
fusion f(x: bf16[4, 6], y: bf16[2, 4], z: bf16[4, 8]) {
  yt = permute(y, dims=[1, 0])
  c = cat(x, yt, dim=1)
  p = mul(c, z)
  t = sum(p, dims=[1])
  u = cat(p, z, dim=0)
  return t, u
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  // cat(x, permute(y)) feeds a reduction in one kernel; cat(p, z) reads p, which that kernel computes
  EXPECT_EQ(schedulers(s), (V{"normalization", "pointwise"})) << s.str();
}

TEST(CudaSegmenter, IntegerMatmulFallsBackToTheCpuAndSaysWhy) {
  auto f = parse_fusion(R"(
fusion f(a: i32[4, 8], b: i32[8, 4]) {
  m = matmul(a, b)
  return m
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), (V{"cpu_fallback"})) << s.str();
  EXPECT_EQ(s.segments[0].note, "(i32 matmul: the cuBLASLt path takes bf16, f16 and f32 operands)");
  EXPECT_NE(s.str().find("segment 0 [cpu_fallback] (i32 matmul: the cuBLASLt path"), std::string::npos) << s.str();
}

// Cross-entropy, forward and backward, is one normalization kernel: the target logit gathered once
// a row (through the cast it reads, recomputed on the loaded element), the one-hot rows from iota's
// positions, nothing on the CPU fallback.
TEST(CudaSegmenter, CrossEntropyWithGatherAndIotaIsOneKernel) {
  auto f = parse_fusion_file(testing::source_path("examples/cross_entropy.fusion"));
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), V{"normalization"}) << s.str();
  const KernelAnalysis& a = *s.segments[0].analysis;
  ASSERT_EQ(a.gathers.size(), 1u);
  EXPECT_EQ(a.gathers[0].source->name, "logits");
  ASSERT_EQ(a.gathers[0].chain.size(), 1u);
  EXPECT_EQ(a.gathers[0].chain[0]->outputs[0]->name, "x");
  EXPECT_TRUE(a.at(a.gathers[0].op->outputs[0]).per_row) << "one target logit a row";
  ASSERT_EQ(a.iotas.size(), 1u);
  EXPECT_TRUE(a.is_position(a.iotas[0]->outputs[0]));
  EXPECT_FALSE(std::count(a.leaves.begin(), a.leaves.end(), a.gathers[0].op->inputs[0])) << "x is never loaded in vectors";
}

// A gather of a value a kernel computes otherwise than by one-input pointwise ops of a host-side
// value (here a softmax) loads it from memory: the kernel ends before the gather, saying why, and
// the next one gathers; an iota stored on its own is a kernel writing its positions.
TEST(CudaSegmenter, GatherOfAComputedValueStartsTheNextKernel) {
  auto f = decompose_composites(*parse_fusion(R"(
fusion f(x: f32[R, 40], i: i64[R, 3]) {
  p = softmax(x, dim=1)
  g = gather(p, i, dim=1)
  ids = iota(length=R, dtype=i32)
  return g, ids
})", "t.fusion", std::nullopt));
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), (V{"normalization", "pointwise", "pointwise"})) << s.str();
  ASSERT_FALSE(s.refusals.empty());
  EXPECT_NE(s.refusals[0].why.find("g = gather: gather of p, which is not a segment input, a view of one or one-input pointwise ops"),
            std::string::npos)
      << s.str();
  EXPECT_TRUE(s.segments[2].inputs.empty()) << s.str();
}

TEST(CudaSegmenter, ScalarResultIsComputedOnTheHostAndSaysWhy) {
  auto f = parse_fusion(R"(
fusion f(a: f32, x: f32[4]) {
  b = mul(a, 2.0)
  y = add(x, b)
  return y, b
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), (V{"cpu_fallback", "pointwise"})) << s.str();
  EXPECT_EQ(s.segments[0].note, "(b is a scalar: scalar arithmetic runs on the host; a kernel stores tensors)") << s.str();
}

// Issue 16, family 5: limits instead of failures. A chain longer than one kernel takes becomes
// several kernels (segmentation stays linear in the fusion's length), each at most 256 ops.
TEST(CudaSegmenter, AChainLongerThanAKernelTakesIsSeveralKernels) {
  std::string text = "fusion f(x: f32[8, 8]) {\n  t0 = add(x, 1.0)\n";
  for (int i = 1; i < 600; ++i) text += "  t" + std::to_string(i) + " = mul(t" + std::to_string(i - 1) + ", 1.5)\n";
  text += "  return t599\n}\n";
  auto f = parse_fusion(text, "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(s.segments.size(), 3u) << s.refusals.size();
  size_t ops = 0;
  for (const Segment& seg : s.segments) {
    EXPECT_EQ(seg.scheduler, SchedulerKind::pointwise);
    EXPECT_LE(seg.ops.size(), 256u);
    ops += seg.ops.size();
  }
  EXPECT_EQ(ops, 600u);
  ASSERT_FALSE(s.refusals.empty());
  EXPECT_NE(s.refusals[0].why.find("at most 256 ops"), std::string::npos) << s.refusals[0].why;
}

// Tensors whose pointers, sizes and strides would pass CUDA's 32 KB of kernel parameters are
// split over kernels: here 100 inputs of rank 40 summed in one chain.
TEST(CudaSegmenter, KernelParametersStayUnderCudasLimit) {
  std::string shape = "f32[";
  for (int d = 0; d < 40; ++d) shape += std::string(d ? ", " : "") + "2";
  shape += "]";
  std::string text = "fusion f(";
  for (int i = 0; i < 100; ++i) text += std::string(i ? ", " : "") + "x" + std::to_string(i) + ": " + shape;
  text += ") {\n  s1 = add(x0, x1)\n";
  for (int i = 2; i < 100; ++i) text += "  s" + std::to_string(i) + " = add(s" + std::to_string(i - 1) + ", x" + std::to_string(i) + ")\n";
  text += "  return s99\n}\n";
  auto f = parse_fusion(text, "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  ASSERT_GE(s.segments.size(), 2u);
  for (const Segment& seg : s.segments) {
    size_t tensors = seg.inputs.size() + seg.outputs.size();
    EXPECT_LE(8 + 40 + int64_t(tensors) * 41, 4000) << "segment " << seg.id << " has " << tensors << " tensors";
  }
}

std::string parse_error(const std::string& text) {
  try {
    parse_fusion(text, "t.fusion", std::nullopt);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CudaSegmenter, MoreThan64AxesIsALocatedError) {
  std::string shape;
  for (int d = 0; d < 65; ++d) shape += std::string(d ? ", " : "") + "1";
  EXPECT_NE(parse_error("fusion f(x: f32[" + shape + "]) {\n  y = neg(x)\n  return y\n}\n").find("'x' has 65 axes; a tensor has at most 64"),
            std::string::npos);
  // and a statement that makes one: 64 axes broadcast to 65
  std::string s64;
  for (int d = 0; d < 64; ++d) s64 += std::string(d ? ", " : "") + "1";
  std::string e = parse_error("fusion f(x: f32[" + s64 + "]) {\n  y = reshape(x, shape=[" + shape + "])\n  return y\n}\n");
  EXPECT_NE(e.find("t.fusion:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("'y' has 65 axes"), std::string::npos) << e;
}

}  // namespace
}  // namespace alloy
