// The CUDA segmentation is decided on the host, so these run without a GPU.
#include "alloy/segment/schedulers/cuda_segmenter.h"

#include <gtest/gtest.h>

#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "alloy/passes/decompose_composites.h"
#include "test_util.h"

namespace alloy {
namespace {

std::vector<std::string> schedulers(const Segmentation& s) {
  std::vector<std::string> out;
  for (auto& seg : s.segments) out.push_back(seg.scheduler);
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
  // the tanh GELU runs in the first GEMM's epilogue (passes/matmul_epilogue.h)
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

// RoPE (examples/rope.fusion): x1 = slice is a host view the cat reads; neg(x2) is a kernel whose
// result the cat reads from memory; the cat and everything after it are one kernel.
TEST(CudaSegmenter, RopeIsTwoKernelsAndAViewWithNoFallback) {
  auto f = parse_fusion_file(testing::source_path("examples/rope.fusion"));
  Segmentation s = segment_for_cuda(*f);
  ASSERT_EQ(schedulers(s), (V{"noop", "pointwise", "pointwise"})) << s.str();
  EXPECT_EQ(s.segments[0].ops.size(), 1u);  // x1 = slice(x)
  EXPECT_EQ(s.segments[1].ops.size(), 2u);  // x2 = slice(x), neg_x2 = neg(x2)
  EXPECT_EQ(op_name(s.segments[2].ops[0]->kind), "cat") << s.str();
  EXPECT_EQ(s.segments[2].outputs.size(), 1u);  // y only: the cat is read from its sources in the kernel
  EXPECT_EQ(s.str().find("cpu_fallback"), std::string::npos) << s.str();
}

TEST(CudaSegmenter, CatOfAComputedValueStartsTheNextKernel) {
  auto f = parse_fusion(R"(
fusion f(x: f32[8], y: f32[8]) {
  e = exp(x)
  c = cat(e, y, dim=0)
  return c
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  // the second kernel only copies: the cat's sources into its result
  EXPECT_EQ(schedulers(s), (V{"pointwise", "pointwise"})) << s.str();
  ASSERT_FALSE(s.refusals.empty());
  EXPECT_NE(s.refusals[0].why.find("cat of e, which is not a segment input"), std::string::npos) << s.str();
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

}  // namespace
}  // namespace alloy
