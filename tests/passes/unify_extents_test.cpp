// unify_extents: sizes that must be equal become one extent for the kernels; binding the
// rewritten inputs checks the equality; a symbol no input carries any more stays bound.
#include "alloy/passes/unify_extents.h"

#include <gtest/gtest.h>

#include "alloy/ir/parser.h"
#include "alloy/runtime/input_binding.h"

namespace alloy {
namespace {

Tensor zeros(std::vector<int64_t> sizes) { return Tensor::empty(DType::f32, std::move(sizes)); }

TEST(UnifyExtents, DynamicSizesMeetingInABroadcast_BecomeOne) {
  auto fusion = parse_fusion("fusion f(x: f32[?, 4], y: f32[?, 4]) {\n  z = add(x, y)\n  return z\n}", "u.fusion");
  auto unified = unify_extents(*fusion);
  EXPECT_NE(fusion->inputs()[0]->shape()[0], fusion->inputs()[1]->shape()[0]);
  EXPECT_EQ(unified->inputs()[0]->shape()[0], unified->inputs()[1]->shape()[0]);
  EXPECT_EQ(unified->outputs()[0]->shape()[0], unified->inputs()[0]->shape()[0]);
  // equal sizes bind both symbols; different ones are an error at the second input
  Bindings b = bind_inputs(*unified, {zeros({3, 4}), zeros({3, 4})});
  EXPECT_EQ(b.at(*fusion->inputs()[0]->shape()[0].as_symbol()), 3);
  EXPECT_EQ(b.at(*fusion->inputs()[1]->shape()[0].as_symbol()), 3);  // the symbol y no longer carries
  try {
    bind_inputs(*unified, {zeros({3, 4}), zeros({5, 4})});
    FAIL() << "different sizes bound";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("input 'y', axis 0"), std::string::npos) << e.what();
  }
}

TEST(UnifyExtents, ASymbolEqualToAConstant_BecomesTheConstant) {
  auto fusion = parse_fusion("fusion f(x: f32[N], y: f32[4]) {\n  z = mul(x, y)\n  return z\n}", "u.fusion");
  auto unified = unify_extents(*fusion);
  EXPECT_EQ(unified->inputs()[0]->shape()[0], Extent::constant(4));
  Bindings b = bind_inputs(*unified, {zeros({4}), zeros({4})});
  EXPECT_EQ(b.at("N"), 4);
  EXPECT_THROW(bind_inputs(*unified, {zeros({5}), zeros({4})}), UserError);
}

TEST(UnifyExtents, FusionsWithoutConstraints_AreUnchanged) {
  auto fusion = parse_fusion("fusion f(x: f32[B, S]) {\n  y = exp(x)\n  s = sum(y, dims=[1])\n  return s\n}", "u.fusion");
  auto unified = unify_extents(*fusion);
  for (size_t i = 0; i < fusion->values().size(); ++i)
    EXPECT_EQ(unified->values()[i]->type_str(), fusion->values()[i]->type_str());
}

}  // namespace
}  // namespace alloy
