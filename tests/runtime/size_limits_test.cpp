// Hostile and careless sizes and literals (issue 16): each is a located user error, at check time
// where the sizes are known and at run time once they are bound; nothing wraps or overflows.
#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/input_binding.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

std::string check_error(const std::string& text) {
  try {
    parse_fusion(text, "t.fusion");
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(SizeLimits, AnOverflowingConstantShape_IsALocatedErrorAtCheckTime) {
  std::string e = check_error("fusion f(x: f32[4]) {\n  b = expand(x, shape=[4294967296, 4294967296, 4])\n  s = sum(b)\n  return s\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "'b' would have at least 4294967296 * 4294967296 * 4 elements")) << e;
  e = check_error("fusion f(x: f32[1099511627776, 1099511627776]) {\n  return x\n}");
  EXPECT_TRUE(has(e, "t.fusion:1:")) << e;
  EXPECT_TRUE(has(e, "at most 2^48")) << e;
  // a symbolic size with a large constant factor counts its factor
  e = check_error("fusion f(x: f32[N]) {\n  b = broadcast_in_dim(x, shape=[1125899906842624, 1024, N], broadcast_dims=[2])\n  return b\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
}

TEST(SizeLimits, BoundSizesTooLargeToRun_AreUserErrorsAtTheStatementNotCrashes) {
  auto run = [](const std::string& text, Bindings sizes) {
    auto fusion = parse_fusion(text, "r.fusion");
    std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes, 1);
    FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
    try {
      executor.run(inputs);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // elements past 2^48 through a bound symbol: the statement that makes them
  std::string e = run("fusion f(x: f32[N]) {\n  b = broadcast_in_dim(x, shape=[1048576, 1048576, N], broadcast_dims=[2])\n  c = exp(b)\n  return c\n}",
                      {{"N", 1024}});
  EXPECT_TRUE(has(e, "r.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "at most 2^48")) << e;
  // fewer elements, but more bytes than the machine has: a materialized result is refused
  e = run("fusion f(x: f32[N]) {\n  b = broadcast_in_dim(x, shape=[1048576, 1048576, N], broadcast_dims=[2])\n  c = exp(b)\n  return c\n}",
          {{"N", 4}});
  EXPECT_TRUE(has(e, "r.fusion:3:")) << e;
  EXPECT_TRUE(has(e, "'c' (f32[1048576, 1048576, N]) needs 17592186044416 bytes")) << e;
}

TEST(Literals, AnIntegerLiteralThatDoesNotFitTheTensorsDtype_IsALocatedError) {
  std::string e = check_error("fusion f(a: i32[4]) {\n  c = add(a, 99999999999)\n  return c\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "the literal 99999999999 does not fit i32")) << e;
  e = check_error("fusion f(a: i32[4], m: bool[4]) {\n  c = where(m, a, -2147483649)\n  return c\n}");
  EXPECT_TRUE(has(e, "does not fit i32")) << e;
  e = check_error("fusion f(a: i32[4]) {\n  c = eq(a, 3000000000)\n  return c\n}");
  EXPECT_TRUE(has(e, "does not fit i32")) << e;
  // what fits is fine, and a float literal promotes instead (PyTorch's rule)
  EXPECT_EQ(check_error("fusion f(a: i32[4]) {\n  c = add(a, 2147483647)\n  d = mul(a, 1.0e12)\n  return c, d\n}"), "no error");
}

TEST(Literals, AnIntegerToANegativeLiteralPower_IsALocatedError) {
  std::string e = check_error("fusion f(a: i64[4]) {\n  c = pow(a, -1)\n  return c\n}");
  EXPECT_TRUE(has(e, "t.fusion:2:")) << e;
  EXPECT_TRUE(has(e, "negative power -1")) << e;
  EXPECT_EQ(check_error("fusion f(a: i64[4], x: f32[4]) {\n  c = pow(a, 2)\n  d = pow(x, -1)\n  return c, d\n}"), "no error");
}

}  // namespace
}  // namespace alloy
