// gather and iota in the IR: their shape/dtype rules, the text round trip, and each user error
// with the statement's location.
#include <gtest/gtest.h>

#include "alloy/ir/builder.h"
#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"

namespace alloy {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_fusion(text, "t.fusion");
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

// A one-statement fusion whose statement (line 2; the op's name at column 7) is `statement`.
std::string error_of_statement(const std::string& params, const std::string& statement) {
  return error_of("fusion f(" + params + ") {\n  " + statement + "\n  return y\n}");
}

TEST(IndexingOps, Gather_HasTheIndexShapeAndTheInputDtype) {
  auto f = parse_fusion(R"(fusion f(x: bf16[T, V], t: i64[T, 1], u: i32[2, V], s: f32[4, 5, 6], k: i64[4, 2, 6]) {
  a = gather(x, t, dim=1)
  b = gather(x, u, dim=-2)
  c = gather(s, k, dim=1)
  return a, b, c
})", "t.fusion");
  EXPECT_EQ(f->find_value("a")->type_str(), "bf16[T, 1]");
  EXPECT_EQ(f->find_value("b")->type_str(), "bf16[2, V]");
  EXPECT_EQ(f->find_value("c")->type_str(), "f32[4, 2, 6]");
}

TEST(IndexingOps, Iota_IsOneDimensionalOfItsLengthAndDtype) {
  auto f = parse_fusion(R"(fusion f(x: f32[T, V]) {
  a = iota(length=V)
  b = iota(length=5, dtype=i32)
  c = iota(length=0, dtype=f32)
  d = iota(length=T, dtype=bf16)
  return a, b, c, d
})", "t.fusion");
  EXPECT_EQ(f->find_value("a")->type_str(), "i64[V]");
  EXPECT_EQ(f->find_value("b")->type_str(), "i32[5]");
  EXPECT_EQ(f->find_value("c")->type_str(), "f32[0]");
  EXPECT_EQ(f->find_value("d")->type_str(), "bf16[T]");
  EXPECT_TRUE(f->find_value("a")->producer->inputs.empty());
}

TEST(IndexingOps, PrintAndParse_RoundTrip) {
  std::string text = R"(fusion f(x: f32[T, V], t: i64[T]) {
  u = unsqueeze(t, dim=1)
  g = gather(x, u, dim=-1)
  ids = iota(length=V)
  n = iota(length=7, dtype=f64)
  hit = eq(ids, u)
  return g, hit, n
})";
  std::string printed = print_fusion(*parse_fusion(text, "t.fusion"));
  EXPECT_NE(printed.find("gather(x, u, dim=-1)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("iota(length=V, dtype=i64)"), std::string::npos) << printed;  // the default spelled out
  EXPECT_NE(printed.find("iota(length=7, dtype=f64)"), std::string::npos) << printed;
  EXPECT_EQ(print_fusion(*parse_fusion(printed, "p.fusion")), printed);
}

TEST(IndexingOps, Builder_MakesGatherAndIota) {
  FusionBuilder fb("b");
  TensorHandle x = fb.input("x", DType::f32, {"T", "V"});
  TensorHandle t = fb.input("t", DType::i32, {"T", 1});
  TensorHandle g = gather(x, t, 1);
  TensorHandle ids = iota(fb, "V");
  TensorHandle five = iota(fb, 5, DType::f32);
  EXPECT_EQ(g.type_str(), "f32[T, 1]");
  EXPECT_EQ(ids.type_str(), "i64[V]");
  EXPECT_EQ(five.type_str(), "f32[5]");
}

TEST(IndexingOps, Gather_IndexOfAFloatOrBoolDtype_IsRejectedWithLocation) {
  std::string err = error_of_statement("x: f32[4, 5], t: f32[4, 1]", "y = gather(x, t, dim=1)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: index must be an integer tensor (i64 or i32), found f32[4, 1]"), std::string::npos)
      << err;
  err = error_of_statement("x: f32[4, 5], t: bool[4, 1]", "y = gather(x, t, dim=1)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: index must be an integer tensor"), std::string::npos) << err;
}

