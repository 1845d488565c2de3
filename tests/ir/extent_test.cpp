#include "alloy/ir/extent.h"

#include <gtest/gtest.h>

namespace alloy {
namespace {

TEST(Extent, ProductsAndQuotientsSimplify) {
  Extent b = Extent::symbol("B"), s = Extent::symbol("S");
  Extent bs768 = b * s * Extent::constant(768);
  EXPECT_EQ(bs768.str(), "768*B*S");
  EXPECT_EQ(bs768 / Extent::constant(768), b * s);
  EXPECT_EQ((bs768 / (s * Extent::constant(64))).str(), "12*B");
  EXPECT_EQ(b / b, Extent());
  EXPECT_TRUE((b / b).is_one());
}

TEST(Extent, EvaluateNeedsWholeNumbers) {
  Extent half_b = Extent::symbol("B") / Extent::constant(2);
  EXPECT_EQ(half_b.evaluate({{"B", 8}}), 4);
  EXPECT_FALSE(half_b.evaluate({{"B", 7}}).has_value());
  EXPECT_FALSE(half_b.evaluate({}).has_value());
}

TEST(Extent, DynamicPrintsAsQuestionMark) {
  Extent d = Extent::dynamic(3);
  EXPECT_TRUE(d.is_dynamic_symbol());
  EXPECT_EQ(d.str(true), "?");
  EXPECT_EQ(d.str(), "?3");
}

}  // namespace
}  // namespace alloy
