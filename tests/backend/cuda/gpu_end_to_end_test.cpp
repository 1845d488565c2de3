// Every fusion here runs on the GPU and on the CPU reference with the same fresh random inputs
// (GPU outputs poisoned first) and must agree at the dtype's tolerance. Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>

#include "alloy/ir/parser.h"
#include "test_util.h"

namespace alloy {
namespace {

using testing::expect_gpu_matches_cpu;

TEST(GpuEndToEnd, PointwiseChainWithBroadcasts) {
  expect_gpu_matches_cpu(R"(fusion f(a: bf16[N, 64], b: bf16[64], c: f32[N, 1]) {
  m = mul(a, b)
  s = add(m, c)
  g = gelu(s, approximate="tanh")
  return g, s
})", {{"N", 37}});
}

TEST(GpuEndToEnd, PointwiseOddSizesAndAllUnaryOps) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[N]) {
  a = abs(x)
  na = neg(a)
  e = exp(na)
  a1 = add(a, 1.0)
  l = log(a1)
  a2 = add(a, 0.5)
  r = rsqrt(a2)
  t = tanh(x)
  s = sigmoid(x)
  q = sqrt(a)
  u = silu(x)
  v = erf(x)
  a3 = add(a, 2.0)
  w = reciprocal(a3)
  g = gelu(x)
  z = relu(x)
  return e, l, r, t, s, q, u, v, w, g, z
})", {{"N", 1001}});
}

TEST(GpuEndToEnd, BinaryComparisonsWhereAndIntegers) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[8, 33], y: f32[8, 33], i: i32[8, 33]) {
  m = gt(x, y)
  w = where(m, x, y)
  mx = maximum(x, y)
  mn = minimum(x, 0.0)
  ax = abs(x)
  p = pow(ax, 1.5)
  d = div(i, 3)
  ii = mul(i, 7)
  eqs = eq(i, 4)
  c = cast(x, dtype=i32)
  h = cast(x, dtype=f16)
  b = cast(x, dtype=bf16)
  return w, mx, mn, p, d, ii, eqs, c, h, b
})", {});
}

TEST(GpuEndToEnd, InnerReductionsWithKeepdim) {
  expect_gpu_matches_cpu(R"(fusion f(x: bf16[B, 100, 257]) {
  s = sum(x, dims=[2])
  m = max(x, dims=[-1], keepdim=true)
  n = min(x, dims=[1, 2])
  a = mean(x, dims=[2], keepdim=true)
  return s, m, n, a
})", {{"B", 3}});
}

TEST(GpuEndToEnd, OuterReduction) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[300, 65]) {
  s = sum(x, dims=[0])
  return s
})", {});
}

// Single-pass reductions over outer axes run as column kernels, split over blocks.
TEST(GpuEndToEnd, ColumnReductionsWithElementOutputs) {
  expect_gpu_matches_cpu(R"(fusion f(g: bf16[T, H], x: bf16[T, H], b: bf16[H]) {
  xb = add(x, b)
  d = gelu_backward(g, xb, approximate="tanh")
  db = sum(d, dims=[0])
  v, m = var_mean(x, dims=[0], correction=1)
  mx = max(g, dims=[0], keepdim=true)
  mn = min(d, dims=[0])
  a = mean(x, dims=[0])
  return d, db, v, m, mx, mn, a
})", {{"T", 3000}, {"H", 136}});
}

TEST(GpuEndToEnd, ColumnReductionsOddShapesAndTypes) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[A, B, C], i: i32[A, B, C], y: f64[A, B, C]) {
  s = sum(x, dims=[0, 1])
  k = sum(i, dims=[0])
  v, m = var_mean(y, dims=[0, 1], correction=0)
  p = gt(x, 0.5)
  c = sum(p, dims=[0, 1])
  return s, k, v, m, c
})", {{"A", 37}, {"B", 29}, {"C", 65}});
  // few long rows: one block per kept index, split along the contiguous reduced axis
  expect_gpu_matches_cpu(R"(fusion g(x: bf16[R, N]) {
  s = sum(x, dims=[1])
  m = max(x, dims=[1])
  v, mu = var_mean(x, dims=[1])
  return s, m, v, mu
})", {{"R", 5}, {"N", 100003}});
}

TEST(GpuEndToEnd, FullReductionOfLargeTensor) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[N]) {
  s = sum(x)
  return s
})", {{"N", 100000}});
}

