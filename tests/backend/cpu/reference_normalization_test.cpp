// The CPU reference's softmax, layer_norm and rms_norm against loops written here.
#include <cmath>
#include <limits>

#include "backend/cpu/reference_test_util.h"

namespace alloy {
namespace {

using namespace reftest;

TEST(ReferenceSoftmax, LastAndFirstAxisMatchLoops) {
  std::vector<double> x = random_values(12, 41, -5, 5);  // [3, 4]
  for (int dim : {-1, 0}) {
    OpHarness h;
    h.add(OpKind::softmax, {h.input(DType::f64, {3, 4})}, {attr("dim", Attr::integer(dim))});
    std::vector<double> got = values(h.run({make(DType::f64, {3, 4}, x)}));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        double total = 0;
        for (int t = 0; t < (dim == 0 ? 3 : 4); ++t) total += std::exp(dim == 0 ? x[t * 4 + j] : x[i * 4 + t]);
        EXPECT_NEAR(got[i * 4 + j], std::exp(x[i * 4 + j]) / total, 1e-15) << "dim " << dim;
      }
  }
}

TEST(ReferenceSoftmax, LargeInputsAreStableAndBf16IsRounded) {
  OpHarness h;
  h.add(OpKind::softmax, {h.input(DType::bf16, {1, 3})}, {attr("dim", Attr::integer(1))});
  Tensor out = h.run({make(DType::bf16, {1, 3}, {1000, 1000, 992})});
  ASSERT_EQ(out.dtype(), DType::bf16);
  double e = std::exp(-8.0), total = 2 + e;
  EXPECT_EQ(values(out), (std::vector<double>{bf16(1 / total), bf16(1 / total), bf16(e / total)}));
}

TEST(ReferenceSoftmax, MiddleAxisOfAStridedInput) {
  std::vector<double> x = random_values(24, 42);  // [2, 3, 4], softmax over axis 1
  OpHarness h;
  h.add(OpKind::softmax, {h.input(DType::f64, {2, 3, 4})}, {attr("dim", Attr::integer(1))});
  Tensor out = h.run({strided_copy(DType::f64, {2, 3, 4}, x)});
  ASSERT_TRUE(out.is_contiguous());
  std::vector<double> got = values(out);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double total = 0;
      for (int j = 0; j < 3; ++j) total += std::exp(x[(i * 3 + j) * 4 + k]);
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(got[(i * 3 + j) * 4 + k], std::exp(x[(i * 3 + j) * 4 + k]) / total, 1e-15);
    }
}

TEST(ReferenceSoftmax, NaNInARowMakesTheRowNaN) {
  OpHarness h;
  h.add(OpKind::softmax, {h.input(DType::f32, {2, 2})});
  std::vector<double> got = values(h.run({make(DType::f32, {2, 2}, {std::numeric_limits<double>::quiet_NaN(), 1, 0, 0})}));
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
  EXPECT_EQ(got[2], 0.5);
}

// Normalizes each row of x ([rows, n]) like layer_norm (or rms_norm when `rms`).
std::vector<double> normalize_rows(const std::vector<double>& x, int n, double eps, bool rms,
                                   const std::vector<double>& w, const std::vector<double>& b) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0, sq = 0;
    for (int i = 0; i < n; ++i) mean += x[r * n + i] / n;
    for (int i = 0; i < n; ++i) sq += rms ? x[r * n + i] * x[r * n + i] / n : (x[r * n + i] - mean) * (x[r * n + i] - mean) / n;
    for (int i = 0; i < n; ++i) {
      double v = (x[r * n + i] - (rms ? 0 : mean)) / std::sqrt(sq + eps);
      y[r * n + i] = v * (w.empty() ? 1 : w[i]) + (b.empty() ? 0 : b[i]);
    }
  }
  return y;
}

TEST(ReferenceLayerNorm, OverTheLastTwoAxesWithWeightAndBias) {
  std::vector<double> x = random_values(24, 43), w = random_values(12, 44), b = random_values(12, 45);
  OpHarness h;
  h.add(OpKind::layer_norm, {h.input(DType::f64, {2, 3, 4}), h.input(DType::f64, {3, 4}), h.input(DType::f64, {3, 4})},
        {attr("normalized_ndim", Attr::integer(2)), attr("eps", Attr::real(1e-3))});
  std::vector<double> got = values(h.run({make(DType::f64, {2, 3, 4}, x), make(DType::f64, {3, 4}, w), make(DType::f64, {3, 4}, b)}));
  std::vector<double> expected = normalize_rows(x, 12, 1e-3, false, w, b);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-13) << "at " << i;
}

TEST(ReferenceLayerNorm, WithoutParametersOnF32) {
  std::vector<double> x = random_values(12, 46);
  for (double& v : x) v = float(v);
  OpHarness h;
  h.add(OpKind::layer_norm, {h.input(DType::f32, {3, 4})});
  Tensor out = h.run({make(DType::f32, {3, 4}, x)});
  ASSERT_EQ(out.dtype(), DType::f32);
  std::vector<double> got = values(out), expected = normalize_rows(x, 4, 1e-5, false, {}, {});
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], expected[i]);
}

TEST(ReferenceRmsNorm, WithAndWithoutWeight) {
  std::vector<double> x = random_values(8, 47), w = random_values(4, 48);
  OpHarness h;
  h.add(OpKind::rms_norm, {h.input(DType::f64, {2, 4}), h.input(DType::f64, {4})});
  std::vector<double> got = values(h.run({make(DType::f64, {2, 4}, x), make(DType::f64, {4}, w)}));
  std::vector<double> expected = normalize_rows(x, 4, 1e-6, true, w, {});
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-13);
  OpHarness g;
  g.add(OpKind::rms_norm, {g.input(DType::f64, {2, 4})}, {attr("eps", Attr::real(0.5))});
  got = values(g.run({make(DType::f64, {2, 4}, x)}));
  expected = normalize_rows(x, 4, 0.5, true, {}, {});
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-13);
}

}  // namespace
}  // namespace alloy
