// The CPU reference's pointwise ops against values computed here: every unary and binary op,
// where, cast and the activation backwards, with broadcasting, strided and expanded inputs,
// type promotion, bf16/f16 rounding and NaN propagation.
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>

#include "backend/cpu/reference_test_util.h"

namespace alloy {
namespace {

using namespace reftest;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

double unary_expected(OpKind kind, double x) {
  switch (kind) {
    case OpKind::neg: return -x;
    case OpKind::abs: return std::fabs(x);
    case OpKind::exp: return std::exp(x);
    case OpKind::log: return std::log(x);
    case OpKind::sqrt: return std::sqrt(x);
    case OpKind::rsqrt: return 1 / std::sqrt(x);
    case OpKind::tanh: return std::tanh(x);
    case OpKind::sigmoid: return 1 / (1 + std::exp(-x));
    case OpKind::relu: return x > 0 ? x : 0;
    case OpKind::silu: return x / (1 + std::exp(-x));
    case OpKind::erf: return std::erf(x);
    case OpKind::reciprocal: return 1 / x;
    case OpKind::gelu: return gelu_exact(x);
    default: ADD_FAILURE() << "not unary"; return 0;
  }
}

TEST(ReferencePointwise, EveryUnaryOpMatchesItsFormulaOnF32) {
  const OpKind kinds[] = {OpKind::neg, OpKind::abs, OpKind::exp, OpKind::log, OpKind::sqrt, OpKind::rsqrt, OpKind::tanh,
                          OpKind::sigmoid, OpKind::relu, OpKind::silu, OpKind::erf, OpKind::reciprocal, OpKind::gelu};
  std::vector<double> x = random_values(24, 1, -3, 3);
  for (OpKind kind : kinds) {
    bool positive_only = kind == OpKind::log || kind == OpKind::sqrt || kind == OpKind::rsqrt;
    std::vector<double> in = x;
    if (positive_only)
      for (double& v : in) v = std::fabs(v) + 0.1;
    OpHarness h;
    h.add(kind, {h.input(DType::f32, {4, 6})});
    Tensor out = h.run({make(DType::f32, {4, 6}, in)});
    ASSERT_EQ(out.dtype(), DType::f32);
    ASSERT_EQ(out.sizes(), (Shape{4, 6}));
    std::vector<double> got = values(out);
    for (size_t i = 0; i < in.size(); ++i) {
      double stored = double(float(in[i]));
      EXPECT_FLOAT_EQ(got[i], unary_expected(kind, stored)) << "op " << int(kind) << " at " << i;
    }
  }
}

TEST(ReferencePointwise, GeluTanhApproximationUsesTheTanhFormula) {
  OpHarness h;
  h.add(OpKind::gelu, {h.input(DType::f64, {5})}, {attr("approximate", Attr::string("tanh"))});
  std::vector<double> x{-3, -0.5, 0, 0.7, 2.5};
  std::vector<double> got = values(h.run({make(DType::f64, {5}, x)}));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], gelu_tanh(x[i]), 1e-15);
  EXPECT_GT(std::fabs(gelu_tanh(0.7) - gelu_exact(0.7)), 1e-5);  // the modes really differ here
}

TEST(ReferencePointwise, IntegerInputOfTranscendentalOpIsConvertedToF32) {
  OpHarness h;
  h.add(OpKind::exp, {h.input(DType::i32, {3})});
  Tensor out = h.run({make_ints(DType::i32, {3}, {0, 1, 2})});
  EXPECT_EQ(out.dtype(), DType::f32);
  std::vector<double> got = values(out);
  EXPECT_FLOAT_EQ(got[1], std::exp(1.0));
  EXPECT_FLOAT_EQ(got[2], std::exp(2.0));
}

