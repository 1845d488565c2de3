// Generated kernels compile with NVRTC for Hopper and Ampere with no GPU present (runs in CI).
#include <gtest/gtest.h>

#include <filesystem>

#include "alloy/pipeline/pipeline.h"
#include "alloy/ir/parser.h"
#include "backend/cuda/kernel_cases.h"
#include "test_util.h"

namespace alloy {
namespace {

#ifndef ALLOY_HAVE_CUDA
#define REQUIRE_CUDA_BUILD() ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT()
#else
#define REQUIRE_CUDA_BUILD() (void)0
#endif

TEST(OfflineCompile, EveryExampleCompilesForSm90AndSm80) {
  REQUIRE_CUDA_BUILD();
  int examples = 0;
  for (auto& entry : std::filesystem::directory_iterator(testing::source_path("examples"))) {
    if (entry.path().extension() != ".fusion") continue;
    SCOPED_TRACE(entry.path().string());
    auto fusions = parse_fusions(testing::read_file(entry.path().string()), entry.path().string());
    for (auto& fusion : fusions) {
      for (const char* arch : {"sm_90", "sm_80"}) {
        std::string report = compile_offline(*fusion, arch, false);
        EXPECT_NE(report.find("compiled for"), std::string::npos) << report;
        EXPECT_EQ(report.find(" 0 bytes"), std::string::npos) << report;
      }
    }
    ++examples;
  }
  EXPECT_GE(examples, 4);
}

// With sizes bound: the one variant a run would launch, its grid and block, and ptxas' registers
// and spills.
TEST(OfflineCompile, BoundSizesCompileTheVariantARunWouldLaunch) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion(R"(fusion f(x: bf16[N, D], g: bf16[T, D]) {
  y = softmax(x, dim=1)
  db = sum(g, dims=[0])
  return y, db
})", "bound.fusion", std::nullopt);
  Bindings sizes{{"N", 8192}, {"D", 8192}, {"T", 4096}};
  std::string report = compile_offline(*fusion, "sm_90", false, &sizes);
  EXPECT_NE(report.find("variant r1.1_v8_t256_i4_"), std::string::npos) << report;  // a block per 8192-wide row
  EXPECT_NE(report.find("grid 8192x1, block 256"), std::string::npos) << report;
  EXPECT_NE(report.find("_x32_"), std::string::npos) << report;  // the bias-gradient-like sum: a column kernel
  EXPECT_NE(report.find("registers"), std::string::npos) << report;
  EXPECT_NE(report.find("bytes spill stores"), std::string::npos) << report;
  EXPECT_NE(report.find("2 kernels compiled for sm_90"), std::string::npos) << report;
  Bindings missing{{"N", 8}};
  EXPECT_THROW(compile_offline(*fusion, "sm_90", false, &missing), UserError);
}

// A sharded fusion compiles as the part one rank runs, through the pipeline a run takes: local
// shapes (the column-parallel GELU over 1024 / 2 features of each row), and the all-reduce the
// sharding passes insert as a communication segment of its own.
TEST(OfflineCompile, ShardedFusionCompilesWhatOneRankRuns) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion(testing::read_file(testing::source_path("examples/tp_mlp.fusion")), "tp_mlp.fusion", std::nullopt);
  Bindings sizes{{"T", 64}};
  std::string report = compile_offline(*fusion, "sm_90", false, &sizes);
  EXPECT_NE(report.find("(the part one rank of @mesh[0, 1] runs; sharding decided at T=64)"), std::string::npos) << report;
  EXPECT_NE(report.find("[communication]: all_reduce, no kernel"), std::string::npos) << report;
  // unbound, the sharding passes count T as 4096, and the report says so
  std::string unbound = compile_offline(*fusion, "sm_90", false);
  EXPECT_NE(unbound.find("sharding decided assuming T=4096 (not bound; --bind SYMBOL=N decides at N)"), std::string::npos) << unbound;
  // the same GELU over one rank's [64, 512] block, written without a mesh, launches the same grid
  auto local = parse_fusion(R"(fusion g(h: f32[64, 512]) {
  y = gelu(h, approximate="tanh")
  return y
})", "local.fusion", std::nullopt);
  std::string alone = compile_offline(*local, "sm_90", false, &sizes);
  auto grid = [](const std::string& text) { return text.substr(text.find("grid "), text.find(", block") - text.find("grid ")); };
  EXPECT_EQ(grid(report.substr(report.find("[pointwise]"))), grid(alone)) << report << alone;
}

