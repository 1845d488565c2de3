// Every matmul epilogue pattern, taken or not, on the GPU against the CPU reference, in bf16 and
// f32, with sizes that make cuBLASLt refuse at run time (aux leading dimensions that are not a
// multiple of 8, a bias that is not one packed vector) so the fallback path runs too. Which
// pattern is taken is checked without a GPU in tests/segment/matmul_epilogue_test.cpp. Skips
// without a GPU.
#include <gtest/gtest.h>

#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

using testing::expect_gpu_matches_cpu;

// `text` with every "DT" replaced by `dtype`.
std::string with_dtype(std::string text, const std::string& dtype) {
  for (size_t at = text.find("DT"); at != std::string::npos; at = text.find("DT", at + dtype.size()))
    text.replace(at, 2, dtype);
  return text;
}

void expect_in_both_dtypes(const std::string& text, const Bindings& sizes) {
  for (const char* dtype : {"bf16", "f32"}) {
    SCOPED_TRACE(dtype);
    expect_gpu_matches_cpu(with_dtype(text, dtype), sizes);
  }
}

// ---- forward: taken ----

TEST(EpilogueKindGpu, LinearBiasTanhGelu) {
  const char* text = R"(fusion f(x: DT[T, K], w: DT[N, K], b: DT[N]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="tanh")
  return g
})";
  expect_in_both_dtypes(text, {{"T", 37}, {"K", 64}, {"N", 128}});
  expect_in_both_dtypes(text, {{"T", 5}, {"K", 33}, {"N", 30}});  // odd K and N
}

TEST(EpilogueKindGpu, PreActivationReturned_AuxOutput) {
  const char* text = R"(fusion f(x: DT[T, K], w: DT[N, K], b: DT[N]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="tanh")
  return g, h
})";
  expect_in_both_dtypes(text, {{"T", 37}, {"K", 64}, {"N", 128}});
  // N = 100: the aux leading dimension is not a multiple of 8, cuBLASLt refuses, the fallback runs
  expect_in_both_dtypes(text, {{"T", 16}, {"K", 64}, {"N", 100}});
}

TEST(EpilogueKindGpu, MatmulGeluAuxWithoutBias) {
  expect_in_both_dtypes(R"(fusion f(a: DT[B, S, K], b: DT[K, N]) {
  p = matmul(a, b)
  g = gelu(p, approximate="tanh")
  return g, p
})", {{"B", 2}, {"S", 9}, {"K", 40}, {"N", 64}});
}

TEST(EpilogueKindGpu, BroadcastInDimBiasAndRelu) {
  expect_in_both_dtypes(R"(fusion f(a: DT[M, K], b: DT[K, N], v: DT[N]) {
  p = matmul(a, b)
  vb = broadcast_in_dim(v, shape=[M, N], broadcast_dims=[1])
  y = add(p, vb)
  r = relu(y)
  return r
})", {{"M", 33}, {"K", 48}, {"N", 72}});
}

TEST(EpilogueKindGpu, NumpyBroadcastBiasOverABatchedActivation) {
  expect_in_both_dtypes(R"(fusion f(a: DT[B, S, K], b: DT[K, N], v: DT[N]) {
  p = matmul(a, b)
  y = add(v, p)
  return y
})", {{"B", 3}, {"S", 5}, {"K", 16}, {"N", 24}});
}

TEST(EpilogueKindGpu, OutputCastRoundTripWritesBf16Directly) {
  expect_gpu_matches_cpu(R"(fusion f(x: bf16[T, 64], w: bf16[96, 64], b: f32[96]) {
  p = linear(x, w)
  p32 = cast(p, dtype=f32)
  h = add(p32, b)
  g = gelu(h, approximate="tanh")
  y = cast(g, dtype=bf16)
  return y
})", {{"T", 21}});
}

TEST(EpilogueKindGpu, BiasComputedAfterTheMatmul) {
  expect_in_both_dtypes(R"(fusion f(a: DT[M, 32], b: DT[32, 48], v: DT[48]) {
  p = matmul(a, b)
  e = exp(v)
  y = add(p, e)
  return y
})", {{"M", 10}});
}

