// The CUDA segmentation is decided on the host, so these run without a GPU.
#include "alloy/segment/schedulers/cuda_segmenter.h"

#include <gtest/gtest.h>

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

TEST(CudaSegmenter, CatRunsOnTheFallbackAndSaysWhy) {
  auto f = parse_fusion(R"(
fusion f(x: f32[8], y: f32[8]) {
  e = exp(x)
  c = cat(e, y, dim=0)
  return c
})", "t.fusion", std::nullopt);
  Segmentation s = segment_for_cuda(*f);
  EXPECT_EQ(schedulers(s), (V{"pointwise", "cpu_fallback"})) << s.str();
  EXPECT_NE(s.str().find("refused"), std::string::npos);
}

}  // namespace
}  // namespace alloy
