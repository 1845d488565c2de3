#include "alloy/tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace alloy {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_FALSE(parse_dtype("float32").has_value());
}

TEST(DType, PromoteTypes_FollowsPyTorch) {
  EXPECT_EQ(promote_types(DType::bf16, DType::f32), DType::f32);
  EXPECT_EQ(promote_types(DType::bf16, DType::f16), DType::f32);
  EXPECT_EQ(promote_types(DType::i64, DType::f16), DType::f16);
  EXPECT_EQ(promote_types(DType::i32, DType::i64), DType::i64);
  EXPECT_EQ(promote_types(DType::boolean, DType::i32), DType::i32);
  EXPECT_EQ(promote_types(DType::f64, DType::f32), DType::f64);
}

TEST(DType, ResultType_ScalarsDoNotPromoteTensors) {
  TypedOperand bf16_and_float_literal[] = {{DType::bf16, OperandTier::tensor}, {DType::f64, OperandTier::scalar}};
  EXPECT_EQ(result_type(bf16_and_float_literal, 2), DType::bf16);
  TypedOperand int_and_float_literal[] = {{DType::i32, OperandTier::tensor}, {DType::f64, OperandTier::scalar}};
  EXPECT_EQ(result_type(int_and_float_literal, 2), DType::f32);  // default float dtype
  TypedOperand bool_and_int_literal[] = {{DType::boolean, OperandTier::tensor}, {DType::i64, OperandTier::scalar}};
  EXPECT_EQ(result_type(bool_and_int_literal, 2), DType::i64);
  TypedOperand i32_and_zero_dim_f64[] = {{DType::i32, OperandTier::tensor}, {DType::f64, OperandTier::zero_dim}};
  EXPECT_EQ(result_type(i32_and_zero_dim_f64, 2), DType::f64);
  TypedOperand f16_and_zero_dim_f32[] = {{DType::f16, OperandTier::tensor}, {DType::f32, OperandTier::zero_dim}};
  EXPECT_EQ(result_type(f16_and_zero_dim_f32, 2), DType::f16);
}

TEST(DType, Bf16_RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0)
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6)
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(bf16_bits_to_float(0xC000), -2.0f);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(INFINITY)), INFINITY);
}

TEST(DType, F16_RoundsToNearestEvenIncludingSubnormals) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7C00);  // rounds to infinity
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // halfway to 0: ties to even
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  for (uint32_t bits = 0; bits < 0x7C00; bits += 7) {
    float f = f16_bits_to_float(uint16_t(bits));
    EXPECT_EQ(float_to_f16_bits(f), bits) << bits;
  }
}

// A double just past a tie of the 16-bit format: rounding through float would first land on the
// tie and then go to even (down); rounding once goes up. And exact ties still go to even.
TEST(DType, DoubleTo16Bit_RoundsOnceNotTwice) {
  double past_bf16_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(float_to_bf16_bits(float(past_bf16_tie)), float_to_bf16_bits(1.0f));  // the double rounding
  EXPECT_EQ(double_to_bf16_bits(past_bf16_tie), float_to_bf16_bits(1.0078125f));
  EXPECT_EQ(double_to_bf16_bits(-past_bf16_tie), float_to_bf16_bits(-1.0078125f));
  EXPECT_EQ(double_to_bf16_bits(1.0 + std::ldexp(1.0, -8)), float_to_bf16_bits(1.0f));  // a tie: to even
  double past_f16_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(double_to_f16_bits(past_f16_tie), float_to_f16_bits(1.0f + 0.0009765625f));
  EXPECT_EQ(double_to_f16_bits(1.0 + std::ldexp(1.0, -11)), float_to_f16_bits(1.0f));
  // beyond float's range, infinities and NaN
  EXPECT_EQ(double_to_bf16_bits(1e300), 0x7F80);
  EXPECT_EQ(double_to_bf16_bits(-1e300), 0xFF80);
  EXPECT_EQ(double_to_f16_bits(65519.99), float_to_f16_bits(65504.0f));
  EXPECT_EQ(double_to_f16_bits(65520.0), 0x7C00);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(double_to_bf16_bits(std::nan("")))));
  EXPECT_EQ(double_to_bf16_bits(std::ldexp(1.0, -140)), float_to_bf16_bits(std::ldexp(1.0f, -140)));  // subnormal
}

}  // namespace
}  // namespace alloy