TEST(EpilogueKindGpu, StridedBiasIsNotOnePackedVector_FallsBack) {
  expect_in_both_dtypes(R"(fusion f(a: DT[M, 32], b: DT[32, 48], v: DT[96]) {
  p = matmul(a, b)
  vs = slice(v, starts=[0], ends=[96], steps=[2])
  y = add(p, vs)
  g = gelu(y, approximate="tanh")
  return g
})", {{"M", 12}});
}

// ---- forward: not taken ----

TEST(EpilogueKindGpu, PatternsNotTakenStillMatch) {
  const char* texts[] = {
      R"(fusion f(x: DT[T, 64], w: DT[96, 64], b: DT[96]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="none")
  return g
})",
      R"(fusion f(x: DT[T, 64], w: DT[96, 64], b: DT[96]) {
  h = linear(x, w, b)
  s = silu(h)
  return s
})",
      R"(fusion f(a: DT[T, 32], b: DT[32, 48], c: DT[T, 48]) {
  p = matmul(a, b)
  y = add(p, c)
  return y
})",
      R"(fusion f(x: DT[T, 64], w: DT[96, 64], b: DT[96]) {
  h = linear(x, w, b)
  r = relu(h)
  return r, h
})",
      R"(fusion f(a: DT[B, T, 32], b: DT[B, 32, 48], v: DT[48]) {
  p = matmul(a, b)
  y = add(p, v)
  return y
})",
      R"(fusion f(a: DT[T, 32], b: DT[32, 48], v: DT[48]) {
  p = matmul(a, b)
  y = add(p, v)
  return y, p
})",
  };
  for (const char* text : texts) {
    SCOPED_TRACE(text);
    expect_in_both_dtypes(text, {{"T", 19}, {"B", 2}});
  }
}

TEST(EpilogueKindGpu, WideResultWithoutCastBack) {
  expect_gpu_matches_cpu(R"(fusion f(x: bf16[T, 64], w: bf16[96, 64]) {
  p = linear(x, w)
  p32 = cast(p, dtype=f32)
  g = gelu(p32, approximate="tanh")
  return g
})", {{"T", 11}}, 7, /*scale: p is a bf16 GEMM result*/ 100);
}

// ---- backward ----

TEST(EpilogueKindGpu, DgeluWithBiasGradient) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");  // the fused bias gradients, off by default
  const char* text = R"(fusion f(dy: DT[T, C], w: DT[C, H], h: DT[T, H]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h, approximate="tanh")
  db = sum(dh, dims=[0])
  return dh, db
})";
  expect_in_both_dtypes(text, {{"T", 24}, {"C", 48}, {"H", 64}});
  // H = 100: the aux leading dimension is not a multiple of 8: the fallback runs
  expect_in_both_dtypes(text, {{"T", 24}, {"C", 48}, {"H", 100}});
}

TEST(EpilogueKindGpu, DgeluAlone) {
  expect_in_both_dtypes(R"(fusion f(dy: DT[T, C], w: DT[C, H], h: DT[T, H]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h, approximate="tanh")
  return dh
})", {{"T", 17}, {"C", 32}, {"H", 80}});
}

TEST(EpilogueKindGpu, WeightGradientsWithBiasGradients) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");  // the fused bias gradients, off by default
  expect_in_both_dtypes(R"(fusion f(x: DT[T, K], dy: DT[T, N]) {
  dy_t = permute(dy, dims=[1, 0])
  dw = matmul(dy_t, x)
  db = sum(dy, dims=[0])
  x_t = permute(x, dims=[1, 0])
  dw_t = matmul(x_t, dy)
  return dw, db, dw_t
})", {{"T", 40}, {"K", 32}, {"N", 48}});
  expect_in_both_dtypes(R"(fusion f(x: DT[T, K], dy: DT[T, N]) {
  x_t = permute(x, dims=[1, 0])
  dw_t = matmul(x_t, dy)
  db = sum(dy, dims=[0])
  return dw_t, db
})", {{"T", 40}, {"K", 24}, {"N", 36}});
}