TEST(ReferencePointwise, NegAbsReluKeepIntegerDtypeExactly) {
  std::vector<int64_t> x{-7, 0, 5, std::numeric_limits<int32_t>::max()};
  for (OpKind kind : {OpKind::neg, OpKind::abs, OpKind::relu}) {
    OpHarness h;
    h.add(kind, {h.input(DType::i32, {4})});
    Tensor out = h.run({make_ints(DType::i32, {4}, x)});
    ASSERT_EQ(out.dtype(), DType::i32);
    std::vector<int64_t> expected = kind == OpKind::neg ? std::vector<int64_t>{7, 0, -5, -x[3]}
                                    : kind == OpKind::abs ? std::vector<int64_t>{7, 0, 5, x[3]}
                                                          : std::vector<int64_t>{0, 0, 5, x[3]};
    EXPECT_EQ(ints(out), expected);
  }
}

TEST(ReferencePointwise, ReluPropagatesNaN) {
  OpHarness h;
  h.add(OpKind::relu, {h.input(DType::f32, {3})});
  std::vector<double> got = values(h.run({make(DType::f32, {3}, {kNaN, -1, 2})}));
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[1], 0);
  EXPECT_EQ(got[2], 2);
}

TEST(ReferencePointwise, BinaryBroadcastsRightAligned) {
  OpHarness h;
  h.add(OpKind::sub, {h.input(DType::f32, {2, 3, 1}), h.input(DType::f32, {4})});
  std::vector<double> a = random_values(6, 2), b = random_values(4, 3);
  Tensor out = h.run({make(DType::f32, {2, 3, 1}, a), make(DType::f32, {4}, b)});
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 4}));
  std::vector<double> got = values(out);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(got[i * 4 + j], float(a[i]) - float(b[j]));
}

TEST(ReferencePointwise, StridedExpandedAndOffsetInputsReadTheirLogicalElements) {
  OpHarness h;
  h.add(OpKind::mul, {h.input(DType::f64, {3, 4}), h.input(DType::f64, {3, 4})});
  std::vector<double> a = random_values(12, 4);
  Tensor strided = strided_copy(DType::f64, {3, 4}, a);
  ASSERT_FALSE(strided.is_contiguous());
  // b: a row of 4 values expanded over 3 rows with stride 0, at offset 2 of its buffer
  Tensor row_storage = make(DType::f64, {6}, {100, 100, 1, 2, 3, 4});
  Tensor expanded = row_storage.as_strided({3, 4}, {0, 1}, 2);
  std::vector<double> got = values(h.run({strided, expanded}));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(got[i * 4 + j], a[i * 4 + j] * (j + 1));
}

TEST(ReferencePointwise, Bf16AndF16ResultsRoundToNearestEven) {
  OpHarness h;
  h.add(OpKind::add, {h.input(DType::bf16, {2}), h.input(DType::bf16, {2})});
  // bf16 spacing at 1 is 2^-7: 1 + 2^-8 ties to 1 (even); (1 + 2^-7) + 2^-8 ties up to 1 + 2^-6.
  std::vector<double> got = values(h.run({make(DType::bf16, {2}, {1.0, 1.0078125}), make(DType::bf16, {2}, {0.00390625, 0.00390625})}));
  EXPECT_EQ(got, (std::vector<double>{1.0, 1.015625}));
  OpHarness g;
  g.add(OpKind::add, {g.input(DType::f16, {2}), g.input(DType::f16, {2})});
  double u = std::ldexp(1.0, -11);  // half the f16 spacing at 1
  got = values(g.run({make(DType::f16, {2}, {1.0, 1 + 2 * u}), make(DType::f16, {2}, {u, u})}));
  EXPECT_EQ(got, (std::vector<double>{1.0, 1 + 4 * u}));
}

TEST(ReferencePointwise, ScalarLiteralKeepsBf16DtypeAndIsReadAtF32Precision) {
  OpHarness h;
  h.add(OpKind::mul, {h.input(DType::bf16, {4}), h.literal(0.1)});
  std::vector<double> x{1.0, 3.0, -7.5, 100.0};
  Tensor out = h.run({make(DType::bf16, {4}, x), scalar(DType::f64, 0.1)});
  ASSERT_EQ(out.dtype(), DType::bf16);
  std::vector<double> got = values(out);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], bf16(float(x[i]) * 0.1f));
}

