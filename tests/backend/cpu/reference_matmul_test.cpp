// The CPU reference's matmul (torch.matmul shapes, broadcast batches, 1-D operands) and linear
// (with and without bias, 1-D weight) against triple loops written here.
#include <chrono>

#include "backend/cpu/reference_test_util.h"

namespace alloy {
namespace {

using namespace reftest;

// c[m, n] = sum_k a[m, k] * b[k, n], all row-major.
std::vector<double> loops(const std::vector<double>& a, const std::vector<double>& b, int m, int k, int n) {
  std::vector<double> c(size_t(m * n), 0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "at " << i;
}

TEST(ReferenceMatmul, TwoDimensionalWithATransposedOperand) {
  std::vector<double> a = random_values(15, 21), bt = random_values(20, 22);  // b^T is [4, 5]
  std::vector<double> b(20);
  for (int k = 0; k < 5; ++k)
    for (int n = 0; n < 4; ++n) b[k * 4 + n] = bt[n * 5 + k];
  OpHarness h;
  h.add(OpKind::matmul, {h.input(DType::f64, {3, 5}), h.input(DType::f64, {5, 4})});
  Tensor out = h.run({make(DType::f64, {3, 5}, a), make(DType::f64, {4, 5}, bt).permute({1, 0})});
  ASSERT_EQ(out.sizes(), (Shape{3, 4}));
  expect_near_all(values(out), loops(a, b, 3, 5, 4), 1e-13);
}

TEST(ReferenceMatmul, OneDimensionalOperandsDropTheirAddedAxis) {
  std::vector<double> v = {1, 2, 3}, w = {4, 5, 6}, m = random_values(6, 23);  // m is [3, 2]
  OpHarness dot;
  dot.add(OpKind::matmul, {dot.input(DType::f64, {3}), dot.input(DType::f64, {3})});
  Tensor d = dot.run({make(DType::f64, {3}, v), make(DType::f64, {3}, w)});
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(values(d), (std::vector<double>{32}));
  OpHarness vm;
  vm.add(OpKind::matmul, {vm.input(DType::f64, {3}), vm.input(DType::f64, {3, 2})});
  Tensor r = vm.run({make(DType::f64, {3}, v), make(DType::f64, {3, 2}, m)});
  EXPECT_EQ(r.sizes(), (Shape{2}));
  expect_near_all(values(r), loops(v, m, 1, 3, 2), 1e-14);
  OpHarness mv;
  mv.add(OpKind::matmul, {mv.input(DType::f64, {2, 3}), mv.input(DType::f64, {3})});
  Tensor c = mv.run({make(DType::f64, {2, 3}, m), make(DType::f64, {3}, w)});
  EXPECT_EQ(c.sizes(), (Shape{2}));
  expect_near_all(values(c), loops(m, w, 2, 3, 1), 1e-14);
}

TEST(ReferenceMatmul, BatchAxesBroadcastLikeNumPy) {
  // a [2, 1, 3, 4] x b [5, 4, 2] -> [2, 5, 3, 2]
  std::vector<double> a = random_values(24, 24), b = random_values(40, 25);
  OpHarness h;
  h.add(OpKind::matmul, {h.input(DType::f32, {2, 1, 3, 4}), h.input(DType::f32, {5, 4, 2})});
  Tensor out = h.run({make(DType::f32, {2, 1, 3, 4}, a), make(DType::f32, {5, 4, 2}, b)});
  ASSERT_EQ(out.sizes(), (Shape{2, 5, 3, 2}));
  std::vector<double> got = values(out);
  for (double& x : a) x = float(x);
  for (double& x : b) x = float(x);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j) {
      std::vector<double> ai(a.begin() + i * 12, a.begin() + (i + 1) * 12), bj(b.begin() + j * 8, b.begin() + (j + 1) * 8);
      std::vector<double> c = loops(ai, bj, 3, 4, 2);
      for (int e = 0; e < 6; ++e) EXPECT_FLOAT_EQ(got[(i * 5 + j) * 6 + e], c[e]);
    }
}

TEST(ReferenceMatmul, BatchedTimesOneDimensional) {
  std::vector<double> a = random_values(12, 26), v = {1, -1, 2};
  OpHarness h;
  h.add(OpKind::matmul, {h.input(DType::f64, {2, 2, 3}), h.input(DType::f64, {3})});
  Tensor out = h.run({make(DType::f64, {2, 2, 3}, a), make(DType::f64, {3}, v)});
  ASSERT_EQ(out.sizes(), (Shape{2, 2}));
  expect_near_all(values(out), loops(a, v, 4, 3, 1), 1e-14);
}

TEST(ReferenceMatmul, Bf16ResultIsRoundedOnceAfterWideAccumulation) {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7 exactly; rounding each partial sum to bf16 would give 1.
  OpHarness h;
  h.add(OpKind::matmul, {h.input(DType::bf16, {1, 3}), h.input(DType::bf16, {3, 1})});
  Tensor out = h.run({make(DType::bf16, {1, 3}, {1, 0.00390625, 0.00390625}), make(DType::bf16, {3, 1}, {1, 1, 1})});
  ASSERT_EQ(out.dtype(), DType::bf16);
  EXPECT_EQ(values(out), (std::vector<double>{1.0078125}));
}

TEST(ReferenceMatmul, IntegerMatmulIsExact) {
  OpHarness h;
  h.add(OpKind::matmul, {h.input(DType::i32, {2, 2}), h.input(DType::i32, {2, 2})});
  Tensor out = h.run({make_ints(DType::i32, {2, 2}, {1, 2, 3, 4}), make_ints(DType::i32, {2, 2}, {5, 6, 7, 8})});
  ASSERT_EQ(out.dtype(), DType::i32);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{19, 22, 43, 50}));
}