TEST(EpilogueKindGpu, BackwardPatternsNotTaken) {
  expect_in_both_dtypes(R"(fusion f(dy: DT[T, 32], w: DT[32, 64], h: DT[T, 64]) {
  dg = matmul(dy, w)
  dh = relu_backward(dg, h)
  db = sum(dh, dims=[0])
  return dh, db
})", {{"T", 20}});
  expect_in_both_dtypes(R"(fusion f(dy: DT[T, 32], w: DT[32, 64], h: DT[T, 64]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h)
  return dh
})", {{"T", 20}});
}

TEST(EpilogueKindGpu, MlpBackwardExample) {
  std::string text = testing::read_file(testing::source_path("examples/mlp_backward.fusion"));
  expect_gpu_matches_cpu(text, {{"T", 16}});
  // the same program in f32 at a smaller width
  std::string small = text;
  for (auto [from, to] : {std::pair<std::string, std::string>{"bf16", "f32"}, {"3072", "256"}, {"768", "64"}})
    for (size_t at = small.find(from); at != std::string::npos; at = small.find(from, at + to.size()))
      small.replace(at, from.size(), to);
  expect_gpu_matches_cpu(small, {{"T", 40}});
}

// The backward at a T where the bias gradients' column kernels split over blocks (the default),
// and with every fused bias-gradient epilogue instead (ALLOY_DISABLE_EPILOGUES="").
// Each way states which path it planned and that cuBLASLt ran it (no refusal and fallback), so a
// B path that quietly became the A path cannot pass.
TEST(EpilogueKindGpu, MlpBackwardBothWaysOfBiasGradients) {
  ALLOY_REQUIRE_GPU();
  std::string text = testing::read_file(testing::source_path("examples/mlp_backward.fusion"));
  testing::GpuRun a, b;
  expect_gpu_matches_cpu(text, {{"T", 1000}}, 7, 1.0, &a);
  EXPECT_NE(a.segments.find("dgelu_bgrad is off"), std::string::npos) << a.segments;
  EXPECT_EQ(a.segments.find("epilogue: dgelu_bgrad"), std::string::npos) << a.segments;
  EXPECT_EQ(a.segments.find("epilogue: bgrad_"), std::string::npos) << a.segments;
  EXPECT_NE(a.launched.find("cuBLASLt, epilogue dgelu\n"), std::string::npos) << a.launched;
  EXPECT_EQ(a.launched.find("refused"), std::string::npos) << a.launched;
  {
    testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");
    expect_gpu_matches_cpu(text, {{"T", 1000}}, 7, 1.0, &b);
  }
  EXPECT_NE(b.segments.find("epilogue: dgelu_bgrad"), std::string::npos) << b.segments;
  EXPECT_NE(b.segments.find("epilogue: bgrad_"), std::string::npos) << b.segments;
  EXPECT_NE(b.launched.find("cuBLASLt, epilogue dgelu_bgrad"), std::string::npos) << b.launched;
  EXPECT_NE(b.launched.find("cuBLASLt, epilogue bgrad_"), std::string::npos) << b.launched;
  EXPECT_EQ(b.launched.find("refused"), std::string::npos) << b.launched;
}

// ---- ReLU's bit mask: relu_aux forward, drelu backward (and bitmask kernels where not taken) ----

// What ran: `epilogue` in the plan and cuBLASLt running it, no refusal.
void expect_ran_epilogue(const testing::GpuRun& ran, const std::string& epilogue) {
  EXPECT_NE(ran.segments.find("epilogue: " + epilogue + " "), std::string::npos) << ran.segments;
  EXPECT_NE(ran.launched.find("cuBLASLt, epilogue " + epilogue + "\n"), std::string::npos) << ran.launched;
  EXPECT_EQ(ran.launched.find("refused"), std::string::npos) << ran.launched;
}

