// decompose_composites (GPU and sharded runs): the composites become primitives, and pow to a
// literal 0.5 / -0.5 becomes sqrt / rsqrt as PyTorch computes it (the CPU reference alike:
// ReferencePointwise.PowToALiteralHalf_IsSqrtAndToMinusAHalfRsqrt).
#include "alloy/passes/decompose_composites.h"

#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"

namespace alloy {
namespace {

TEST(DecomposeComposites, PowToALiteralHalfOfAFloat_IsSqrtOrRsqrt_OtherPowersStay) {
  auto fusion = parse_fusion(
      "fusion f(x: f32[4], n: i32[4], e: f32[4]) {\n  a = pow(x, 0.5)\n  b = pow(x, -0.5)\n  c = pow(x, 2.0)\n"
      "  d = pow(n, 0.5)\n  g = pow(x, e)\n  return a, b, c, d, g\n}\n",
      "p.fusion");
  std::string text = print_fusion(*decompose_composites(*fusion));
  EXPECT_NE(text.find("a = sqrt(x)"), std::string::npos) << text;
  EXPECT_NE(text.find("b = rsqrt(x)"), std::string::npos) << text;
  EXPECT_NE(text.find("c = pow(x, 2.0)"), std::string::npos) << text;
  EXPECT_NE(text.find("d = pow(n, 0.5)"), std::string::npos) << text;  // an integer base: f32 result, C's pow
  EXPECT_NE(text.find("g = pow(x, e)"), std::string::npos) << text;
}

// A user's value named like the helper a rewrite makes (softmax's `s__max`, var_mean's `m__kept`),
// defined after the composite: the helper takes another name (it took the user's, and the user's
// own definition was then "already defined" on every GPU and sharded run).
TEST(DecomposeComposites, AUsersValueNamedLikeAHelper_KeepsItsName) {
  auto fusion = parse_fusion(
      "fusion f(x: f32[2, 4]) {\n  s = softmax(x, dim=-1)\n  s__max = mul(x, 100.0)\n  v, m = var_mean(x, dims=[1], keepdim=true)\n"
      "  m__kept = mul(x, 3.0)\n  y = add(s, s__max)\n  z = add(m, m__kept)\n  return y, z\n}\n",
      "p.fusion");
  std::string text = print_fusion(*decompose_composites(*fusion));
  EXPECT_NE(text.find("s__max = mul(x, "), std::string::npos) << text;
  EXPECT_NE(text.find("m__kept = mul(x, 3.0)"), std::string::npos) << text;
  EXPECT_NE(text.find("y = add(s, s__max)"), std::string::npos) << text;
}

}  // namespace
}  // namespace alloy
