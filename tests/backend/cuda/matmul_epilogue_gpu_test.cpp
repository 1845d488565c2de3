// Every matmul epilogue pattern, taken or not, on the GPU against the CPU reference, in bf16 and
// f32, with sizes that make cuBLASLt refuse at run time (aux leading dimensions that are not a
// multiple of 8, a bias that is not one packed vector) so the fallback path runs too. Which
// pattern is taken is checked without a GPU in tests/passes/matmul_epilogue_test.cpp. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

using testing::expect_gpu_matches_cpu;

// ---- which path ran ----
// `launched` is `--dump cuda` after the run: per matmul segment, the run record that
// backend/cuda/matmul_segment.cpp's MatmulSegment::source() prints,
//   "// segment N [matmul]: cuBLASLt, epilogue NAME"                      cuBLASLt ran the call
//   "// segment N [matmul]: cuBLASLt refused epilogue NAME (WHY): FALLBACK"  it refused; WHY is
//       cublaslt_matmul.cpp's refusal ("cuBLASLt matmul DESC epilogue=NAME: ...") or the segment's
// NAME being epilogue_kind_name (a linear with a bias and no other epilogue runs as "bias"; a
// plain matmul as "none"). `segments` is `--dump segments`, with the epilogue pass's note
// "[matmul] epilogue: NAME (...)" on each matmul segment that took ops (EpilogueMatch::note).

// cuBLASLt ran the matmul with `epilogue`, and no matmul segment of the run was refused.
void expect_cublaslt_ran(const testing::GpuRun& ran, const std::string& epilogue) {
  EXPECT_NE(ran.launched.find(" [matmul]: cuBLASLt, epilogue " + epilogue + "\n"), std::string::npos) << ran.launched;
  EXPECT_EQ(ran.launched.find("refused"), std::string::npos) << ran.launched;
}

// What ran: `epilogue` in the plan and cuBLASLt running it, no refusal.
void expect_ran_epilogue(const testing::GpuRun& ran, const std::string& epilogue) {
  EXPECT_NE(ran.segments.find("[matmul] epilogue: " + epilogue + " ("), std::string::npos) << ran.segments;
  expect_cublaslt_ran(ran, epilogue);
}

// The plan took `epilogue`, cuBLASLt refused it for `why` (a piece of the refusal), and
// `fallback` (run_fallback's record) ran instead.
void expect_refused_epilogue(const testing::GpuRun& ran, const std::string& epilogue, const std::string& why,
                             const std::string& fallback) {
  EXPECT_NE(ran.segments.find("[matmul] epilogue: " + epilogue + " ("), std::string::npos) << ran.segments;
  size_t at = ran.launched.find(" [matmul]: cuBLASLt refused epilogue " + epilogue + " (");
  ASSERT_NE(at, std::string::npos) << ran.launched;
  std::string line = ran.launched.substr(at, ran.launched.find('\n', at) - at);
  EXPECT_NE(line.find(why), std::string::npos) << line;
  EXPECT_NE(line.find("): " + fallback), std::string::npos) << line;
  EXPECT_EQ(line.size(), line.find("): " + fallback) + 3 + fallback.size()) << line;
}

// The epilogue pass took nothing past the GEMM's own `note` ("epilogue: none", or a linear's
// "epilogue: bias (bias: b)"), refusing the rest for `why` (a piece of its line under the
// segments' "refusals:"), and cuBLASLt ran that GEMM: "cuBLASLt, epilogue `gemm`".
void expect_not_taken(const testing::GpuRun& ran, const std::string& note, const std::string& why, const std::string& gemm) {
  EXPECT_NE(ran.segments.find("[matmul] " + note + "\n"), std::string::npos) << ran.segments;
  size_t at = ran.segments.find("\n  matmul epilogue refused {");
  ASSERT_NE(at, std::string::npos) << ran.segments;
  EXPECT_NE(ran.segments.find(why, at), std::string::npos) << ran.segments;
  expect_cublaslt_ran(ran, gemm);
}

// In f32 the GELU kinds are refused at planning (matmul_epilogue.cpp): the GEMM runs without them.
const char* const kF32Gelu = "f32 result: cuBLASLt's GELU may use an approximate tanh, coarser than f32 rounding";

using Check = std::function<void(const testing::GpuRun&)>;

// `text` with every "DT" replaced by `dtype`.
std::string with_dtype(std::string text, const std::string& dtype) {
  for (size_t at = text.find("DT"); at != std::string::npos; at = text.find("DT", at + dtype.size()))
    text.replace(at, 2, dtype);
  return text;
}