// A bf16 result is the f32 result rounded (PyTorch's f32 opmath): 0.21484375 * 3.3 is just below
// 0.708984375, which is its f32 value and a bf16 midpoint, rounded to even: 0.7109375 (not the
// exact product's nearest, 0.70703125).
TEST(ReferencePointwise, Bf16ResultsAreTheirF32ResultsRounded) {
  OpHarness h;
  h.add(OpKind::mul, {h.input(DType::bf16, {2}), h.literal(3.3)});
  std::vector<double> x{0.21484375, 1.0};
  std::vector<double> got = values(h.run({make(DType::bf16, {2}, x), scalar(DType::f64, 3.3)}));
  EXPECT_EQ(got[0], 0.7109375);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], bf16(float(x[i]) * 3.3f));
}

TEST(ReferencePointwise, IntegerDivisionIsTrueDivisionInF32) {
  OpHarness h;
  h.add(OpKind::div, {h.input(DType::i32, {4}), h.input(DType::i32, {4})});
  Tensor out = h.run({make_ints(DType::i32, {4}, {7, -7, 1, 0}), make_ints(DType::i32, {4}, {2, 2, 0, 0})});
  ASSERT_EQ(out.dtype(), DType::f32);
  std::vector<double> got = values(out);
  EXPECT_EQ(got[0], 3.5);
  EXPECT_EQ(got[1], -3.5);
  EXPECT_EQ(got[2], kInf);
  EXPECT_TRUE(std::isnan(got[3]));
}

TEST(ReferencePointwise, IntegerArithmeticIsExactAndWrapsAtTheDtypeWidth) {
  OpHarness h;
  h.add(OpKind::add, {h.input(DType::i32, {2}), h.input(DType::i32, {2})});
  int64_t big = std::numeric_limits<int32_t>::max();
  Tensor out = h.run({make_ints(DType::i32, {2}, {big, 5}), make_ints(DType::i32, {2}, {1, -9})});
  ASSERT_EQ(out.dtype(), DType::i32);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{std::numeric_limits<int32_t>::min(), -4}));
  OpHarness m;
  m.add(OpKind::mul, {m.input(DType::i64, {1}), m.int_literal(3)});
  int64_t exact = (int64_t(1) << 53) + 1;  // not representable in double
  EXPECT_EQ(ints(m.run({make_ints(DType::i64, {1}, {exact}), make_ints(DType::i64, {}, {3})})), (std::vector<int64_t>{3 * exact}));
}

TEST(ReferencePointwise, MixedDtypeOperandsAreRoundedToTheComputationDtypeFirst) {
  // PyTorch casts the i64 operand to f32 before adding: f32(2^24 + 1) = 2^24, and 2^24 + 1 ties
  // back to 2^24; adding in double first would give 2^24 + 2.
  OpHarness h;
  h.add(OpKind::add, {h.input(DType::i64, {1}), h.input(DType::f32, {1})});
  Tensor out = h.run({make_ints(DType::i64, {1}, {16777217}), make(DType::f32, {1}, {1.0})});
  ASSERT_EQ(out.dtype(), DType::f32);
  EXPECT_EQ(values(out), (std::vector<double>{16777216.0}));
}

TEST(ReferencePointwise, IntTensorTimesFloatLiteralGivesF32) {
  OpHarness h;
  h.add(OpKind::mul, {h.input(DType::i32, {2}), h.literal(2.5)});
  Tensor out = h.run({make_ints(DType::i32, {2}, {3, -1}), scalar(DType::f64, 2.5)});
  ASSERT_EQ(out.dtype(), DType::f32);
  EXPECT_EQ(values(out), (std::vector<double>{7.5, -2.5}));
}

TEST(ReferencePointwise, PowOfIntegersIsIntegerPowerAndNegativeExponentsFollowPyTorch) {
  OpHarness h;
  h.add(OpKind::pow, {h.input(DType::i64, {6}), h.input(DType::i64, {6})});
  Tensor out = h.run({make_ints(DType::i64, {6}, {2, -1, 1, 0, 3, -3}), make_ints(DType::i64, {6}, {10, -3, -5, -1, 0, 3})});
  ASSERT_EQ(out.dtype(), DType::i64);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{1024, -1, 1, 0, 1, -27}));
}

