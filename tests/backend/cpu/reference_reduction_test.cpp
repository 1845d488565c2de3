// The CPU reference's reductions (sum, max, min, mean, var_mean) against loops written here:
// dims (negative, absent, empty), keepdim, integer promotion, NaN and empty axes.
#include <cmath>
#include <limits>

#include "backend/cpu/reference_test_util.h"

namespace alloy {
namespace {

using namespace reftest;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// x is [2, 3, 4] row-major; reduce axis 1 with `combine`.
template <class F>
std::vector<double> reduce_axis1(const std::vector<double>& x, double init, F combine) {
  std::vector<double> out(8, init);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) out[i * 4 + k] = combine(out[i * 4 + k], x[(i * 3 + j) * 4 + k]);
  return out;
}

TEST(ReferenceReduction, SumMaxMinMeanOverOneAxisMatchLoops) {
  std::vector<double> x = random_values(24, 11);
  for (OpKind kind : {OpKind::sum, OpKind::max, OpKind::min, OpKind::mean}) {
    OpHarness h;
    h.add(kind, {h.input(DType::f64, {2, 3, 4})}, {ints_attr("dims", {1})});
    Tensor out = h.run({make(DType::f64, {2, 3, 4}, x)});
    ASSERT_EQ(out.sizes(), (Shape{2, 4}));
    std::vector<double> expected =
        kind == OpKind::max   ? reduce_axis1(x, -1e300, [](double a, double b) { return std::max(a, b); })
        : kind == OpKind::min ? reduce_axis1(x, 1e300, [](double a, double b) { return std::min(a, b); })
                              : reduce_axis1(x, 0, [](double a, double b) { return a + b; });
    if (kind == OpKind::mean)
      for (double& v : expected) v /= 3;
    std::vector<double> got = values(out);
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], expected[i], 1e-14) << "op " << int(kind) << " at " << i;
  }
}

TEST(ReferenceReduction, KeepdimAndNegativeDimsOnAPermutedInput) {
  std::vector<double> x = random_values(24, 12);
  OpHarness h;
  h.add(OpKind::sum, {h.input(DType::f32, {2, 3, 4})}, {ints_attr("dims", {-1, 0}), attr("keepdim", Attr::boolean(true))});
  Tensor out = h.run({strided_copy(DType::f32, {2, 3, 4}, x)});
  ASSERT_EQ(out.sizes(), (Shape{1, 3, 1}));
  std::vector<double> got = values(out);
  for (int j = 0; j < 3; ++j) {
    double expected = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) expected += float(x[(i * 3 + j) * 4 + k]);
    EXPECT_FLOAT_EQ(got[j], expected);
  }
}

TEST(ReferenceReduction, AbsentOrEmptyDimsReduceEveryAxis) {
  std::vector<double> x = random_values(6, 13);
  double total = 0;
  for (double v : x) total += v;
  OpHarness absent;
  absent.add(OpKind::sum, {absent.input(DType::f64, {2, 3})});
  Tensor a = absent.run({make(DType::f64, {2, 3}, x)});
  EXPECT_EQ(a.dim(), 0);
  EXPECT_NEAR(values(a)[0], total, 1e-14);
  OpHarness empty;
  empty.add(OpKind::mean, {empty.input(DType::f64, {2, 3})}, {ints_attr("dims", {}), attr("keepdim", Attr::boolean(true))});
  Tensor e = empty.run({make(DType::f64, {2, 3}, x)});
  EXPECT_EQ(e.sizes(), (Shape{1, 1}));
  EXPECT_NEAR(values(e)[0], total / 6, 1e-14);
}

TEST(ReferenceReduction, SumOfI32IsExactI64) {
  OpHarness h;
  h.add(OpKind::sum, {h.input(DType::i32, {3})});
  int64_t big = std::numeric_limits<int32_t>::max();
  Tensor out = h.run({make_ints(DType::i32, {3}, {big, big, big})});
  ASSERT_EQ(out.dtype(), DType::i64);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{3 * big}));
}

TEST(ReferenceReduction, SumOfBoolCountsAndMaxOfBoolIsAny) {
  OpHarness h;
  h.add(OpKind::sum, {h.input(DType::boolean, {2, 3})}, {ints_attr("dims", {1})});
  Tensor out = h.run({make_ints(DType::boolean, {2, 3}, {1, 1, 0, 0, 0, 0})});
  ASSERT_EQ(out.dtype(), DType::i64);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{2, 0}));
  OpHarness m;
  m.add(OpKind::max, {m.input(DType::boolean, {2, 3})}, {ints_attr("dims", {1})});
  Tensor any = m.run({make_ints(DType::boolean, {2, 3}, {0, 1, 0, 0, 0, 0})});
  ASSERT_EQ(any.dtype(), DType::boolean);
  EXPECT_EQ(ints(any), (std::vector<int64_t>{1, 0}));
}