// Runs `text` in bf16 and in f32 against the CPU; `bf16` and `f32` then state which path each ran.
void expect_in_both_dtypes(const std::string& text, const Bindings& sizes, const Check& bf16, const Check& f32) {
  ALLOY_REQUIRE_GPU();
  for (const char* dtype : {"bf16", "f32"}) {
    SCOPED_TRACE(dtype);
    testing::GpuRun ran;
    expect_gpu_matches_cpu(with_dtype(text, dtype), sizes, 7, 1.0, &ran);
    (std::string(dtype) == "bf16" ? bf16 : f32)(ran);
  }
}
void expect_in_both_dtypes(const std::string& text, const Bindings& sizes, const Check& both) {
  expect_in_both_dtypes(text, sizes, both, both);
}

// The check that `epilogue` ran on cuBLASLt (planned by the epilogue pass).
Check ran_epilogue(const std::string& epilogue) {
  return [epilogue](const testing::GpuRun& ran) { expect_ran_epilogue(ran, epilogue); };
}

// The check that the plan refused what `why` names and cuBLASLt ran the GEMM as `note` says.
Check not_taken(const std::string& note, const std::string& why, const std::string& gemm) {
  return [=](const testing::GpuRun& ran) { expect_not_taken(ran, note, why, gemm); };
}

const char* const kGemmThenKernel = "the plain cuBLASLt GEMM, then the epilogue's ops as a generated kernel";

// ---- forward: taken ----

TEST(MatmulEpilogueGpu, LinearBiasTanhGelu) {
  const char* text = R"(fusion f(x: DT[T, K], w: DT[N, K], b: DT[N]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="tanh")
  return g
})";
  Check f32 = not_taken("epilogue: bias (bias: b)", std::string("{h=linear, g=gelu}: ") + kF32Gelu, "bias");
  expect_in_both_dtypes(text, {{"T", 37}, {"K", 64}, {"N", 128}}, ran_epilogue("gelu_bias"), f32);
  expect_in_both_dtypes(text, {{"T", 5}, {"K", 33}, {"N", 30}}, ran_epilogue("gelu_bias"), f32);  // odd K and N
}

TEST(MatmulEpilogueGpu, PreActivationReturned_AuxOutput) {
  const char* text = R"(fusion f(x: DT[T, K], w: DT[N, K], b: DT[N]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="tanh")
  return g, h
})";
  Check f32 = not_taken("epilogue: bias (bias: b)", std::string("{h=linear, g=gelu}: ") + kF32Gelu, "bias");
  expect_in_both_dtypes(text, {{"T", 37}, {"K", 64}, {"N", 128}}, ran_epilogue("gelu_aux_bias"), f32);
  // N = 100: the aux leading dimension is not a multiple of 8, cuBLASLt refuses, the fallback runs
  expect_in_both_dtypes(text, {{"T", 16}, {"K", 64}, {"N", 100}}, [](const testing::GpuRun& ran) {
    expect_refused_epilogue(ran, "gelu_aux_bias", " epilogue=gelu_aux_bias: aux_ld 100 must be a multiple of 8 and at least n", kGemmThenKernel);
  }, f32);
}

TEST(MatmulEpilogueGpu, MatmulGeluAuxWithoutBias) {
  expect_in_both_dtypes(R"(fusion f(a: DT[B, S, K], b: DT[K, N]) {
  p = matmul(a, b)
  g = gelu(p, approximate="tanh")
  return g, p
})", {{"B", 2}, {"S", 9}, {"K", 40}, {"N", 64}}, ran_epilogue("gelu_aux"),
                        not_taken("epilogue: none", std::string("{p=matmul, g=gelu}: ") + kF32Gelu, "none"));
}

TEST(MatmulEpilogueGpu, BroadcastInDimBiasAndRelu) {
  expect_in_both_dtypes(R"(fusion f(a: DT[M, K], b: DT[K, N], v: DT[N]) {
  p = matmul(a, b)
  vb = broadcast_in_dim(v, shape=[M, N], broadcast_dims=[1])
  y = add(p, vb)
  r = relu(y)
  return r
})", {{"M", 33}, {"K", 48}, {"N", 72}}, ran_epilogue("relu_bias"));
}