TEST(ReferencePointwise, PowOfFloats) {
  OpHarness h;
  h.add(OpKind::pow, {h.input(DType::f64, {3}), h.literal(0.5)});
  EXPECT_EQ(values(h.run({make(DType::f64, {3}, {4, 2, -1}), scalar(DType::f64, 0.5)}))[0], 2.0);
  OpHarness g;
  g.add(OpKind::pow, {g.input(DType::f32, {3}), g.input(DType::f32, {3})});
  std::vector<double> got = values(g.run({make(DType::f32, {3}, {2, kNaN, -8}), make(DType::f32, {3}, {-2, 0, 1.0 / 3})}));
  EXPECT_EQ(got[0], 0.25);
  EXPECT_EQ(got[1], 1.0);  // pow(NaN, 0) = 1
  EXPECT_TRUE(std::isnan(got[2]));
}

// PyTorch's pow of a tensor to the scalar 0.5 / -0.5 is sqrt / rsqrt: -0 and -inf differ from C's
// pow (a tensor exponent of 0.5 keeps C's pow, as PyTorch's does)
TEST(ReferencePointwise, PowToALiteralHalf_IsSqrtAndToMinusAHalfRsqrt) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double e : {0.5, -0.5}) {
    OpHarness h;
    h.add(OpKind::pow, {h.input(DType::f32, {3}), h.literal(e)});
    std::vector<double> got = values(h.run({make(DType::f32, {3}, {-inf, -0.0, 4}), scalar(DType::f32, e)}));
    EXPECT_TRUE(std::isnan(got[0])) << e;
    EXPECT_EQ(got[1], e > 0 ? 0.0 : -inf) << e;
    EXPECT_TRUE(std::signbit(got[1])) << e;  // sqrt(-0) = -0, 1 / sqrt(-0) = -inf
    EXPECT_EQ(got[2], e > 0 ? 2.0 : 0.5) << e;
  }
  OpHarness t;
  t.add(OpKind::pow, {t.input(DType::f32, {1}), t.input(DType::f32, {1})});
  EXPECT_EQ(values(t.run({make(DType::f32, {1}, {-inf}), make(DType::f32, {1}, {0.5})}))[0], inf);
}

TEST(ReferencePointwise, MaximumAndMinimumPropagateNaNFromEitherSide) {
  for (OpKind kind : {OpKind::maximum, OpKind::minimum}) {
    OpHarness h;
    h.add(kind, {h.input(DType::f32, {3}), h.input(DType::f32, {3})});
    std::vector<double> got = values(h.run({make(DType::f32, {3}, {kNaN, 1, 2}), make(DType::f32, {3}, {0, kNaN, -5})}));
    EXPECT_TRUE(std::isnan(got[0]));
    EXPECT_TRUE(std::isnan(got[1]));
    EXPECT_EQ(got[2], kind == OpKind::maximum ? 2 : -5);
  }
  OpHarness h;
  h.add(OpKind::maximum, {h.input(DType::i64, {2}), h.input(DType::i64, {2})});
  EXPECT_EQ(ints(h.run({make_ints(DType::i64, {2}, {-3, 9}), make_ints(DType::i64, {2}, {-4, 10})})), (std::vector<int64_t>{-3, 10}));
}