TEST(GpuEndToEnd, VarMeanWithCorrection) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[16, 1000]) {
  v, m = var_mean(x, dims=[1], correction=1)
  return v, m
})", {});
}

TEST(GpuEndToEnd, TracedLayerNormExample) {
  auto text = testing::read_file(testing::source_path("examples/layer_norm.fusion"));
  expect_gpu_matches_cpu(text, {});
}

TEST(GpuEndToEnd, CompositeNormalizations) {
  expect_gpu_matches_cpu(R"(fusion f(x: bf16[N, D], w: bf16[D], b: bf16[D]) {
  y = layer_norm(x, w, b, normalized_ndim=1, eps=1e-5)
  s = softmax(x, dim=1)
  r = rms_norm(x, w, normalized_ndim=1, eps=1e-6)
  return y, s, r
})", {{"N", 64}, {"D", 4096}});
}

TEST(GpuEndToEnd, SoftmaxOverANonLastAxis) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[4, 50, 6]) {
  s = softmax(x, dim=1)
  return s
})", {});
}

TEST(GpuEndToEnd, NormalizationOverTwoAxesAndHugeRows) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[2, 8, 100]) {
  y = layer_norm(x, normalized_ndim=2)
  return y
})", {});
  expect_gpu_matches_cpu(R"(fusion g(x: bf16[3, 70000]) {
  y = softmax(x, dim=-1)
  return y
})", {});
}

TEST(GpuEndToEnd, ViewsOfInputsAndOutputs) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[6, 8], y: f32[8, 6]) {
  t = permute(y, dims=[1, 0])
  s = add(x, t)
  sl = slice(x, starts=[1, 0], ends=[5, 8], steps=[2, 3])
  e = exp(sl)
  r = reshape(s, shape=[48])
  u = unsqueeze(r, dim=0)
  return u, e
})", {});
}

TEST(GpuEndToEnd, CatAndScalarInputs) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[5, 3], y: f32[2, 3], alpha: f32, z: f32[]) {
  c = cat(x, y, dim=0)
  s = mul(c, alpha)
  t = add(s, z)
  return t
})", {});
}

TEST(GpuEndToEnd, MatmulAndLinearShapes) {
  expect_gpu_matches_cpu(R"(fusion f(a: bf16[3, 40, 64], b: bf16[64, 24], w: bf16[24, 64], bias: bf16[24], v: bf16[64]) {
  m = matmul(a, b)
  l = linear(a, w, bias)
  mv = matmul(a, v)
  return m, l, mv
})", {});
  expect_gpu_matches_cpu(R"(fusion g(a: f32[2, 1, 16, 32], b: f32[5, 32, 8]) {
  m = matmul(a, b)
  return m
})", {});
}

TEST(GpuEndToEnd, EveryExampleMatchesTheCpu) {
  for (auto& entry : std::filesystem::directory_iterator(testing::source_path("examples"))) {
    if (entry.path().extension() != ".fusion") continue;
    SCOPED_TRACE(entry.path().string());
    auto text = testing::read_file(entry.path().string());
    auto fusion = parse_fusion(text, entry.path().string(), std::nullopt);
    Bindings sizes;
    for (auto& sym : fusion->input_symbols()) sizes[sym] = 3;
    // `?` sizes are named "INPUT.AXIS" by resolve_input_sizes; examples keep them off the inputs we draw
    expect_gpu_matches_cpu(text, sizes);
  }
}

}  // namespace
}  // namespace alloy

namespace alloy {
namespace {

// Rows of up to 8 vectors a lane run a warp per row; odd row counts leave warps idle at the end.
TEST(GpuEndToEnd, ShortRowsRunAWarpPerRow) {
  testing::expect_gpu_matches_cpu(R"(fusion f(x: bf16[R, 96], w: bf16[96]) {
  y = layer_norm(x, w, normalized_ndim=1)
  s = softmax(x, dim=1)
  v, m = var_mean(x, dims=[1], correction=1)
  mx = max(x, dims=[1])
  return y, s, v, m, mx
})", {{"R", 1003}});
  testing::expect_gpu_matches_cpu(R"(fusion g(x: f32[R, 33]) {
  v, m = var_mean(x, dims=[1])
  r = rms_norm(x, normalized_ndim=1)
  return v, m, r
})", {{"R", 517}});
}

}  // namespace
}  // namespace alloy