TEST(MatmulEpilogueGpu, NumpyBroadcastBiasOverABatchedActivation) {
  expect_in_both_dtypes(R"(fusion f(a: DT[B, S, K], b: DT[K, N], v: DT[N]) {
  p = matmul(a, b)
  y = add(v, p)
  return y
})", {{"B", 3}, {"S", 5}, {"K", 16}, {"N", 24}}, ran_epilogue("bias"));
}

TEST(MatmulEpilogueGpu, OutputCastRoundTripWritesBf16Directly) {
  ALLOY_REQUIRE_GPU();
  testing::GpuRun ran;
  expect_gpu_matches_cpu(R"(fusion f(x: bf16[T, 64], w: bf16[96, 64], b: f32[96]) {
  p = linear(x, w)
  p32 = cast(p, dtype=f32)
  h = add(p32, b)
  g = gelu(h, approximate="tanh")
  y = cast(g, dtype=bf16)
  return y
})", {{"T", 21}}, 7, 1.0, &ran);
  // planned as one GELU_BIAS GEMM writing y in bf16 (with the f32 bias); on an H100 with CUDA 13.0
  // cuBLASLt has no algorithm for it, so the plain GEMM and a kernel run (seen 2026-11)
  EXPECT_NE(ran.segments.find("[matmul] epilogue: gelu_bias (bias: b, result: y)\n"), std::string::npos) << ran.segments;
  expect_refused_epilogue(ran, "gelu_bias", " epilogue=gelu_bias: cuBLASLt has no algorithm for this case", kGemmThenKernel);
}

TEST(MatmulEpilogueGpu, BiasComputedAfterTheMatmul) {
  expect_in_both_dtypes(R"(fusion f(a: DT[M, 32], b: DT[32, 48], v: DT[48]) {
  p = matmul(a, b)
  e = exp(v)
  y = add(p, e)
  return y
})", {{"M", 10}}, ran_epilogue("bias"));
}

TEST(MatmulEpilogueGpu, StridedBiasIsNotOnePackedVector_FallsBack) {
  expect_in_both_dtypes(R"(fusion f(a: DT[M, 32], b: DT[32, 48], v: DT[96]) {
  p = matmul(a, b)
  vs = slice(v, starts=[0], ends=[96], steps=[2])
  y = add(p, vs)
  g = gelu(y, approximate="tanh")
  return g
})", {{"M", 12}}, [](const testing::GpuRun& ran) {
    expect_refused_epilogue(ran, "gelu_bias", "(the bias vs is not one packed vector)", kGemmThenKernel);
  }, [](const testing::GpuRun& ran) {
    // f32: the plan keeps the bias alone (GELU refused), which cuBLASLt refuses the same way
    EXPECT_NE(ran.segments.find(std::string("{p=matmul, g=gelu}: ") + kF32Gelu), std::string::npos) << ran.segments;
    expect_refused_epilogue(ran, "bias", "(the bias vs is not one packed vector)", kGemmThenKernel);
  });
}

// ---- forward: not taken ----

// Each pattern with the plain GEMM cuBLASLt ran for it: a linear's bias stays in the GEMM
// ("bias"), a matmul's GEMM has none ("none"); the ops around it run as kernels of their own.
TEST(MatmulEpilogueGpu, PatternsNotTakenStillMatch) {
  struct Case {
    const char *text, *note, *why, *gemm;
  } cases[] = {
      {R"(fusion f(x: DT[T, 64], w: DT[96, 64], b: DT[96]) {
  h = linear(x, w, b)
  g = gelu(h, approximate="none")
  return g
})", "epilogue: bias (bias: b)", "{h=linear, g=gelu}: gelu approximate=\"none\": cuBLASLt's GELU is the tanh approximation", "bias"},
      {R"(fusion f(x: DT[T, 64], w: DT[96, 64], b: DT[96]) {
  h = linear(x, w, b)
  s = silu(h)
  return s
})", "epilogue: bias (bias: b)", "{h=linear, s=silu}: silu has no cuBLASLt epilogue", "bias"},
      {R"(fusion f(a: DT[T, 32], b: DT[32, 48], c: DT[T, 48]) {
  p = matmul(a, b)
  y = add(p, c)
  return y
})", "epilogue: none", "{p=matmul, y=add}: add of a full tensor (c: ", "none"},
      {R"(fusion f(x: DT[T, 64], w: DT[96, 64], b: DT[96]) {
  h = linear(x, w, b)
  r = relu(h)
  return r, h
})", "epilogue: bias (bias: b)", "{h=linear, r=relu}: relu: h is also used outside the GEMM", "bias"},
      {R"(fusion f(a: DT[B, T, 32], b: DT[B, 32, 48], v: DT[48]) {
  p = matmul(a, b)
  y = add(p, v)
  return y
})", "epilogue: none", "{p=matmul}: batched or vector right operand (", "none"},
      {R"(fusion f(a: DT[T, 32], b: DT[32, 48], v: DT[48]) {
  p = matmul(a, b)
  y = add(p, v)
  return y, p
})", "epilogue: none", "{p=matmul, y=add}: p is also used outside the GEMM, which writes only its result", "none"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    expect_in_both_dtypes(c.text, {{"T", 19}, {"B", 2}}, not_taken(c.note, c.why, c.gemm));
  }
}

