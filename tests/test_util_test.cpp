// The shared comparison (tensors_close) as a specification: what it accepts (equal tensors, a
// flipped rounding, NaN where NaN is expected) and what it must reject however lenient its
// scattered-element allowance is (a wrong row, one wrong bf16 element, a NaN for a number).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.h"

namespace alloy::testing {
namespace {

// [rows, cols] of smooth values in (-1, 1), rounded to `dtype`.
Tensor smooth(DType dtype, int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty(dtype, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) store_double(t.data(), dtype, i, std::sin(0.37 * double(i) + 0.1));
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.dtype(), t.sizes());
  for (int64_t i = 0; i < t.numel(); ++i) store_double(c.data(), t.dtype(), i, load_as_double(t.data(), t.dtype(), i));
  return c;
}

void set(Tensor& t, int64_t flat, double v) { store_double(t.data(), t.dtype(), flat, v); }
double get(const Tensor& t, int64_t flat) { return load_as_double(t.data(), t.dtype(), flat); }

TEST(TensorsClose, EqualTensors_AreAccepted) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32, DType::f64}) {
    Tensor expected = smooth(dtype, 64, 64);
    EXPECT_TRUE(tensors_close(copy_of(expected), expected)) << dtype_name(dtype);
  }
}

// A flipped rounding: one element a bf16 ulp away (within the elementwise tolerance).
TEST(TensorsClose, OneUlpInBf16_IsAccepted) {
  Tensor expected = smooth(DType::bf16, 64, 64), actual = copy_of(expected);
  set(actual, 100, get(expected, 100) * (1 + std::ldexp(1.0, -7)));
  EXPECT_NE(get(actual, 100), get(expected, 100));
  EXPECT_TRUE(tensors_close(actual, expected));
}

// A long bf16 reduction that cancels to near zero: the result is off by a few of the terms'
// roundings, more than the elementwise tolerance, in one element of thousands: the allowance.
TEST(TensorsClose, ScatteredCancellationErrors_AreAccepted) {
  Tensor expected = smooth(DType::bf16, 64, 64);
  set(expected, 100, 0.001);
  Tensor actual = copy_of(expected);
  set(actual, 100, 0.05);
  EXPECT_TRUE(tensors_close(actual, expected));
  // ten such elements in 4096 are more than a few scattered ones
  set(actual, 2000, 0.05 + get(expected, 2000));
  for (int64_t c = 0; c < 64; c += 8) set(actual, 640 + c, get(expected, 640 + c) + 0.05);
  EXPECT_FALSE(tensors_close(actual, expected));
}

// A row computed with a wrong statistic (10% off), in a tensor large enough that its L2 error is
// under bf16's allowance: the scattered-element allowance must not take it.
TEST(TensorsClose, OneWrongRow_IsRejected) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    Tensor expected = smooth(dtype, 256, 64), actual = copy_of(expected);
    for (int64_t c = 0; c < 64; ++c) set(actual, 17 * 64 + c, 1.1 * get(expected, 17 * 64 + c));
    EXPECT_FALSE(tensors_close(actual, expected)) << dtype_name(dtype);
  }
}

TEST(TensorsClose, OneWrongElementInBf16_IsRejected) {
  Tensor expected = smooth(DType::bf16, 64, 64), actual = copy_of(expected);
  int64_t at = 0;
  while (std::fabs(get(expected, at)) < 0.9) ++at;  // an element of the tensor's scale
  set(actual, at, 1.25 * get(expected, at));
  EXPECT_FALSE(tensors_close(actual, expected));
  set(actual, at, -get(expected, at));  // the wrong sign
  EXPECT_FALSE(tensors_close(actual, expected));
}

TEST(TensorsClose, NanWhereANumberIsExpected_IsRejected) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::bf16, DType::f32}) {
    Tensor expected = smooth(dtype, 64, 64), actual = copy_of(expected);
    set(actual, 5, nan);
    EXPECT_FALSE(tensors_close(actual, expected)) << dtype_name(dtype);
    set(actual, 5, inf);
    EXPECT_FALSE(tensors_close(actual, expected)) << dtype_name(dtype);
    // and a number where NaN is expected
    Tensor with_nan = copy_of(expected);
    set(with_nan, 5, nan);
    EXPECT_FALSE(tensors_close(expected, with_nan)) << dtype_name(dtype);
  }
}

TEST(TensorsClose, NanWhereNanIsExpected_IsAccepted) {
  Tensor expected = smooth(DType::bf16, 8, 8);
  set(expected, 3, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(tensors_close(copy_of(expected), expected));
}

TEST(TensorsClose, IntegersAreExact) {
  Tensor expected = Tensor::empty(DType::i32, {100});
  for (int64_t i = 0; i < 100; ++i) set(expected, i, double(i * 1000));
  Tensor actual = copy_of(expected);
  set(actual, 50, 50001);
  EXPECT_FALSE(tensors_close(actual, expected));
}

}  // namespace
}  // namespace alloy::testing