TEST(IndexingOps, Gather_IndexOfAnotherRank_IsRejectedWithLocation) {
  std::string err = error_of_statement("x: f32[4, 5], t: i64[4]", "y = gather(x, t, dim=1)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: index is i64[4] and input is f32[4, 5]; expected an index of the input's rank (2)"),
            std::string::npos) << err;
}

TEST(IndexingOps, Gather_DimOutOfRange_IsRejectedWithLocation) {
  std::string err = error_of_statement("x: f32[4, 5], t: i64[4, 1]", "y = gather(x, t, dim=2)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: dim: axis 2 is out of range for rank 2 (expected -2 to 1)"), std::string::npos) << err;
}

TEST(IndexingOps, Gather_IndexLongerThanTheInputOffTheAxis_IsRejectedWithLocation) {
  std::string err = error_of_statement("x: f32[4, 5], t: i64[6, 1]", "y = gather(x, t, dim=1)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: index is i64[6, 1] and input is f32[4, 5]; index axis 0 (size 6) must not be longer"),
            std::string::npos) << err;
  // along the gathered axis the index may be longer than the input, as in torch.gather
  EXPECT_EQ(error_of_statement("x: f32[4, 5], t: i64[4, 9]", "y = gather(x, t, dim=1)"), "no error");
}

TEST(IndexingOps, Gather_WrongArityOrAttributes_AreRejectedWithLocation) {
  std::string err = error_of_statement("x: f32[4, 5], t: i64[4, 1]", "y = gather(x, dim=1)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: takes 2 arguments, found 1"), std::string::npos) << err;
  err = error_of_statement("x: f32[4, 5], t: i64[4, 1]", "y = gather(x, t)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: missing attribute 'dim'"), std::string::npos) << err;
  err = error_of_statement("x: f32[4, 5], t: i64[4, 1]", "y = gather(x, t, dim=1.5)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: attribute 'dim' must be an integer"), std::string::npos) << err;
  err = error_of_statement("x: f32[4, 5], s: i64", "y = gather(x, s, dim=0)");
  EXPECT_NE(err.find("t.fusion:2:7: gather: index must be a tensor, found a scalar i64"), std::string::npos) << err;
}

TEST(IndexingOps, Iota_BadLengthOrDtypeOrArguments_AreRejectedWithLocation) {
  std::string err = error_of_statement("x: f32[4]", "y = iota(length=-1)");
  EXPECT_NE(err.find("t.fusion:2:7: iota: length must not be negative, found -1"), std::string::npos) << err;
  err = error_of_statement("x: f32[4]", "y = iota(length=W)");
  EXPECT_NE(err.find("t.fusion:2:7: iota: length names the size 'W', which no input declares"), std::string::npos) << err;
  err = error_of_statement("x: f32[4]", "y = iota(length=4, dtype=bool)");
  EXPECT_NE(err.find("t.fusion:2:7: iota: dtype must be i64, i32 or a floating dtype"), std::string::npos) << err;
  err = error_of_statement("x: f32[4]", "y = iota(length=2.5)");
  EXPECT_NE(err.find("t.fusion:2:7: iota: attribute 'length' must be a size (an integer or a size symbol such as V)"),
            std::string::npos) << err;
  err = error_of_statement("x: f32[4]", "y = iota(x, length=4)");
  EXPECT_NE(err.find("t.fusion:2:7: iota: takes 0 arguments, found 1"), std::string::npos) << err;
  err = error_of_statement("x: f32[4]", "y = iota()");
  EXPECT_NE(err.find("t.fusion:2:7: iota: missing attribute 'length'"), std::string::npos) << err;
  err = error_of_statement("x: f32[4]", "y = iota(length=3000000000, dtype=i32)");
  EXPECT_NE(err.find("t.fusion:2:7: iota: length 3000000000 counts past i32's largest value"), std::string::npos) << err;
}

}  // namespace
}  // namespace alloy
