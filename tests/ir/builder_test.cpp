// The C++ builder: it builds the same fusions as the text format, one function per op, and its
// user errors point at the C++ call site.
#include "alloy/ir/builder.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"

namespace alloy {
namespace {

TEST(Builder, Mlp_PrintsLikeTheParsedText) {
  FusionBuilder fb("mlp");
  TensorHandle x = fb.input("x", DType::bf16, {sym("B"), "S", 768});
  TensorHandle w1 = fb.input("w1", DType::bf16, {3072, 768});
  TensorHandle b1 = fb.input("b1", DType::bf16, {3072});
  TensorHandle w2 = fb.input("w2", DType::bf16, {768, 3072});
  TensorHandle b2 = fb.input("b2", DType::bf16, {768});
  TensorHandle h = linear(x, w1, b1).named("h");
  TensorHandle g = gelu(h, "tanh").named("g");
  fb.output(linear(g, w2, b2).named("y"));
  std::unique_ptr<Fusion> built = fb.build();

  auto parsed = parse_fusion(R"(fusion mlp(x: bf16[B, S, 768], w1: bf16[3072, 768], b1: bf16[3072],
           w2: bf16[768, 3072], b2: bf16[768]) {
  h = linear(x, w1, b1)
  g = gelu(h, approximate="tanh")
  y = linear(g, w2, b2)
  return y
})",
                             "mlp.fusion");
  EXPECT_EQ(print_fusion(*built), print_fusion(*parsed));
}

TEST(Builder, ScalarLiterals_AreIntegerRealOrBool) {
  FusionBuilder fb("lits");
  TensorHandle x = fb.input("x", DType::bf16, {4});
  TensorHandle a = add(x, 1.0);
  TensorHandle b = mul(a, 2);
  TensorHandle c = where(gt(b, 0), b, false);
  fb.output(c);
  EXPECT_EQ(a.value()->producer->inputs[1]->literal, (Literal{Literal::Kind::real, 0, 1.0, false}));
  EXPECT_EQ(b.value()->producer->inputs[1]->literal, (Literal{Literal::Kind::integer, 2, 0, false}));
  EXPECT_EQ(c.value()->producer->inputs[2]->literal, (Literal{Literal::Kind::boolean, 0, 0, false}));
  EXPECT_EQ(a.type_str(), "bf16[4]");  // a literal does not promote the tensor
  EXPECT_EQ(c.type_str(), "bf16[4]");
}

TEST(Builder, Operators_ReadLikeArithmetic) {
  FusionBuilder fb("ops");
  TensorHandle x = fb.input("x", DType::f32, {4});
  TensorHandle b = fb.input("b", DType::f32, {4});
  TensorHandle y = -(x * 0.5 + b) / 2.0 - x;
  fb.output(y);
  auto f = fb.build();
  std::vector<OpKind> kinds;
  for (auto& op : f->ops()) kinds.push_back(op->kind);
  EXPECT_EQ(kinds, (std::vector<OpKind>{OpKind::mul, OpKind::add, OpKind::neg, OpKind::div, OpKind::sub}));
}

TEST(Builder, VarMean_ReturnsVarianceThenMean) {
  FusionBuilder fb("vm");
  TensorHandle x = fb.input("x", DType::f32, {sym("B"), 8});
  auto [var, mean] = var_mean(x, {1}, 1.0, true);
  EXPECT_EQ(var.value()->producer, mean.value()->producer);
  EXPECT_EQ(var.value()->producer->outputs[0], var.value());
  EXPECT_EQ(mean.value()->producer->outputs[1], mean.value());
  EXPECT_EQ(mean.type_str(), "f32[B, 1]");
  EXPECT_EQ(var.value()->producer->real_attr("correction"), 1.0);
}

TEST(Builder, ScalarsZeroDimDynamicAndShardedInputs) {
  FusionBuilder fb("f");
  TensorHandle eps = fb.scalar("eps", DType::f32);
  TensorHandle z = fb.input("z", DType::f32, {});
  TensorHandle d = fb.input("d", DType::f32, {fb.dynamic(), 4}, Sharding{{0, 1}, 1});
  fb.output(add(add(z, eps), d));
  auto f = fb.build();
  EXPECT_EQ(print_fusion(*f, PrintOptions{false}),
            "fusion f(eps: f32, z: f32[], d: f32[?, 4] @mesh[0, 1] shard(axis=1)) {\n"
            "  t0 = add(z, eps)\n  t1 = add(t0, d)\n  return t1\n}\n");
}