TEST(MatmulEpilogueGpu, WideResultWithoutCastBack) {
  ALLOY_REQUIRE_GPU();
  testing::GpuRun ran;
  expect_gpu_matches_cpu(R"(fusion f(x: bf16[T, 64], w: bf16[96, 64]) {
  p = linear(x, w)
  p32 = cast(p, dtype=f32)
  g = gelu(p32, approximate="tanh")
  return g
})", {{"T", 11}}, 7, /*scale: p is a bf16 GEMM result*/ 100, &ran);
  expect_not_taken(ran, "epilogue: none", "{p=linear, g=gelu}: the GEMM's result would be f32 from a bf16 product with no cast back", "none");
}

// ---- backward ----

TEST(MatmulEpilogueGpu, DgeluWithBiasGradient) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");  // the fused bias gradients, off by default
  const char* text = R"(fusion f(dy: DT[T, C], w: DT[C, H], h: DT[T, H]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h, approximate="tanh")
  db = sum(dh, dims=[0])
  return dh, db
})";
  Check f32 = not_taken("epilogue: none", std::string("{dg=matmul, dh=gelu_backward}: ") + kF32Gelu, "none");
  expect_in_both_dtypes(text, {{"T", 24}, {"C", 48}, {"H", 64}}, ran_epilogue("dgelu_bgrad"), f32);
  // H = 100: the aux leading dimension is not a multiple of 8: the fallback runs
  expect_in_both_dtypes(text, {{"T", 24}, {"C", 48}, {"H", 100}}, [](const testing::GpuRun& ran) {
    expect_refused_epilogue(ran, "dgelu_bgrad", " epilogue=dgelu_bgrad: aux_ld 100 must be a multiple of 8 and at least n",
                            kGemmThenKernel);
  }, f32);
}

TEST(MatmulEpilogueGpu, DgeluAlone) {
  expect_in_both_dtypes(R"(fusion f(dy: DT[T, C], w: DT[C, H], h: DT[T, H]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h, approximate="tanh")
  return dh
})", {{"T", 17}, {"C", 32}, {"H", 80}}, ran_epilogue("dgelu"),
                        not_taken("epilogue: none", std::string("{dg=matmul, dh=gelu_backward}: ") + kF32Gelu, "none"));
}

TEST(MatmulEpilogueGpu, WeightGradientsWithBiasGradients) {
  testing::ScopedEnv all_kinds("ALLOY_DISABLE_EPILOGUES", "");  // the fused bias gradients, off by default
  // dw = dy^T x sums dy over T as its A operand's rows (bgrad_a); dw_t = x^T dy, whose bias
  // gradient is taken already, runs plain
  expect_in_both_dtypes(R"(fusion f(x: DT[T, K], dy: DT[T, N]) {
  dy_t = permute(dy, dims=[1, 0])
  dw = matmul(dy_t, x)
  db = sum(dy, dims=[0])
  x_t = permute(x, dims=[1, 0])
  dw_t = matmul(x_t, dy)
  return dw, db, dw_t
})", {{"T", 40}, {"K", 32}, {"N", 48}}, [](const testing::GpuRun& ran) {
    expect_ran_epilogue(ran, "bgrad_a");
    EXPECT_NE(ran.launched.find(" [matmul]: cuBLASLt, epilogue none\n"), std::string::npos) << ran.launched;
  });
  // dw_t = x^T dy sums dy over T as its B operand's columns (bgrad_b)
  expect_in_both_dtypes(R"(fusion f(x: DT[T, K], dy: DT[T, N]) {
  x_t = permute(x, dims=[1, 0])
  dw_t = matmul(x_t, dy)
  db = sum(dy, dims=[0])
  return dw_t, db
})", {{"T", 40}, {"K", 24}, {"N", 36}}, ran_epilogue("bgrad_b"));
}

