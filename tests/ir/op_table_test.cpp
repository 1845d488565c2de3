// Shape and dtype inference of every op family, and the errors they report.
#include "alloy/ir/op_table.h"

#include <gtest/gtest.h>

namespace alloy {
namespace {

ValueType tensor(DType dt, std::vector<Extent> shape) {
  ValueType t;
  t.dtype = dt;
  t.shape = std::move(shape);
  return t;
}
Extent c(int64_t n) { return Extent::constant(n); }
Extent sym(const char* name) { return Extent::symbol(name); }

std::string shape_of(const Value* v) { return v->type_str(); }

struct InferTest : ::testing::Test {
  Fusion f{"t"};
  Value* in(const char* name, DType dt, std::vector<Extent> shape) { return f.add_input(name, tensor(dt, shape)); }
  Value* op(OpKind k, std::vector<Value*> ins, std::vector<NamedAttr> attrs = {}) { return f.add_op1(k, ins, attrs); }
  std::string error_of(OpKind k, std::vector<Value*> ins, std::vector<NamedAttr> attrs = {}) {
    try {
      f.add_op(k, ins, attrs, SourceLoc{"t.fusion", 3, 7});
    } catch (const UserError& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST_F(InferTest, Binary_BroadcastsLikeNumPyAndPromotes) {
  Value* a = in("a", DType::bf16, {sym("B"), c(1), c(768)});
  Value* b = in("b", DType::f32, {c(4), c(1)});
  EXPECT_EQ(shape_of(op(OpKind::add, {a, b})), "f32[B, 4, 768]");
}

TEST_F(InferTest, Binary_ScalarLiteralKeepsTensorDtype) {
  Value* a = in("a", DType::bf16, {c(8)});
  Value* two = f.add_literal({Literal::Kind::real, 0, 2.0});
  EXPECT_EQ(shape_of(op(OpKind::mul, {a, two})), "bf16[8]");
  Value* i = in("i", DType::i32, {c(8)});
  EXPECT_EQ(shape_of(op(OpKind::mul, {i, two})), "f32[8]");
  EXPECT_EQ(shape_of(op(OpKind::div, {i, i})), "f32[8]");
  EXPECT_EQ(shape_of(op(OpKind::lt, {a, two})), "bool[8]");
}

TEST_F(InferTest, Binary_MismatchedConstantsAreRejectedWithLocation) {
  Value* a = in("a", DType::f32, {c(3), c(4)});
  Value* b = in("b", DType::f32, {c(5)});
  std::string err = error_of(OpKind::add, {a, b});
  EXPECT_NE(err.find("t.fusion:3:7: add:"), std::string::npos) << err;
  EXPECT_NE(err.find("4 and 5"), std::string::npos) << err;
}

TEST_F(InferTest, Binary_DifferentSymbolsBecomeRunTimeConstraint) {
  Value* a = in("a", DType::f32, {sym("B")});
  Value* b = in("b", DType::f32, {sym("S")});
  op(OpKind::add, {a, b});
  ASSERT_EQ(f.constraints().size(), 1u);
  Bindings ok{{"B", 3}, {"S", 3}};
  EXPECT_NO_THROW(f.complete_bindings(ok));
  Bindings bad{{"B", 3}, {"S", 4}};
  EXPECT_THROW(f.complete_bindings(bad), UserError);
}

TEST_F(InferTest, UnaryFloatOpsOnIntegersGiveF32) {
  Value* i = in("i", DType::i32, {c(2)});
  EXPECT_EQ(shape_of(op(OpKind::exp, {i})), "f32[2]");
  EXPECT_EQ(shape_of(op(OpKind::abs, {i})), "i32[2]");
  EXPECT_EQ(shape_of(op(OpKind::relu, {i})), "i32[2]");
}

TEST_F(InferTest, Reductions_DimsKeepdimAndIntegerSum) {
  Value* x = in("x", DType::bf16, {sym("B"), c(4), c(8)});
  EXPECT_EQ(shape_of(op(OpKind::sum, {x}, {{"dims", Attr::ints({-1})}})), "bf16[B, 4]");
  EXPECT_EQ(shape_of(op(OpKind::max, {x}, {{"dims", Attr::ints({0, 2})}, {"keepdim", Attr::boolean(true)}})), "bf16[1, 4, 1]");
  EXPECT_EQ(shape_of(op(OpKind::mean, {x})), "bf16[]");
  Value* i = in("i", DType::i32, {c(4)});
  EXPECT_EQ(shape_of(op(OpKind::sum, {i}, {{"dims", Attr::ints({0})}})), "i64[]");
  EXPECT_NE(error_of(OpKind::mean, {i}).find("floating-point"), std::string::npos);
  EXPECT_NE(error_of(OpKind::sum, {x}, {{"dims", Attr::ints({3})}}).find("out of range"), std::string::npos);
  auto vm = f.add_op(OpKind::var_mean, {x}, {{"dims", Attr::ints({2})}});
  ASSERT_EQ(vm.size(), 2u);
  EXPECT_EQ(shape_of(vm[0]), "bf16[B, 4]");
}

TEST_F(InferTest, Reshape_InfersMinusOneSymbolically) {
  Value* x = in("x", DType::f32, {sym("B"), sym("S"), c(768)});
  EXPECT_EQ(shape_of(op(OpKind::reshape, {x}, {{"shape", Attr::ints({-1, 768})}})), "f32[B*S, 768]");
  Value* heads = op(OpKind::reshape, {x}, {{"shape", Attr::extents({sym("B"), sym("S"), c(12), c(-1)})}});
  EXPECT_EQ(shape_of(heads), "f32[B, S, 12, 64]");
  std::string err = error_of(OpKind::reshape, {in("y", DType::f32, {c(6)})}, {{"shape", Attr::ints({4, -1})}});
  EXPECT_NE(err.find("cannot reshape"), std::string::npos) << err;
}

TEST_F(InferTest, BroadcastInDim_MapsAxes) {
  Value* m = in("m", DType::f32, {sym("B"), c(128)});
  Value* out = op(OpKind::broadcast_in_dim, {m},
                  {{"shape", Attr::extents({sym("B"), c(128), c(1600)})}, {"broadcast_dims", Attr::ints({0, 1})}});
  EXPECT_EQ(shape_of(out), "f32[B, 128, 1600]");
  std::string err = error_of(OpKind::broadcast_in_dim, {m}, {{"shape", Attr::ints({4, 5})}, {"broadcast_dims", Attr::ints({0})}});
  EXPECT_NE(err.find("one per input axis"), std::string::npos) << err;
}

TEST_F(InferTest, ShapeOps) {
  Value* x = in("x", DType::f16, {c(2), c(1), c(6)});
  EXPECT_EQ(shape_of(op(OpKind::permute, {x}, {{"dims", Attr::ints({2, 0, 1})}})), "f16[6, 2, 1]");
  EXPECT_EQ(shape_of(op(OpKind::squeeze, {x}, {{"dims", Attr::ints({1})}})), "f16[2, 6]");
  EXPECT_EQ(shape_of(op(OpKind::squeeze, {x}, {{"dims", Attr::ints({0})}})), "f16[2, 1, 6]");  // torch: no-op
  EXPECT_EQ(shape_of(op(OpKind::unsqueeze, {x}, {{"dim", Attr::integer(-1)}})), "f16[2, 1, 6, 1]");
  EXPECT_EQ(shape_of(op(OpKind::expand, {x}, {{"shape", Attr::ints({3, -1, 4, 6})}})), "f16[3, 2, 4, 6]");
  EXPECT_EQ(shape_of(op(OpKind::slice, {x}, {{"starts", Attr::ints({0, 0, -4})}, {"ends", Attr::ints({2, 1, 100})},
                                             {"steps", Attr::ints({1, 1, 3})}})),
            "f16[2, 1, 2]");
  Value* y = in("y", DType::f32, {c(2), c(1), c(3)});
  EXPECT_EQ(shape_of(op(OpKind::cat, {x, y}, {{"dim", Attr::integer(2)}})), "f32[2, 1, 9]");
}

TEST_F(InferTest, CatOfDifferentSymbolsDefinesASumSymbol) {
  Value* a = in("a", DType::f32, {sym("N"), c(2)});
  Value* b = in("b", DType::f32, {sym("M"), c(2)});
  Value* out = op(OpKind::cat, {a, b}, {{"dim", Attr::integer(0)}});
  Bindings bindings{{"N", 3}, {"M", 5}};
  f.complete_bindings(bindings);
  EXPECT_EQ(out->shape()[0].evaluate(bindings), 8);
  Value* twice = op(OpKind::cat, {a, a}, {{"dim", Attr::integer(0)}});
  EXPECT_EQ(shape_of(twice), "f32[2*N, 2]");
}

TEST_F(InferTest, Matmul_TorchSemantics) {
  Value* a = in("a", DType::bf16, {c(5), c(1), c(3), c(4)});
  Value* b = in("b", DType::bf16, {c(7), c(4), c(2)});
  EXPECT_EQ(shape_of(op(OpKind::matmul, {a, b})), "bf16[5, 7, 3, 2]");
  Value* v = in("v", DType::bf16, {c(4)});
  EXPECT_EQ(shape_of(op(OpKind::matmul, {v, v})), "bf16[]");
  EXPECT_EQ(shape_of(op(OpKind::matmul, {a, v})), "bf16[5, 1, 3]");
  Value* wrong = in("w", DType::bf16, {c(5), c(2)});
  EXPECT_NE(error_of(OpKind::matmul, {a, wrong}).find("contraction"), std::string::npos);
  Value* f32 = in("f", DType::f32, {c(4), c(2)});
  EXPECT_NE(error_of(OpKind::matmul, {a, f32}).find("one dtype"), std::string::npos);
}

TEST_F(InferTest, Linear_WeightIsOutByIn) {
  Value* x = in("x", DType::bf16, {sym("B"), sym("S"), c(768)});
  Value* w = in("w", DType::bf16, {c(3072), c(768)});
  Value* bias = in("b", DType::bf16, {c(3072)});
  EXPECT_EQ(shape_of(op(OpKind::linear, {x, w, bias})), "bf16[B, S, 3072]");
  Value* w3 = in("w3", DType::bf16, {c(64), c(32), c(2)});
  std::string err = error_of(OpKind::linear, {x, w3});
  EXPECT_NE(err.find("t.fusion:3:7: linear: weight is bf16[64, 32, 2]; expected 2 dims"), std::string::npos) << err;
  Value* bad_bias = in("bb", DType::bf16, {c(768)});
  EXPECT_NE(error_of(OpKind::linear, {x, w, bad_bias}).find("bias is bf16[768]"), std::string::npos);
}

TEST_F(InferTest, Composites) {
  Value* x = in("x", DType::bf16, {c(4), c(16)});
  Value* w = in("w", DType::bf16, {c(16)});
  EXPECT_EQ(shape_of(op(OpKind::layer_norm, {x, w, w})), "bf16[4, 16]");
  EXPECT_EQ(shape_of(op(OpKind::rms_norm, {x, w}, {{"eps", Attr::real(1e-6)}})), "bf16[4, 16]");
  EXPECT_EQ(shape_of(op(OpKind::softmax, {x}, {{"dim", Attr::integer(1)}})), "bf16[4, 16]");
  Value* w8 = in("w8", DType::bf16, {c(8)});
  EXPECT_NE(error_of(OpKind::layer_norm, {x, w8}).find("normalized shape"), std::string::npos);
}

TEST_F(InferTest, Attributes_UnknownMissingAndMistypedAreRejected) {
  Value* x = in("x", DType::f32, {c(4)});
  EXPECT_NE(error_of(OpKind::sum, {x}, {{"axis", Attr::ints({0})}}).find("unknown attribute 'axis'"), std::string::npos);
  EXPECT_NE(error_of(OpKind::cast, {x}).find("missing attribute 'dtype'"), std::string::npos);
  EXPECT_NE(error_of(OpKind::cast, {x}, {{"dtype", Attr::integer(3)}}).find("must be a dtype"), std::string::npos);
  EXPECT_NE(error_of(OpKind::gelu, {x}, {{"approximate", Attr::string("fast")}}).find("\"none\" or \"tanh\""), std::string::npos);
  EXPECT_NE(error_of(OpKind::add, {x}).find("takes 2 arguments, found 1"), std::string::npos);
}

TEST_F(InferTest, WhereNeedsBoolCondition) {
  Value* x = in("x", DType::f32, {c(4)});
  Value* m = op(OpKind::gt, {x, f.add_literal({Literal::Kind::integer, 0})});
  EXPECT_EQ(shape_of(op(OpKind::where, {m, x, f.add_literal({Literal::Kind::real, 0, 0.0})})), "f32[4]");
  EXPECT_NE(error_of(OpKind::where, {x, x, x}).find("condition must be bool"), std::string::npos);
}

// Two number branches make a tensor of PyTorch's default dtypes: torch.where(c, 1.5, 0) is f32,
// torch.where(c, 1, 0) i64; a 0-dim f64 tensor branch keeps f64.
TEST_F(InferTest, WhereOfTwoNumbers_HasTorchsDefaultDtype) {
  Value* m = in("m", DType::boolean, {c(4)});
  Value* half = f.add_literal({Literal::Kind::real, 0, 1.5});
  Value* zero = f.add_literal({Literal::Kind::integer, 0});
  Value* one = f.add_literal({Literal::Kind::integer, 1});
  EXPECT_EQ(shape_of(op(OpKind::where, {m, half, zero})), "f32[4]");
  EXPECT_EQ(shape_of(op(OpKind::where, {m, one, zero})), "i64[4]");
  Value* t = in("t", DType::f64, {});
  EXPECT_EQ(shape_of(op(OpKind::where, {m, t, zero})), "f64[4]");
}

// A 0-dim tensor's reductions and squeeze take dims=[0] or [-1] as PyTorch does (the value kept);
// other axes are out of range, said so.
TEST_F(InferTest, ZeroDimReductions_TakeAxis0OrMinus1) {
  Value* s = in("s", DType::f32, {});
  for (OpKind k : {OpKind::sum, OpKind::max, OpKind::min, OpKind::mean, OpKind::squeeze})
    for (int64_t d : {0, -1}) EXPECT_EQ(shape_of(op(k, {s}, {{"dims", Attr::ints({d})}})), "f32[]") << op_name(k) << " " << d;
  auto both = f.add_op(OpKind::var_mean, {s}, {{"dims", Attr::ints({0})}}, SourceLoc{});
  EXPECT_EQ(shape_of(both.at(0)), "f32[]");
  std::string e = error_of(OpKind::sum, {s}, {{"dims", Attr::ints({1})}});
  EXPECT_NE(e.find("axis 1 is out of range for rank 0 (a 0-dim tensor has none"), std::string::npos) << e;
}

// A slice of a symbolic axis is a size derived from it as Python slicing gives it (negative
// indices from the end, clamped ends): N = 6 gives 5, 5, 3 and 3 here.
TEST_F(InferTest, SliceOfASymbolicAxis_IsAPythonSliceOfTheBoundSize) {
  Value* x = in("x", DType::f32, {sym("N")});
  auto slice = [&](int64_t start, int64_t end, int64_t step) {
    return op(OpKind::slice, {x}, {{"starts", Attr::ints({start})}, {"ends", Attr::ints({end})}, {"steps", Attr::ints({step})}});
  };
  std::vector<Value*> cut = {slice(1, 2147483647, 1), slice(0, -1, 1), slice(-3, 100, 1), slice(0, 10, 2)};
  Bindings b{{"N", 6}};
  f.complete_bindings(b);
  std::vector<int64_t> sizes;
  for (Value* v : cut) sizes.push_back(*v->shape()[0].evaluate(b));
  EXPECT_EQ(sizes, (std::vector<int64_t>{5, 5, 3, 3}));
  b = {{"N", 2}};
  f.complete_bindings(b);
  EXPECT_EQ(*cut[2]->shape()[0].evaluate(b), 2);  // -3 clamps to 0
  EXPECT_EQ(*cut[3]->shape()[0].evaluate(b), 1);
}

TEST(OpTable, EveryKindHasARowAndAName) {
  for (std::string_view name : all_op_names()) {
    const OpRow* row = find_op(name);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(op_name(row->kind), name);
  }
  EXPECT_EQ(find_op("gelux"), nullptr);
}

}  // namespace
}  // namespace alloy