// One call per builder function; together they must cover every op kind.
TEST(Builder, EveryOpKind_HasABuilderFunction) {
  FusionBuilder fb("every_op");
  TensorHandle x = fb.input("x", DType::f32, {"B", 4, 8});
  TensorHandle y = fb.input("y", DType::f32, {"B", 4, 8});
  TensorHandle w = fb.input("w", DType::f32, {16, 8});
  TensorHandle b = fb.input("b", DType::f32, {16});
  TensorHandle n = fb.input("n", DType::f32, {8});
  TensorHandle o = fb.input("o", DType::f32, {1, 8});
  std::vector<TensorHandle> outs = {
      neg(x), abs(x), exp(x), log(x), sqrt(x), rsqrt(x), tanh(x), sigmoid(x), relu(x), silu(x), erf(x),
      reciprocal(x), gelu(x), add(x, y), sub(x, y), mul(x, y), div(x, y), pow(x, 2), maximum(x, y), minimum(x, y),
      eq(x, y), ne(x, y), lt(x, y), le(x, y), gt(x, y), ge(x, y), where(lt(x, y), x, y), cast(x, DType::bf16),
      gelu_backward(y, x, "tanh"), relu_backward(y, x), sum(x, {1}), max(x), min(x, {0}, true), mean(x, {2}),
      var_mean(x).first, broadcast_in_dim(n, {"B", 4, 8}, {2}), expand(b, {3, -1}), reshape(x, {sym("B"), -1}),
      permute(x, {2, 0, 1}), slice(n, {1}, {7}, {2}), squeeze(o), unsqueeze(n, 0), cat({x, y}, 1), matmul(x, n),
      linear(x, w, b), softmax(x), layer_norm(x, n, n), rms_norm(x, n, 1, 1e-5), segment_set(x),
      relu_mask(x), relu_backward_mask(x, relu_mask(x)), gather(x, cast(x, DType::i64), 0), iota(fb, "B")};
  std::set<OpKind> covered;
  for (const TensorHandle& t : outs) covered.insert(t.value()->producer->kind);
  for (std::string_view name : all_op_names()) {
    const OpRow* row = find_op(name);
    if (row->op_class == OpClass::communication) continue;  // inserted by the sharding passes, not built
    EXPECT_TRUE(covered.count(row->kind)) << "no builder call for " << name;
  }
  EXPECT_EQ(outs[36].type_str(), "f32[3, 16]");
  EXPECT_EQ(outs[37].type_str(), "f32[B, 32]");
  EXPECT_EQ(outs[39].type_str(), "f32[3]");
  // Round trip through the text: the builder's fusion is an ordinary one.
  for (const TensorHandle& t : outs) fb.output(t);
  std::string printed = print_fusion(*fb.build());
  EXPECT_EQ(print_fusion(*parse_fusion(printed, "p.fusion")), printed);
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Builder, ShapeErrors_PointAtTheCppCallSite) {
  FusionBuilder fb("bad");
  TensorHandle x = fb.input("x", DType::f32, {4});
  TensorHandle w = fb.input("w", DType::f32, {3, 8});
  int line = __LINE__ + 1;
  std::string message = error_of([&] { linear(x, w); });
  EXPECT_EQ(message.rfind("builder_test.cpp:" + std::to_string(line) + ":", 0), 0u) << message;
  EXPECT_NE(message.find("linear: x is f32[4] and weight is f32[3, 8]"), std::string::npos) << message;
}

TEST(Builder, Misuse_IsAUserError) {
  FusionBuilder a("a"), b("b");
  TensorHandle x = a.input("x", DType::f32, {4});
  TensorHandle y = b.input("y", DType::f32, {4});
  EXPECT_NE(error_of([&] { add(x, y); }).find("add: arguments come from different fusions"), std::string::npos);
  EXPECT_NE(error_of([&] { b.output(x); }).find("output: 'x' belongs to another fusion"), std::string::npos);
  EXPECT_NE(error_of([&] { add(TensorHandle(), 1.0); }).find("empty TensorHandle"), std::string::npos);
  EXPECT_NE(error_of([&] { a.input("x", DType::f32, {2}); }).find("'x' is declared twice"), std::string::npos);
  EXPECT_NE(error_of([&] { a.input("not a name", DType::f32, {2}); }).find("not a valid value name"), std::string::npos);
  EXPECT_NE(error_of([&] { a.input("s", DType::f32, {2}, Sharding{{0, 1}, 1}); }).find("shard axis 1 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.input("p", DType::f32, {sym("B") * sym("S")}); }).find("size B*S must be"), std::string::npos);
  EXPECT_NE(error_of([&] { a.input("q", DType::f32, {-3}); }).find("size -3 must be"), std::string::npos);
  EXPECT_NE(error_of([&] { a.input("r", DType::f32, {"bf16"}); }).find("size bf16 must be"), std::string::npos);
  EXPECT_NE(error_of([&] { FusionBuilder("my fusion"); }).find("not a valid fusion name"), std::string::npos);
  EXPECT_NE(error_of([&] { reshape(x, {sym("B") * sym("S")}); }).find("must be an integer or a size symbol"),
            std::string::npos);
  EXPECT_NE(error_of([&] { neg(x).named("x"); }).find("'x' is already defined"), std::string::npos);
  EXPECT_NE(error_of([&] { layer_norm(x, std::nullopt, x); }).find("a bias needs a weight"), std::string::npos);
  EXPECT_NE(error_of([&] { cat({}); }).find("cat: takes at least 1 argument"), std::string::npos);
  EXPECT_NE(error_of([&] { a.build(); }).find("fusion 'a' has no outputs"), std::string::npos);
  a.output(neg(x));
  EXPECT_NO_THROW(a.build());
  EXPECT_NE(error_of([&] { a.build(); }).find("build() was already called"), std::string::npos);
}

}  // namespace
}  // namespace alloy