TEST(EpilogueKindGpu, ReluAuxBias_WritesTheMask) {
  ALLOY_REQUIRE_GPU();
  // the output features are a weight's fixed size, as in a model: the epilogue pass needs them
  // to know whether cuBLASLt's mask rows fit relu_mask's packing
  auto text = [](int64_t n) {
    std::string f = std::to_string(n);
    return "fusion f(x: DT[B, S, K], w: DT[" + f + ", K], b: DT[" + f + "]) {\n  h = linear(x, w, b)\n  a = relu(h)\n"
           "  m = relu_mask(h)\n  return a, m\n}\n";
  };
  for (const char* dtype : {"bf16", "f32"}) {
    SCOPED_TRACE(dtype);
    for (int64_t n : {128, 384}) {
      testing::GpuRun ran;
      expect_gpu_matches_cpu(with_dtype(text(n), dtype), {{"B", 3}, {"S", 11}, {"K", 64}}, 7, 1.0, &ran);
      expect_ran_epilogue(ran, "relu_aux_bias");
    }
    // N = 100: cuBLASLt's mask rows would be padded; the GEMM adds the bias, kernels do the rest
    testing::GpuRun ran;
    expect_gpu_matches_cpu(with_dtype(text(100), dtype), {{"B", 2}, {"S", 7}, {"K", 32}}, 7, 1.0, &ran);
    EXPECT_NE(ran.segments.find("[bitmask]"), std::string::npos) << ran.segments;
    EXPECT_NE(ran.segments.find("to be a multiple of 128"), std::string::npos) << ran.segments;
  }
}

TEST(EpilogueKindGpu, ReluAuxWithoutBias) {
  ALLOY_REQUIRE_GPU();
  for (const char* dtype : {"bf16", "f32"}) {
    SCOPED_TRACE(dtype);
    testing::GpuRun ran;
    expect_gpu_matches_cpu(with_dtype(R"(fusion f(a: DT[M, K], b: DT[K, 256]) {
  p = matmul(a, b)
  m = relu_mask(p)
  r = relu(p)
  return r, m
})", dtype), {{"M", 45}, {"K", 40}}, 7, 1.0, &ran);
    expect_ran_epilogue(ran, "relu_aux");
  }
}

TEST(EpilogueKindGpu, DreluAndDreluBgrad_ReadTheMask) {
  ALLOY_REQUIRE_GPU();
  // H (the hidden width, a weight's fixed size) decides whether cuBLASLt's mask rows fit
  auto text = [](int64_t h) {
    std::string H = std::to_string(h), W = std::to_string((h + 31) / 32);
    return "fusion f(dy: DT[T, C], w: DT[C, " + H + "], m: i32[T, " + W + "]) {\n  dg = matmul(dy, w)\n"
           "  dh = relu_backward_mask(dg, m)\n  db = sum(dh, dims=[0])\n  return dh, db\n}\n";
  };
  for (const char* dtype : {"bf16", "f32"}) {
    SCOPED_TRACE(dtype);
    Bindings sizes{{"T", 50}, {"C", 48}};
    testing::GpuRun plain, fused;
    expect_gpu_matches_cpu(with_dtype(text(256), dtype), sizes, 7, 1.0, &plain);  // db as a column kernel (the default)
    expect_ran_epilogue(plain, "drelu");
    {
      testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");
      expect_gpu_matches_cpu(with_dtype(text(256), dtype), sizes, 7, 1.0, &fused);
    }
    expect_ran_epilogue(fused, "drelu_bgrad");
    // H = 100: the mask's rows are 4 words; a bitmask kernel keeps the gradient instead
    testing::GpuRun odd;
    expect_gpu_matches_cpu(with_dtype(text(100), dtype), sizes, 7, 1.0, &odd);
    EXPECT_NE(odd.segments.find("[bitmask]"), std::string::npos) << odd.segments;
  }
}

// A transposed mask view that no aux_ld describes: cuBLASLt refuses and the fallback (the plain
// GEMM, then a bitmask kernel on a packed copy) runs, equal to the CPU.
TEST(EpilogueKindGpu, DreluOfATransposedMask_FallsBack) {
  ALLOY_REQUIRE_GPU();
  testing::GpuRun transposed;
  expect_gpu_matches_cpu(R"(fusion f(dy: bf16[T, 48], w: bf16[48, 256], mt: i32[8, T]) {
  m = permute(mt, dims=[1, 0])
  dg = matmul(dy, w)
  dh = relu_backward_mask(dg, m)
  return dh
})", {{"T", 40}}, 7, 1.0, &transposed);
  EXPECT_NE(transposed.launched.find("cuBLASLt refused epilogue drelu"), std::string::npos) << transposed.launched;
  EXPECT_NE(transposed.launched.find("the plain cuBLASLt GEMM, then the epilogue's ops as a generated kernel"), std::string::npos)
      << transposed.launched;
}