TEST(ReferenceReduction, MaxMinOfIntegersAreExact) {
  int64_t big = (int64_t(1) << 60) + 1;
  OpHarness h;
  h.add(OpKind::max, {h.input(DType::i64, {3})});
  EXPECT_EQ(ints(h.run({make_ints(DType::i64, {3}, {big - 1, big, -big})})), (std::vector<int64_t>{big}));
  OpHarness g;
  g.add(OpKind::min, {g.input(DType::i32, {3})});
  Tensor out = g.run({make_ints(DType::i32, {3}, {4, -9, 2})});
  EXPECT_EQ(out.dtype(), DType::i32);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{-9}));
}

TEST(ReferenceReduction, MaxAndMinPropagateNaN) {
  for (OpKind kind : {OpKind::max, OpKind::min}) {
    OpHarness h;
    h.add(kind, {h.input(DType::f32, {2, 3})}, {ints_attr("dims", {1})});
    std::vector<double> got = values(h.run({make(DType::f32, {2, 3}, {1, kNaN, 3, 4, 5, 6})}));
    EXPECT_TRUE(std::isnan(got[0]));
    EXPECT_EQ(got[1], kind == OpKind::max ? 6 : 4);
  }
}

TEST(ReferenceReduction, MaxOverAnEmptyAxisIsAUserError) {
  OpHarness h;
  h.add(OpKind::max, {h.input(DType::f32, {0, 3})}, {ints_attr("dims", {0})});
  try {
    h.run({Tensor::empty(DType::f32, {0, 3})});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("max: cannot reduce an empty axis"), std::string::npos) << e.what();
  }
}

TEST(ReferenceReduction, SumOfNothingIsZeroAndMeanOfNothingIsNaN) {
  OpHarness s;
  s.add(OpKind::sum, {s.input(DType::f32, {2, 0})}, {ints_attr("dims", {1})});
  EXPECT_EQ(values(s.run({Tensor::empty(DType::f32, {2, 0})})), (std::vector<double>{0, 0}));
  OpHarness m;
  m.add(OpKind::mean, {m.input(DType::f32, {2, 0})}, {ints_attr("dims", {1})});
  std::vector<double> got = values(m.run({Tensor::empty(DType::f32, {2, 0})}));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
}

TEST(ReferenceReduction, Bf16SumAccumulatesWideAndRoundsOnce) {
  // 1 + 256 * 2^-9: each partial sum in bf16 would stay 1; the exact total is 1.5.
  std::vector<double> x(257, std::ldexp(1.0, -9));
  x[0] = 1.0;
  OpHarness h;
  h.add(OpKind::sum, {h.input(DType::bf16, {257})});
  Tensor out = h.run({make(DType::bf16, {257}, x)});
  ASSERT_EQ(out.dtype(), DType::bf16);
  EXPECT_EQ(values(out), (std::vector<double>{1.5}));
}

TEST(ReferenceReduction, VarMeanMatchesTwoPassLoopsForEachCorrection) {
  std::vector<double> x = random_values(12, 14);
  for (double correction : {0.0, 1.0}) {
    OpHarness h;
    h.add(OpKind::var_mean, {h.input(DType::f64, {3, 4})},
          {ints_attr("dims", {-1}), attr("correction", Attr::real(correction)), attr("keepdim", Attr::boolean(true))});
    std::vector<Tensor> out = h.run_all({make(DType::f64, {3, 4}, x)});
    ASSERT_EQ(out.size(), 2u);
    ASSERT_EQ(out[0].sizes(), (Shape{3, 1}));
    for (int r = 0; r < 3; ++r) {
      double mean = 0, ss = 0;
      for (int k = 0; k < 4; ++k) mean += x[r * 4 + k] / 4;
      for (int k = 0; k < 4; ++k) ss += (x[r * 4 + k] - mean) * (x[r * 4 + k] - mean);
      EXPECT_NEAR(values(out[1])[r], mean, 1e-14);
      EXPECT_NEAR(values(out[0])[r], ss / (4 - correction), 1e-14);
    }
  }
}

TEST(ReferenceReduction, VarWithCorrectionAtLeastNGivesInfOrNaN) {
  OpHarness h;
  h.add(OpKind::var_mean, {h.input(DType::f32, {2, 2})}, {ints_attr("dims", {1}), attr("correction", Attr::real(3))});
  std::vector<Tensor> out = h.run_all({make(DType::f32, {2, 2}, {1, 3, 5, 5})});
  std::vector<double> var = values(out[0]);
  EXPECT_EQ(var[0], std::numeric_limits<double>::infinity());  // 2 / max(0, 2 - 3)
  EXPECT_TRUE(std::isnan(var[1]));                               // 0 / 0
  EXPECT_EQ(values(out[1]), (std::vector<double>{2, 5}));
}

}  // namespace
}  // namespace alloy