// A transposed operand: the tile transpose a run would launch compiles, staging z's tiles.
TEST(OfflineCompile, BoundTransposedOperandCompilesATileTranspose) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion(R"(fusion f(x: bf16[M, N], z: bf16[N, M]) {
  zt = permute(z, dims=[1, 0])
  s = mul(zt, 2.0)
  y = add(x, s)
  return y
})", "transpose.fusion", std::nullopt);
  Bindings sizes{{"M", 8192}, {"N", 8192}};
  std::string report = compile_offline(*fusion, "sm_90", false, &sizes);
  EXPECT_NE(report.find("_t0t."), std::string::npos) << report;  // axis 0 is zt's contiguous one; zt staged, x not
  EXPECT_NE(report.find("grid 16384x1, block 256"), std::string::npos) << report;
  EXPECT_NE(report.find("1 kernel compiled for sm_90"), std::string::npos) << report;
}

// Odd widths and totals: the variants with edge elements a run would launch compile.
TEST(OfflineCompile, BoundOddWidthsAndTotalsCompileVectorsWithEdgeElements) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion(R"(fusion f(x: bf16[R, W], w: bf16[W], a: bf16[N], b: bf16[N]) {
  y = layer_norm(x, w, normalized_ndim=1)
  m = mul(a, b)
  g = gelu(m)
  return y, g
})", "odd.fusion", std::nullopt);
  Bindings sizes{{"R", 8192}, {"W", 50257}, {"N", 100000003}};
  std::string report = compile_offline(*fusion, "sm_90", false, &sizes);
  EXPECT_NE(report.find("_e_vu"), std::string::npos) << report;   // rows in vectors, the weight element by element
  EXPECT_NE(report.find("_e_vv"), std::string::npos) << report;   // the odd total
  EXPECT_NE(report.find("2 kernels compiled for sm_90"), std::string::npos) << report;
}

// Grid reductions (issue 27): the variants runs of a gradient norm of 10^8 + 3 bf16 and of
// var_mean over [4, 25M] rows launch (a wave of 132 SMs x 4 blocks over the rows), and without
// sizes the representative ones, compile.
TEST(OfflineCompile, GridReductionsCompile) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion(R"(fusion f(x: bf16[N], r: bf16[R, M]) {
  x32 = cast(x, dtype=f32)
  sq = mul(x32, x32)
  ss = sum(sq)
  norm = sqrt(ss)
  v, mu = var_mean(r, dims=[1])
  return norm, v, mu
})", "grid.fusion", std::nullopt);
  Bindings sizes{{"N", 100000003}, {"R", 4}, {"M", 25000000}};
  std::string report = compile_offline(*fusion, "sm_90", false, &sizes);
  EXPECT_NE(report.find("variant r0.1_v8_t256_i0_b4_g_32_e_v:"), std::string::npos) << report;  // the odd length: edge elements
  EXPECT_NE(report.find("grid 528x1, block 256"), std::string::npos) << report;
  EXPECT_NE(report.find("variant r1.1_v8_t256_i0_b4_g_32_v:"), std::string::npos) << report;
  EXPECT_NE(report.find("grid 132x4, block 256"), std::string::npos) << report;
  EXPECT_NE(report.find("2 kernels compiled for sm_90"), std::string::npos) << report;
  std::string unbound = compile_offline(*fusion, "sm_90", false);
  EXPECT_NE(unbound.find("_g_"), std::string::npos) << unbound;
  EXPECT_NE(unbound.find("_g_32_e_"), std::string::npos) << unbound;
  EXPECT_EQ(unbound.find(" 0 bytes"), std::string::npos) << unbound;
}