// A mask sliced out of a wider one (rows 12 words apart, from word 4): cuBLASLt's dReLU read such a
// mask wrongly on an H100 with aux_ld = 384 bits, so only packed masks go to cuBLASLt and this one
// takes the fallback (the plain GEMM, then the bitmask kernel on the view), equal to the CPU.
TEST(EpilogueKindGpu, DreluOfASlicedMask_FallsBack) {
  ALLOY_REQUIRE_GPU();
  testing::GpuRun strided;
  expect_gpu_matches_cpu(R"(fusion f(dy: bf16[40, 48], w: bf16[48, 256], big: i32[40, 12]) {
  m = slice(big, starts=[0, 4], ends=[40, 12])
  dg = matmul(dy, w)
  dh = relu_backward_mask(dg, m)
  return dh
})", {}, 7, 1.0, &strided);
  EXPECT_NE(strided.launched.find("cuBLASLt refused epilogue drelu"), std::string::npos) << strided.launched;
}

// The ReLU MLP examples: the forward writes the mask in its first GEMM; the backward reads it in
// dReLU (and with every kind allowed, computes db1 there too).
TEST(EpilogueKindGpu, MlpReluExamples) {
  ALLOY_REQUIRE_GPU();
  testing::GpuRun forward, backward, backward_bgrad;
  expect_gpu_matches_cpu(testing::read_file(testing::source_path("examples/mlp_relu.fusion")), {{"T", 256}}, 7, 1.0, &forward);
  expect_ran_epilogue(forward, "relu_aux_bias");
  std::string text = testing::read_file(testing::source_path("examples/mlp_relu_backward.fusion"));
  expect_gpu_matches_cpu(text, {{"T", 256}}, 7, 1.0, &backward);
  expect_ran_epilogue(backward, "drelu");
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");
  expect_gpu_matches_cpu(text, {{"T", 256}}, 7, 1.0, &backward_bgrad);
  expect_ran_epilogue(backward_bgrad, "drelu_bgrad");
}

// The bias gradients run on a side stream beside the next GEMMs (host_ir/program.h). Ten runs
// enqueued back to back on a stream of the test's own, with no wait between them, each against
// the CPU: a missing wait between the streams, or a buffer reused too early, shows as a mismatch.
TEST(EpilogueKindGpu, MlpBackwardSideStreamRunAfterRun) {
  ALLOY_REQUIRE_GPU();
  std::string text = testing::read_file(testing::source_path("examples/mlp_backward.fusion"));
  auto cpu_fusion = parse_fusion(text, "mlp_backward.fusion", std::nullopt);
  std::vector<Tensor> given(cpu_fusion->inputs().size());
  std::vector<Tensor> inputs = complete_inputs(*cpu_fusion, given, {{"T", 4096}}, 5);
  FusionExecutor cpu(std::move(cpu_fusion), {DeviceChoice::cpu});
  std::vector<Tensor> expected = cpu.run(inputs);
  for (const char* side_off : {"", "1"}) {
    SCOPED_TRACE(*side_off ? "one stream" : "with the side stream");
    testing::ScopedEnv env("ALLOY_NO_SIDE_STREAM", side_off);
    ExecutorOptions options{DeviceChoice::cuda};
    options.poison_outputs = true;
    FusionExecutor gpu(parse_fusion(text, "mlp_backward.fusion", std::nullopt), options);
    cuda::Stream stream = cuda::Stream::create(0);
    cuda::StreamGuard guard(stream);
    std::vector<Tensor> on_device;
    for (const Tensor& t : inputs) on_device.push_back(cuda::to_device(t, stream));
    EXPECT_EQ(gpu.dump("program", &on_device).find("on stream 1") != std::string::npos, !*side_off) << gpu.dump("program", &on_device);
    std::vector<std::vector<Tensor>> runs;
    for (int i = 0; i < 10; ++i) runs.push_back(gpu.run(on_device));
    for (auto& outputs : runs) {
      ASSERT_EQ(outputs.size(), expected.size());
      for (size_t o = 0; o < outputs.size(); ++o)
        EXPECT_TRUE(testing::tensors_close(cuda::to_host(outputs[o], stream), expected[o])) << "output " << o;
    }
  }
}

}  // namespace
}  // namespace alloy