// relu_backward on the activation (not a mask) has no cuBLASLt form, nor does the exact (erf)
// GELU's gradient: the GEMMs run plain, the rest as kernels.
TEST(MatmulEpilogueGpu, BackwardPatternsNotTaken) {
  expect_in_both_dtypes(R"(fusion f(dy: DT[T, 32], w: DT[32, 64], h: DT[T, 64]) {
  dg = matmul(dy, w)
  dh = relu_backward(dg, h)
  db = sum(dh, dims=[0])
  return dh, db
})", {{"T", 20}}, not_taken("epilogue: none", "{dg=matmul, dh=relu_backward}: relu_backward: cuBLASLt's dReLU reads the ReLU bit mask", "none"));
  expect_in_both_dtypes(R"(fusion f(dy: DT[T, 32], w: DT[32, 64], h: DT[T, 64]) {
  dg = matmul(dy, w)
  dh = gelu_backward(dg, h)
  return dh
})", {{"T", 20}}, not_taken("epilogue: none", "{dg=matmul, dh=gelu_backward}: gelu_backward approximate=\"none\": cuBLASLt's dGELU is the derivative", "none"));
}

// mlp_backward's GEMMs: in bf16 the one making dg computes dh in its dgelu epilogue; with the bias
// gradients off by default (ALLOY_DISABLE_EPILOGUES), no bgrad kind runs.
TEST(MatmulEpilogueGpu, MlpBackwardExample) {
  ALLOY_REQUIRE_GPU();
  std::string text = testing::read_file(testing::source_path("examples/mlp_backward.fusion"));
  testing::GpuRun bf16, f32;
  expect_gpu_matches_cpu(text, {{"T", 16}}, 7, 1.0, &bf16);
  expect_ran_epilogue(bf16, "dgelu");
  EXPECT_EQ(bf16.launched.find("epilogue bgrad_"), std::string::npos) << bf16.launched;
  // the same program in f32 at a smaller width
  std::string small = text;
  for (auto [from, to] : {std::pair<std::string, std::string>{"bf16", "f32"}, {"3072", "256"}, {"768", "64"}})
    for (size_t at = small.find(from); at != std::string::npos; at = small.find(from, at + to.size()))
      small.replace(at, from.size(), to);
  expect_gpu_matches_cpu(small, {{"T", 40}}, 7, 1.0, &f32);
  // in f32 the dgelu is refused at planning: all four GEMMs run plain on cuBLASLt
  EXPECT_NE(f32.segments.find(std::string("{dg=matmul, dh=gelu_backward}: ") + kF32Gelu), std::string::npos) << f32.segments;
  EXPECT_EQ(f32.segments.find("[matmul] epilogue: dgelu"), std::string::npos) << f32.segments;
  int gemms = 0, plain = 0;
  for (size_t at = f32.launched.find(" [matmul]: "); at != std::string::npos; at = f32.launched.find(" [matmul]: ", at + 1), ++gemms)
    if (f32.launched.compare(at, 35, " [matmul]: cuBLASLt, epilogue none\n") == 0) ++plain;
  EXPECT_EQ(gemms, 4) << f32.launched;
  EXPECT_EQ(plain, 4) << f32.launched;
}

// The backward at a T where the bias gradients' column kernels split over blocks (the default),
// and with every fused bias-gradient epilogue instead (ALLOY_DISABLE_EPILOGUES="").
// Each way states which path it planned and that cuBLASLt ran it (no refusal and fallback), so a
// B path that quietly became the A path cannot pass.
TEST(MatmulEpilogueGpu, MlpBackwardBothWaysOfBiasGradients) {
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

TEST(MatmulEpilogueGpu, ReluAuxBias_WritesTheMask) {
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

TEST(MatmulEpilogueGpu, ReluAuxWithoutBias) {
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

TEST(MatmulEpilogueGpu, DreluAndDreluBgrad_ReadTheMask) {
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
TEST(MatmulEpilogueGpu, DreluOfATransposedMask_FallsBack) {
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
TEST(MatmulEpilogueGpu, DreluOfASlicedMask_FallsBack) {
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
TEST(MatmulEpilogueGpu, MlpReluExamples) {
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
TEST(MatmulEpilogueGpu, MlpBackwardSideStreamRunAfterRun) {
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