TEST(OfflineCompile, EveryOpFamilyGeneratesCompilableCode) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion(R"(fusion f(x: bf16[N, 64], y: f32[N, 64], i: i32[N, 64], m: bool[N, 64], s: f32) {
  a = add(x, y)
  b = mul(a, s)
  c = where(m, b, y)
  d = pow(c, 2.0)
  e = cast(i, dtype=f16)
  f = maximum(e, x)
  g = gelu_backward(y, a, approximate="tanh")
  h = relu_backward(g, c)
  k = div(i, 7)
  l = ne(i, 3)
  v, mu = var_mean(h, dims=[1])
  mx = max(f, dims=[1])
  mn = min(i, dims=[1])
  sm = sum(l, dims=[1])
  return d, k, v, mu, mx, mn, sm
})", "ops.fusion", std::nullopt);
  std::string report = compile_offline(*fusion, "sm_90", false);
  EXPECT_NE(report.find("compiled for sm_90"), std::string::npos) << report;
  std::string source = compile_offline(*fusion, "sm_80", true);
  EXPECT_NE(source.find("extern \"C\" __global__"), std::string::npos);
}

// cat is part of generated kernels: RoPE is one NVRTC-compiled kernel (neg applied as the cat
// loads), and at bound sizes it reads 16-byte vectors (the cat's boundary, 64, is a multiple of
// 8 bf16s).
TEST(OfflineCompile, CatCompilesIntoGeneratedKernels) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion_file(testing::source_path("examples/rope.fusion"));
  std::string report = compile_offline(*fusion, "sm_90", false);
  EXPECT_EQ(report.find("cpu_fallback"), std::string::npos) << report;
  EXPECT_EQ(report.find("[noop]"), std::string::npos) << report;
  EXPECT_NE(report.find("segment 0 [pointwise] variant r1.0_v8_t256_i0_vvvv_c0: sm_90 cubin"), std::string::npos) << report;
  Bindings sizes{{"B", 2}, {"S", 4096}};
  report = compile_offline(*fusion, "sm_90", false, &sizes);
  EXPECT_NE(report.find("segment 0 [pointwise] variant r4.0_v8_t256_i0_32_vvvv_c3: sm_90 cubin"), std::string::npos) << report;
  EXPECT_NE(report.find("1 kernel compiled for sm_90"), std::string::npos) << report;
  // a cat of mixed dtypes along a reduced axis whose size is a sum of two symbols
  auto mixed = parse_fusion(R"(fusion f(a: i32[R, A], b: f32[R, C], c: bf16[R, 8], d: f16[R, 8]) {
  k = cat(a, b, dim=1)
  s = sum(k, dims=[1])
  m = cat(c, d, dim=0)
  e = exp(m)
  return s, e
})", "mixed.fusion", std::nullopt);
  report = compile_offline(*mixed, "sm_80", false);
  EXPECT_EQ(report.find("cpu_fallback"), std::string::npos) << report;
  EXPECT_NE(report.find("compiled for sm_80"), std::string::npos) << report;
  Bindings mixed_sizes{{"R", 64}, {"A", 40}, {"C", 24}};
  report = compile_offline(*mixed, "sm_80", false, &mixed_sizes);
  EXPECT_NE(report.find("2 kernels compiled for sm_80"), std::string::npos) << report;
}