TEST(ReferencePointwise, ComparisonsGiveBoolAndTreatNaNAsUnordered) {
  const OpKind kinds[] = {OpKind::eq, OpKind::ne, OpKind::lt, OpKind::le, OpKind::gt, OpKind::ge};
  std::vector<double> a{1, 2, 3, kNaN}, b{2, 2, 2, kNaN};
  for (OpKind kind : kinds) {
    OpHarness h;
    h.add(kind, {h.input(DType::f32, {4}), h.input(DType::f32, {4})});
    Tensor out = h.run({make(DType::f32, {4}, a), make(DType::f32, {4}, b)});
    ASSERT_EQ(out.dtype(), DType::boolean);
    std::vector<int64_t> got = ints(out);
    for (int i = 0; i < 4; ++i) {
      bool e = kind == OpKind::eq ? a[i] == b[i] : kind == OpKind::ne ? a[i] != b[i] : kind == OpKind::lt ? a[i] < b[i]
             : kind == OpKind::le ? a[i] <= b[i] : kind == OpKind::gt ? a[i] > b[i] : a[i] >= b[i];
      EXPECT_EQ(got[i], int64_t(e)) << "op " << int(kind) << " at " << i;
    }
  }
}

TEST(ReferencePointwise, ComparisonRoundsOperandsToThePromotedDtype) {
  OpHarness h;  // bf16 vs a float literal compares in bf16: bf16(0.1) == 0.1
  h.add(OpKind::eq, {h.input(DType::bf16, {2}), h.literal(0.1)});
  EXPECT_EQ(ints(h.run({make(DType::bf16, {2}, {0.1, 0.2}), scalar(DType::f64, 0.1)})), (std::vector<int64_t>{1, 0}));
  OpHarness g;  // i64 vs float literal compares in f32: 2^24 + 1 becomes 2^24
  g.add(OpKind::eq, {g.input(DType::i64, {1}), g.literal(16777216.0)});
  EXPECT_EQ(ints(g.run({make_ints(DType::i64, {1}, {16777217}), scalar(DType::f64, 16777216.0)})), (std::vector<int64_t>{1}));
  OpHarness i;  // integers compare exactly
  i.add(OpKind::lt, {i.input(DType::i64, {1}), i.input(DType::i64, {1})});
  int64_t big = int64_t(1) << 60;
  EXPECT_EQ(ints(i.run({make_ints(DType::i64, {1}, {big}), make_ints(DType::i64, {1}, {big + 1})})), (std::vector<int64_t>{1}));
}

TEST(ReferencePointwise, BoolAddIsOrAndMulIsAnd) {
  for (OpKind kind : {OpKind::add, OpKind::mul}) {
    OpHarness h;
    h.add(kind, {h.input(DType::boolean, {4}), h.input(DType::boolean, {4})});
    Tensor out = h.run({make_ints(DType::boolean, {4}, {0, 0, 1, 1}), make_ints(DType::boolean, {4}, {0, 1, 0, 1})});
    ASSERT_EQ(out.dtype(), DType::boolean);
    EXPECT_EQ(ints(out), kind == OpKind::add ? (std::vector<int64_t>{0, 1, 1, 1}) : (std::vector<int64_t>{0, 0, 0, 1}));
  }
}

TEST(ReferencePointwise, WhereBroadcastsAllThreeAndPromotes) {
  OpHarness h;
  h.add(OpKind::where, {h.input(DType::boolean, {2, 1}), h.input(DType::i32, {3}), h.input(DType::f32, {2, 3})});
  std::vector<double> b = random_values(6, 5);
  Tensor out = h.run({make_ints(DType::boolean, {2, 1}, {1, 0}), make_ints(DType::i32, {3}, {7, 8, 9}), make(DType::f32, {2, 3}, b)});
  ASSERT_EQ(out.dtype(), DType::f32);
  ASSERT_EQ(out.sizes(), (Shape{2, 3}));
  std::vector<double> got = values(out);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(got[j], 7 + j);
    EXPECT_EQ(got[3 + j], double(float(b[3 + j])));
  }
  OpHarness g;  // integer result stays exact
  g.add(OpKind::where, {g.input(DType::boolean, {2}), g.input(DType::i64, {2}), g.int_literal(0)});
  int64_t big = (int64_t(1) << 60) + 1;
  EXPECT_EQ(ints(g.run({make_ints(DType::boolean, {2}, {1, 0}), make_ints(DType::i64, {2}, {big, big}), make_ints(DType::i64, {}, {0})})),
            (std::vector<int64_t>{big, 0}));
}

