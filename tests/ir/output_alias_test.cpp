// In-place outputs in the text format: `return y -> x` writes output y into input x's buffer.
// Parsing, printing (round trip), the static checks, and the run (CPU) that updates the input.
#include <cmath>

#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"
#include "alloy/runtime/executor.h"

namespace alloy {
namespace {

constexpr const char* kStep = R"(fusion sgd(p: f32[N], g: f32[N]) {
  s = mul(g, 0.5)
  q = sub(p, s)
  n = sum(g)
  return q -> p, n
}
)";

std::string error_of(const std::string& text) {
  try {
    parse_fusion(text, "alias.fusion");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(OutputAlias, ParsesAndPrintsAsAnArrow) {
  auto fusion = parse_fusion(kStep, "alias.fusion");
  ASSERT_EQ(fusion->output_aliases().size(), 2u);
  EXPECT_EQ(fusion->output_aliases()[0], fusion->inputs()[0]);
  EXPECT_EQ(fusion->output_aliases()[1], nullptr);
  std::string printed = print_fusion(*fusion, {false});
  EXPECT_NE(printed.find("return q -> p, n"), std::string::npos) << printed;
  EXPECT_EQ(print_fusion(*parse_fusion(printed, "again.fusion"), {false}), printed);
}

TEST(OutputAlias, CloneKeepsTheAlias) {
  auto fusion = parse_fusion(kStep, "alias.fusion");
  auto copy = fusion->clone();
  EXPECT_EQ(copy->output_aliases()[0], copy->inputs()[0]);
}

TEST(OutputAlias, MistakesAreLocatedUserErrors) {
  EXPECT_EQ(error_of("fusion f(x: f32[3]) {\n  y = cast(x, dtype=f64)\n  return y -> x\n}"),
            "alias.fusion:3:10: return y -> x: the output is f64[3] but the input is f32[3]; expected the same dtype and shape");
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = neg(x)\n  z = exp(x)\n  return y -> x, z -> x\n}").find("already updated"),
            std::string::npos);
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = neg(x)\n  return y -> y\n}").find("not a tensor input"), std::string::npos);
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = neg(x)\n  return y ->\n}").find("expected the name of the input"),
            std::string::npos);
  // a lone '-' or '>' elsewhere is still what it was
  EXPECT_NE(error_of("fusion f(x: f32[3]) {\n  y = add(x, ->1)\n  return y\n}"), "");
}

TEST(OutputAlias, RunWritesTheInputAndReturnsIt) {
  FusionExecutor executor(parse_fusion(kStep, "alias.fusion"), {DeviceChoice::cpu});
  float p[4] = {1, 1, 1, 1}, g[4] = {0, 1, 2, 3};
  Tensor pt = Tensor::borrow(p, Device{}, DType::f32, {4}, {1}), gt = Tensor::borrow(g, Device{}, DType::f32, {4}, {1});
  std::vector<Tensor> out = executor.run({pt, gt});
  EXPECT_EQ(out[0].data(), static_cast<void*>(p));
  EXPECT_FLOAT_EQ(p[3], -0.5f);
  EXPECT_FLOAT_EQ(load_as_double(out[1].data(), DType::f32, 0), 6.0);
  executor.run({pt, gt});
  EXPECT_FLOAT_EQ(p[3], -2.0f);
}

// Outputs are the fusion's values before any in-place write: a view of the updated input, the
// input itself, and a swap of two inputs all see the old values.
TEST(OutputAlias, OtherOutputsViewingTheUpdatedInputKeepItsOldValues) {
  FusionExecutor executor(parse_fusion("fusion f(x: f32[2, 2]) {\n  y = exp(x)\n  t = permute(x, dims=[1, 0])\n  return y -> x, t, x\n}",
                                       "alias.fusion"),
                          {DeviceChoice::cpu});
  float x[4] = {0, 1, 2, 3};
  std::vector<Tensor> out = executor.run({Tensor::borrow(x, Device{}, DType::f32, {2, 2}, {2, 1})});
  EXPECT_FLOAT_EQ(x[1], std::exp(1.0f));  // updated in place
  Tensor t = out.at(1), old = out.at(2);
  EXPECT_NE(t.data(), static_cast<void*>(x));
  EXPECT_FLOAT_EQ(load_as_double(t.data(), DType::f32, t.stride(0) * 0 + t.stride(1) * 1), 2.0);  // t[0][1] = old x[1][0]
  EXPECT_FLOAT_EQ(load_as_double(t.data(), DType::f32, t.stride(0) * 1 + t.stride(1) * 0), 1.0);  // t[1][0] = old x[0][1]
  EXPECT_FLOAT_EQ(load_as_double(old.data(), DType::f32, 3), 3.0);

  FusionExecutor swap(parse_fusion("fusion s(a: f32[2], b: f32[2]) {\n  return b -> a, a -> b\n}", "swap.fusion"), {DeviceChoice::cpu});
  float a[2] = {1, 2}, b[2] = {3, 4};
  swap.run({Tensor::borrow(a, Device{}, DType::f32, {2}, {1}), Tensor::borrow(b, Device{}, DType::f32, {2}, {1})});
  EXPECT_EQ(std::vector<float>(a, a + 2), (std::vector<float>{3, 4}));
  EXPECT_EQ(std::vector<float>(b, b + 2), (std::vector<float>{1, 2}));
}

TEST(OutputAlias, SizesOfDifferentSymbolsMustAgreeAtRunTime) {
  FusionExecutor executor(parse_fusion("fusion f(x: f32[N], y: f32[M]) {\n  z = neg(y)\n  return z -> x\n}", "alias.fusion"),
                          {DeviceChoice::cpu});
  float x[3] = {}, y[4] = {};
  EXPECT_THROW(executor.run({Tensor::borrow(x, Device{}, DType::f32, {3}, {1}), Tensor::borrow(y, Device{}, DType::f32, {4}, {1})}),
               UserError);
}

}  // namespace
}  // namespace alloy