// The layer norm and RMSNorm backward compile, with NVRTC, into one inner-outer kernel each, in the
// representative variants (scalar and vectors, each with and without the next row loaded ahead;
// vectors with two rows ahead combined over the grid, the cooperative kernel)
// and at the bench case's [8192, 4096]: its persistent grid of 264 blocks (two of 512 threads an
// SM, the column partials in shared memory), the next row loaded ahead, and registers enough for
// it at two blocks an SM (no spills); the RMSNorm's too.
TEST(OfflineCompile, NormalizationBackwardsCompileIntoOneInnerOuterKernel) {
  REQUIRE_CUDA_BUILD();
  for (const std::string& text : {testing::layer_norm_backward("bf16"), testing::rms_norm_backward("f32")}) {
    auto f = parse_fusion(text, "io.fusion", std::nullopt);
    for (const char* arch : {"sm_90", "sm_80"}) {
      std::string report = compile_offline(*f, arch, false);
      EXPECT_EQ(report.find("segment 1"), std::string::npos) << "one segment\n" << report;
      EXPECT_NE(report.find("segment 0 [inner_outer] variant"), std::string::npos) << report;
      EXPECT_NE(report.find("_io_pf_"), std::string::npos) << report;
      EXPECT_NE(report.find("_io_pf2_l0_"), std::string::npos) << report;
      EXPECT_NE(report.find("5 kernels compiled for " + std::string(arch)), std::string::npos) << report;
    }
  }
  Bindings bench{{"N", 8192}, {"D", 4096}};
  auto f = parse_fusion(testing::layer_norm_backward("bf16"), "io.fusion", std::nullopt);
  std::string report = compile_offline(*f, "sm_90", false, &bench);
  EXPECT_NE(report.find("segment 0 [inner_outer] variant r1.1_v8_t512_i1_b2_io_pf_l0_sp_32_f_vvvss: sm_90 cubin"), std::string::npos) << report;
  EXPECT_NE(report.find("grid 264x1, block 512"), std::string::npos) << report;
  EXPECT_NE(report.find(" 0 bytes spill stores"), std::string::npos) << report;
  auto rms = parse_fusion(testing::rms_norm_backward("bf16"), "io.fusion", std::nullopt);
  report = compile_offline(*rms, "sm_90", false, &bench);
  EXPECT_NE(report.find("_io_pf_"), std::string::npos) << report;
  EXPECT_NE(report.find(" 0 bytes spill stores"), std::string::npos) << report;
  // RMSNorm's backward recomputing its rstd over 12288 bf16 columns (a held-out form): 384 threads
  // of four vectors a row ahead, estimated at ptxas' cap of 168, spill 72 bytes; kept, as measured
  // faster than 768 threads of two vectors without the row ahead, which do not spill (H100, session
  // 35: 4096 rows 138.9-143.8 us against 146.8-151.1, 8192 rows 250.6-251.4 against 262.3-280.4)
  auto recompute = parse_fusion(
      "fusion f(dy: bf16[N, 12288], x: bf16[N, 12288], w: bf16[12288]) {\n"
      "  dy32 = cast(dy, dtype=f32)\n  x32 = cast(x, dtype=f32)\n  w32 = cast(w, dtype=f32)\n  x2 = mul(x32, x32)\n"
      "  ms = mean(x2, dims=[1], keepdim=true)\n  mse = add(ms, 1.0e-6)\n  r = rsqrt(mse)\n  xhat = mul(x32, r)\n"
      "  g = mul(dy32, w32)\n  gx = mul(g, xhat)\n  b = sum(gx, dims=[1], keepdim=true)\n  gb = mul(b, 8.138020833333333e-05)\n"
      "  t1 = mul(xhat, gb)\n  t3 = sub(g, t1)\n  dx32 = mul(t3, r)\n  dx = cast(dx32, dtype=bf16)\n"
      "  dyx = mul(dy32, xhat)\n  dw32 = sum(dyx, dims=[0])\n  dw = cast(dw32, dtype=bf16)\n  return dx, dw\n}\n",
      "rms_recompute.fusion", std::nullopt);
  Bindings rows{{"N", 4096}};
  report = compile_offline(*recompute, "sm_90", false, &rows);
  EXPECT_NE(report.find("[inner_outer] variant r1.1_v8_t384_i4_b1_io_pf_l0_"), std::string::npos) << report;
  EXPECT_NE(report.find("block 384"), std::string::npos) << report;
}