TEST(ReferencePointwise, CastTruncatesTowardZeroAndMapsNaNToZero) {
  OpHarness h;
  h.add(OpKind::cast, {h.input(DType::f32, {5})}, {attr("dtype", Attr::dtype(DType::i32))});
  Tensor out = h.run({make(DType::f32, {5}, {2.7, -2.7, kNaN, -0.5, 1e3})});
  ASSERT_EQ(out.dtype(), DType::i32);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{2, -2, 0, 0, 1000}));
}

// Every value i64 holds converts, however large (the GPU's conversion gives them too): values past
// 9.2e18 were 0 (held-out numerics check); -2^63 is i64's least, and 2^63 past its greatest.
TEST(ReferencePointwise, CastToI64KeepsValuesNearItsLimits) {
  OpHarness h;
  h.add(OpKind::cast, {h.input(DType::f64, {4})}, {attr("dtype", Attr::dtype(DType::i64))});
  Tensor out = h.run({make(DType::f64, {4}, {9.2000002679389553e18, -9.2000002679389553e18, -9223372036854775808.0, 9223372036854775808.0})});
  EXPECT_EQ(ints(out), (std::vector<int64_t>{9200000267938955264LL, -9200000267938955264LL, INT64_MIN, INT64_MAX}));
}

// Floats past an integer dtype's range, and infinities, saturate at its limits, NaN gives 0: what a
// GPU's conversion does (cvt.rzi), so the CPU reference and the generated kernels agree (an i32
// cast wrapped 3e9 to -1294967296 and gave 0 for the infinities; held-out semantics check).
TEST(ReferencePointwise, CastOutOfRangeSaturatesAsTheGpuDoes) {
  const std::vector<double> x = {3e9, -3e9, 1e20, -1e20, kInf, -kInf, kNaN, 2147483647.0, -2147483648.0};
  OpHarness h32;
  h32.add(OpKind::cast, {h32.input(DType::f64, {9})}, {attr("dtype", Attr::dtype(DType::i32))});
  EXPECT_EQ(ints(h32.run({make(DType::f64, {9}, x)})),
            (std::vector<int64_t>{INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MIN}));
  OpHarness h64;
  h64.add(OpKind::cast, {h64.input(DType::f32, {9})}, {attr("dtype", Attr::dtype(DType::i64))});
  EXPECT_EQ(ints(h64.run({make(DType::f32, {9}, x)})),
            (std::vector<int64_t>{3000000000LL, -3000000000LL, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 0, 2147483648LL, -2147483648LL}));
}

TEST(ReferencePointwise, CastToBoolIsNonZeroAndFromBoolIsZeroOrOne) {
  OpHarness h;
  h.add(OpKind::cast, {h.input(DType::f32, {4})}, {attr("dtype", Attr::dtype(DType::boolean))});
  EXPECT_EQ(ints(h.run({make(DType::f32, {4}, {0, -0.0, 0.25, kNaN})})), (std::vector<int64_t>{0, 0, 1, 1}));
  OpHarness g;
  g.add(OpKind::cast, {g.input(DType::boolean, {2})}, {attr("dtype", Attr::dtype(DType::f32))});
  EXPECT_EQ(values(g.run({make_ints(DType::boolean, {2}, {1, 0})})), (std::vector<double>{1, 0}));
}

TEST(ReferencePointwise, CastRoundsToHalfPrecisionAndKeepsBigIntegersExact) {
  OpHarness h;
  h.add(OpKind::cast, {h.input(DType::i64, {2})}, {attr("dtype", Attr::dtype(DType::f16))});
  EXPECT_EQ(values(h.run({make_ints(DType::i64, {2}, {2049, 70000})})), (std::vector<double>{2048, kInf}));
  OpHarness g;
  g.add(OpKind::cast, {g.input(DType::i64, {2})}, {attr("dtype", Attr::dtype(DType::i32))});
  EXPECT_EQ(ints(g.run({make_ints(DType::i64, {2}, {(int64_t(1) << 32) + 5, -3})})), (std::vector<int64_t>{5, -3}));
  OpHarness f;
  f.add(OpKind::cast, {f.input(DType::f32, {1})}, {attr("dtype", Attr::dtype(DType::bf16))});
  EXPECT_EQ(values(f.run({make(DType::f32, {1}, {1.01171875})})), (std::vector<double>{1.015625}));
}

