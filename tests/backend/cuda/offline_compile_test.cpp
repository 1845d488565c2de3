// Generated kernels compile with NVRTC for Hopper and Ampere with no GPU present (runs in CI).
#include <gtest/gtest.h>

#include <filesystem>

#include "alloy/backend/gpu_plan.h"
#include "alloy/ir/parser.h"
#include "test_util.h"

namespace alloy {
namespace {

#ifndef ALLOY_HAVE_CUDA
#define REQUIRE_CUDA_BUILD() GTEST_SKIP() << "this build has no CUDA backend (the CUDA toolkit was not found)"
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

// With sizes bound: the one variant a run would launch, its grid and block, and ptxas' registers.
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
  EXPECT_NE(report.find("2 kernels compiled for sm_90"), std::string::npos) << report;
  Bindings missing{{"N", 8}};
  EXPECT_THROW(compile_offline(*fusion, "sm_90", false, &missing), UserError);
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

TEST(OfflineCompile, BadArchitectureIsAUserError) {
  auto fusion = parse_fusion("fusion f(x: f32[4]) {\n  y = exp(x)\n  return y\n}\n", "t.fusion", std::nullopt);
  EXPECT_THROW(compile_offline(*fusion, "gfx90a", false), UserError);
}

}  // namespace
}  // namespace alloy