// The tuning table's kernel shapes not on by default compile with NVRTC too (their GPU A/B comes
// first): row groups in the inner-outer kernel (named barriers: 7 groups of 96 threads at 768
// columns, one block of 672 an SM, combined over the grid) and var_mean's merges every 4 steps.
TEST(OfflineCompile, RowGroupsAndWindowedVarMeanCompile) {
  REQUIRE_CUDA_BUILD();
  testing::TuningFile file("\"inner_outer_row_groups\": 7, \"grid_welford_steps\": 4");
  testing::ScopedEnv tuning("ALLOY_KERNEL_TUNING", file.path.c_str());
  Bindings narrow{{"N", 32768}, {"D", 768}};
  auto ln = parse_fusion(testing::layer_norm_backward("bf16"), "io.fusion", std::nullopt);
  std::string report = compile_offline(*ln, "sm_90", false, &narrow);
  // (no row ahead: 672 threads a block have at most 80 registers, below the estimate of one)
  EXPECT_NE(report.find("_io_l0_rg7_"), std::string::npos) << report;
  EXPECT_NE(report.find("grid 132x1, block 672"), std::string::npos) << report;
  EXPECT_NE(report.find(" 0 bytes spill stores"), std::string::npos) << report;
  auto vm = parse_fusion("fusion f(x: f32[R, N]) {\n  v, m = var_mean(x, dims=[1], correction=0)\n  return v, m\n}\n", "vm.fusion",
                         std::nullopt);
  Bindings rows{{"R", 4}, {"N", 25000000}};
  report = compile_offline(*vm, "sm_90", false, &rows);
  EXPECT_NE(report.find("_g_ws4_"), std::string::npos) << report;
  EXPECT_NE(report.find(" 0 bytes spill stores"), std::string::npos) << report;
  report = compile_offline(*ln, "sm_80", false, &narrow);
  EXPECT_NE(report.find("_rg7_"), std::string::npos) << report;
}

// Rows ahead through shared memory (asynchronous copies; inner_outer_staged_rows, off by default)
// compile with NVRTC for sm_90 and sm_80 at 768 and 4096 columns, without spills on sm_90 (on sm_80
// the layer norm backward at 768 columns spills 20 bytes with its rows ahead in registers or
// staged alike: the A100 has not been tuned).
TEST(OfflineCompile, StagedRowsAheadCompile) {
  REQUIRE_CUDA_BUILD();
  testing::TuningFile file("\"inner_outer_staged_rows\": 2");
  testing::ScopedEnv tuning("ALLOY_KERNEL_TUNING", file.path.c_str());
  auto ln = parse_fusion(testing::layer_norm_backward("bf16"), "io.fusion", std::nullopt);
  for (int64_t d : {768, 4096})
    for (const char* arch : {"sm_90", "sm_80"}) {
      SCOPED_TRACE(std::string(arch) + ", " + std::to_string(d) + " columns");
      Bindings sizes{{"N", 32768}, {"D", d}};
      std::string report = compile_offline(*ln, arch, false, &sizes);
      EXPECT_NE(report.find("_sr_"), std::string::npos) << report;
      if (std::string(arch) == "sm_90") EXPECT_NE(report.find(" 0 bytes spill stores"), std::string::npos) << report;
    }
  // copies of 8 and 4 bytes (cp.async.ca): 1002 columns in vectors of two, f32 and bf16
  for (const char* dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(std::string(dtype) + ", 1002 columns");
    auto f = parse_fusion(testing::layer_norm_backward(dtype), "io.fusion", std::nullopt);
    Bindings sizes{{"N", 1000}, {"D", 1002}};
    std::string report = compile_offline(*f, "sm_90", false, &sizes);
    EXPECT_NE(report.find("_v2_"), std::string::npos) << report;
    EXPECT_NE(report.find("_sr_"), std::string::npos) << report;
  }
}