TEST(ReferencePointwise, GeluBackwardIsTheDerivativeOfEachGeluMode) {
  std::vector<double> x{-3, -1, -0.2, 0, 0.3, 1.5, 4}, grad = random_values(7, 6);
  for (bool tanh : {false, true}) {
    OpHarness h;
    h.add(OpKind::gelu_backward, {h.input(DType::f64, {7}), h.input(DType::f64, {7})},
          {attr("approximate", Attr::string(tanh ? "tanh" : "none"))});
    std::vector<double> got = values(h.run({make(DType::f64, {7}, grad), make(DType::f64, {7}, x)}));
    for (size_t i = 0; i < x.size(); ++i) {
      double step = 1e-6;
      auto g = tanh ? gelu_tanh : gelu_exact;
      double derivative = (g(x[i] + step) - g(x[i] - step)) / (2 * step);
      EXPECT_NEAR(got[i], grad[i] * derivative, 1e-8) << (tanh ? "tanh" : "none") << " at x = " << x[i];
    }
  }
}

TEST(ReferencePointwise, ReluBackwardPassesGradWhereInputIsPositive) {
  OpHarness h;
  h.add(OpKind::relu_backward, {h.input(DType::f32, {5}), h.input(DType::f32, {5})});
  std::vector<double> got = values(h.run({make(DType::f32, {5}, {1, 2, 3, 4, 5}), make(DType::f32, {5}, {-1, 0, 0.5, kNaN, 7})}));
  EXPECT_EQ(got, (std::vector<double>{0, 0, 3, 4, 5}));  // threshold_backward: x <= 0 -> 0, NaN passes
  OpHarness g;  // broadcasting and integers
  g.add(OpKind::relu_backward, {g.input(DType::i64, {2, 2}), g.input(DType::i64, {2})});
  EXPECT_EQ(ints(g.run({make_ints(DType::i64, {2, 2}, {1, 2, 3, 4}), make_ints(DType::i64, {2}, {-1, 1})})),
            (std::vector<int64_t>{0, 2, 0, 4}));
}

TEST(ReferencePointwise, ScalarOperandsComputeAScalarResult) {
  OpHarness h;
  h.add(OpKind::add, {h.scalar_input(DType::f64), h.literal(0.5)});
  Tensor out = h.run({scalar(DType::f64, 2.0), scalar(DType::f64, 0.5)});
  EXPECT_EQ(out.dim(), 0);
  EXPECT_EQ(values(out), (std::vector<double>{2.5}));
}

TEST(ReferencePointwise, ShapesThatDoNotBroadcastAtRunTimeAreAUserError) {
  OpHarness h;
  h.add(OpKind::add, {h.input(DType::f32, {3}), h.input(DType::f32, {3})});
  const Op& op = *h.fusion.ops().back();
  EXPECT_THROW(run_reference_op(op, {make(DType::f32, {3}, {1, 2, 3}), make(DType::f32, {2}, {1, 2})}, {{3}}), UserError);
}

TEST(ReferencePointwise, MillionElementBroadcastAddRunsWellUnderASecond) {
  OpHarness h;
  h.add(OpKind::add, {h.input(DType::f32, {1000, 1000}), h.input(DType::bf16, {1000})});
  Tensor a = make(DType::f32, {1000, 1000}, random_values(1000000, 7));
  Tensor b = make(DType::bf16, {1000}, random_values(1000, 8));
  auto start = std::chrono::steady_clock::now();
  Tensor out = h.run({a, b});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_FLOAT_EQ(float(values(out)[1000 * 999 + 3]), float(values(a)[1000 * 999 + 3] + values(b)[3]));
}

}  // namespace
}  // namespace alloy