TEST(ReferenceMatmul, ContractionSizeMismatchAtRunTimeIsAUserError) {
  OpHarness h;
  h.add(OpKind::matmul, {h.input(DType::f32, {2, 3}), h.input(DType::f32, {3, 2})});
  const Op& op = *h.fusion.ops().back();
  EXPECT_THROW(run_reference_op(op, {Tensor::empty(DType::f32, {2, 3}), Tensor::empty(DType::f32, {4, 2})}, {{2, 2}}), UserError);
}

TEST(ReferenceLinear, WithBiasOnABatchedInput) {
  // x [2, 3, 4], w [5, 4], b [5]: y = x @ w^T + b
  std::vector<double> x = random_values(24, 27), w = random_values(20, 28), b = random_values(5, 29);
  OpHarness h;
  h.add(OpKind::linear, {h.input(DType::f64, {2, 3, 4}), h.input(DType::f64, {5, 4}), h.input(DType::f64, {5})});
  Tensor out = h.run({make(DType::f64, {2, 3, 4}, x), make(DType::f64, {5, 4}, w), make(DType::f64, {5}, b)});
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 5}));
  std::vector<double> got = values(out);
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 5; ++o) {
      double e = b[o];
      for (int k = 0; k < 4; ++k) e += x[r * 4 + k] * w[o * 4 + k];
      EXPECT_NEAR(got[r * 5 + o], e, 1e-14);
    }
}

TEST(ReferenceLinear, WithoutBiasAndWithAStridedWeight) {
  std::vector<double> x = random_values(6, 30), w = random_values(12, 31);  // w is [4, 3]
  OpHarness h;
  h.add(OpKind::linear, {h.input(DType::f32, {2, 3}), h.input(DType::f32, {4, 3})});
  Tensor out = h.run({make(DType::f32, {2, 3}, x), strided_copy(DType::f32, {4, 3}, w)});
  ASSERT_EQ(out.sizes(), (Shape{2, 4}));
  std::vector<double> got = values(out);
  for (int r = 0; r < 2; ++r)
    for (int o = 0; o < 4; ++o) {
      double e = 0;
      for (int k = 0; k < 3; ++k) e += double(float(x[r * 3 + k])) * double(float(w[o * 3 + k]));
      EXPECT_FLOAT_EQ(got[r * 4 + o], e);
    }
}

TEST(ReferenceLinear, OneDimensionalWeightGivesOneValuePerRow) {
  OpHarness h;
  h.add(OpKind::linear, {h.input(DType::f64, {2, 3}), h.input(DType::f64, {3}), h.input(DType::f64, {})});
  Tensor out = h.run({make(DType::f64, {2, 3}, {1, 2, 3, 4, 5, 6}), make(DType::f64, {3}, {1, 0, -1}), scalar(DType::f64, 10)});
  EXPECT_EQ(out.sizes(), (Shape{2}));
  EXPECT_EQ(values(out), (std::vector<double>{8, 8}));
}

TEST(ReferenceMatmul, TransformerSizedMatmulRunsWellUnderASecond) {
  OpHarness h;
  h.add(OpKind::matmul, {h.input(DType::f32, {64, 256}), h.input(DType::f32, {256, 1024})});
  std::vector<double> a = random_values(64 * 256, 32), b = random_values(256 * 1024, 33);
  Tensor ta = make(DType::f32, {64, 256}, a), tb = make(DType::f32, {256, 1024}, b);
  auto start = std::chrono::steady_clock::now();
  Tensor out = h.run({ta, tb});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  double e = 0;  // spot check one entry
  for (int k = 0; k < 256; ++k) e += double(float(a[5 * 256 + k])) * double(float(b[k * 1024 + 700]));
  EXPECT_FLOAT_EQ(float(values(out)[5 * 1024 + 700]), float(e));
}

}  // namespace
}  // namespace alloy
