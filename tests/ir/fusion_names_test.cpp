// The Fusion's name index: find_value, fresh_name and rename_value agree with the values' names
// through adding, renaming (the builder's named(), literals stepping aside in the parser) and
// cloning.
#include <gtest/gtest.h>

#include <chrono>

#include "alloy/ir/builder.h"
#include "alloy/ir/parser.h"

namespace alloy {
namespace {

ValueType f32(std::vector<Extent> shape) {
  ValueType t;
  t.dtype = DType::f32;
  t.shape = std::move(shape);
  return t;
}

// find_value by a linear scan, the definition the index must agree with.
Value* scan(const Fusion& f, const std::string& name) {
  for (auto& v : f.values())
    if (v->name == name) return v.get();
  return nullptr;
}

void expect_index_matches_names(const Fusion& f) {
  for (auto& v : f.values()) EXPECT_EQ(f.find_value(v->name), v.get()) << v->name;
}

TEST(FusionNames, FindValue_FindsInputsOpOutputsAndLiteralsByName) {
  Fusion f("f");
  Value* x = f.add_input("x", f32({Extent::constant(4)}));
  Value* one = f.add_literal(Literal{Literal::Kind::real, 0, 1.0, false});
  Value* y = f.add_op1(OpKind::add, {x, one}, {}, {}, "y");
  Value* t = f.add_op1(OpKind::exp, {y});
  EXPECT_EQ(f.find_value("x"), x);
  EXPECT_EQ(f.find_value("y"), y);
  EXPECT_EQ(f.find_value(one->name), one);
  EXPECT_EQ(f.find_value(t->name), t);
  EXPECT_EQ(f.find_value("nothing"), nullptr);
  EXPECT_EQ(f.find_value(""), nullptr);
  expect_index_matches_names(f);
}

TEST(FusionNames, FreshName_SkipsNamesAlreadyTaken) {
  Fusion f("f");
  Value* x = f.add_input("t0", f32({}));
  f.add_op1(OpKind::neg, {x}, {}, {}, "t1");
  std::string fresh = f.fresh_name();
  EXPECT_EQ(scan(f, fresh), nullptr);
  EXPECT_EQ(fresh, "t2");
}

TEST(FusionNames, NameTakenByAnInputOrAnOp_IsAUserError) {
  Fusion f("f");
  Value* x = f.add_input("x", f32({}));
  EXPECT_THROW(f.add_input("x", f32({})), UserError);
  EXPECT_THROW(f.add_op1(OpKind::neg, {x}, {}, {}, "x"), UserError);
  EXPECT_EQ(f.find_value("x"), x);
}

TEST(FusionNames, RenameValue_MovesTheNameInTheIndex) {
  Fusion f("f");
  Value* x = f.add_input("x", f32({}));
  Value* y = f.add_op1(OpKind::neg, {x}, {}, {}, "y");
  f.rename_value(y, "z");
  EXPECT_EQ(y->name, "z");
  EXPECT_EQ(f.find_value("z"), y);
  EXPECT_EQ(f.find_value("y"), nullptr);
  f.rename_value(y, "z");  // to its own name: nothing changes
  EXPECT_EQ(f.find_value("z"), y);
  EXPECT_THROW(f.rename_value(y, "x"), InternalError);  // callers check that the name is free
  expect_index_matches_names(f);
}

TEST(FusionNames, BuilderNamed_RenamesThroughTheIndex) {
  FusionBuilder fb("f");
  TensorHandle x = fb.input("x", DType::f32, {4});
  TensorHandle h = exp(x);
  std::string old = h.name();
  h.named("h");
  Fusion& f = fb.fusion();
  EXPECT_EQ(f.find_value("h"), h.value());
  EXPECT_EQ(f.find_value(old), nullptr);
  // The old name is free again.
  TensorHandle g = neg(h).named(old);
  EXPECT_EQ(f.find_value(old), g.value());
  expect_index_matches_names(f);
}

TEST(FusionNames, ParserLiteralSteppingAside_KeepsTheIndexRight) {
  auto f = parse_fusion(
      "fusion f(x: f32[4]) {\n  a = add(x, 2)\n  lit0 = neg(a)\n  lit1 = mul(lit0, 3)\n  return lit1\n}\n", "t.fusion");
  expect_index_matches_names(*f);
  EXPECT_EQ(f->find_value("lit0"), f->ops()[1]->outputs[0]);
  EXPECT_EQ(f->find_value("lit1"), f->ops()[2]->outputs[0]);
  EXPECT_TRUE(f->ops()[0]->inputs[1]->literal.has_value());
}

TEST(FusionNames, Clone_IndexesItsOwnValues) {
  auto f = parse_fusion("fusion f(x: f32[4]) {\n  y = exp(x)\n  z = add(y, 1.0)\n  return z\n}\n", "t.fusion");
  auto c = f->clone();
  for (auto& v : c->values()) {
    EXPECT_EQ(c->find_value(v->name), v.get()) << v->name;
    EXPECT_NE(c->find_value(v->name), f->find_value(v->name)) << v->name;
  }
  // The copy's fresh names still avoid every name it holds.
  std::string fresh = c->fresh_name("lit");
  EXPECT_EQ(scan(*c, fresh), nullptr);
}

TEST(FusionNames, ParsingManyStatements_TakesLinearTime) {
  // 80000 values: a name lookup by scanning takes about 10 s here (Release), the index 0.1 s.
  std::string text = "fusion big(x: f32[8]) {\n  t0 = add(x, 1.0)\n";
  const int n = 40000;
  for (int i = 1; i < n; ++i) text += "  t" + std::to_string(i) + " = mul(t" + std::to_string(i - 1) + ", 0.5)\n";
  text += "  return t" + std::to_string(n - 1) + "\n}\n";
  auto start = std::chrono::steady_clock::now();
  auto f = parse_fusion(text, "big.fusion");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(f->values().size(), size_t(2 * n + 1));
  EXPECT_LT(seconds, 2.0);
}

}  // namespace
}  // namespace alloy