// Grid reductions loading a step ahead (grid_loads_ahead, off by default) compile for sm_90 without
// spills at 4 blocks an SM: var_mean of 4 rows of 25M bf16 and a grad norm of 10^8.
TEST(OfflineCompile, GridLoadsAheadCompile) {
  REQUIRE_CUDA_BUILD();
  testing::TuningFile file("\"grid_loads_ahead\": true");
  testing::ScopedEnv tuning("ALLOY_KERNEL_TUNING", file.path.c_str());
  const std::vector<std::pair<std::string, Bindings>> cases = {
      {"fusion f(x: bf16[R, N]) {\n  x32 = cast(x, dtype=f32)\n  v, m = var_mean(x32, dims=[1], correction=1)\n  return v, m\n}\n",
       {{"R", 4}, {"N", 25000000}}},
      {"fusion f(x: bf16[N]) {\n  x32 = cast(x, dtype=f32)\n  sq = mul(x32, x32)\n  s = sum(sq)\n  return s\n}\n", {{"N", 100000000}}}};
  for (const auto& [text, sizes] : cases) {
    auto f = parse_fusion(text, "grid.fusion", std::nullopt);
    std::string report = compile_offline(*f, "sm_90", false, &sizes);
    EXPECT_NE(report.find("_b4_g_la_"), std::string::npos) << report;
    EXPECT_NE(report.find(" 0 bytes spill stores"), std::string::npos) << report;
  }
}

// gather and iota are part of generated kernels: cross-entropy, forward and backward, is one
// NVRTC-compiled normalization kernel (no CPU fallback) in every representative variant, and at
// GPT-2's vocabulary a block per row with edge elements; the loss alone streams the row once.
// Every gather and iota case of kernel_cases.h compiles too.
TEST(OfflineCompile, GatherAndIotaCompileIntoGeneratedKernels) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion_file(testing::source_path("examples/cross_entropy.fusion"));
  for (const char* arch : {"sm_90", "sm_80"}) {
    std::string report = compile_offline(*fusion, arch, false);
    EXPECT_EQ(report.find("cpu_fallback"), std::string::npos) << report;
    EXPECT_EQ(report.find("segment 1"), std::string::npos) << "one segment\n" << report;
    EXPECT_NE(report.find("segment 0 [normalization] variant"), std::string::npos) << report;
  }
  Bindings gpt2{{"T", 8192}, {"V", 50257}};
  std::string report = compile_offline(*fusion, "sm_90", false, &gpt2);
  EXPECT_NE(report.find("segment 0 [normalization] variant r1.1_v8_t512_i13_b2_sh_32_e_vsp: sm_90 cubin"), std::string::npos) << report;
  for (const testing::KernelCase& c : testing::kernel_cases()) {
    if (c.text.find("gather(") == std::string::npos && c.text.find("iota(") == std::string::npos) continue;
    SCOPED_TRACE(c.name);
    auto f = parse_fusion(c.text, c.name + ".fusion", std::nullopt);
    report = compile_offline(*f, "sm_90", false);
    EXPECT_EQ(report.find("cpu_fallback"), std::string::npos) << report;
    EXPECT_NE(report.find("compiled for sm_90"), std::string::npos) << report;
    if (c.name == "CrossEntropyLossOverLongRows") {
      report = compile_offline(*f, "sm_90", false, &c.sizes);
      EXPECT_NE(report.find("_so_"), std::string::npos) << "the streaming log-sum-exp\n" << report;
    }
  }
}

// What no GPU path runs says why, in `alloy compile`'s report as in --dump segments.
TEST(OfflineCompile, FallbacksSayWhy) {
  REQUIRE_CUDA_BUILD();
  auto fusion = parse_fusion("fusion f(a: i64[4, 8], b: i64[8, 2]) {\n  m = matmul(a, b)\n  return m\n}\n", "t.fusion", std::nullopt);
  std::string report = compile_offline(*fusion, "sm_90", false);
  EXPECT_NE(report.find("segment 0 [cpu_fallback]: no generated kernel (i64 matmul: the cuBLASLt path takes bf16, f16 and f32 operands)"),
            std::string::npos)
      << report;
}

TEST(OfflineCompile, BadArchitectureIsAUserError) {
  auto fusion = parse_fusion("fusion f(x: f32[4]) {\n  y = exp(x)\n  return y\n}\n", "t.fusion", std::nullopt);
  EXPECT_THROW(compile_offline(*fusion, "gfx90a", false), UserError);
}

}  // namespace
}  // namespace alloy
