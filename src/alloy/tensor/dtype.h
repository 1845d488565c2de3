// Element types of tensors and scalars, PyTorch's type promotion, and the bf16/f16 conversions
// (round to nearest even) that every backend shares.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace alloy {

enum class DType : uint8_t { f64, f32, f16, bf16, i64, i32, boolean };

std::string_view dtype_name(DType t);  // "f64" ... "bool"
std::optional<DType> parse_dtype(std::string_view name);
int dtype_size(DType t);
inline bool is_floating(DType t) { return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16; }
inline bool is_integral(DType t) { return t == DType::i64 || t == DType::i32; }

// PyTorch's category order: bool < integral < floating.
enum class TypeCategory { boolean = 0, integral = 1, floating = 2 };
TypeCategory category(DType t);

// torch.promote_types for two dtypes (bf16 + f16 -> f32, i32 + f16 -> f16, ...).
DType promote_types(DType a, DType b);

// Operand priority in PyTorch's result_type: tensors with dims beat 0-dim tensors, which beat
// wrapped scalars (literals and scalar inputs). A lower tier can only raise the category, and
// then a floating scalar gives the default dtype f32 and an integer scalar gives i64.
enum class OperandTier { tensor = 0, zero_dim = 1, scalar = 2 };
struct TypedOperand {
  DType dtype;
  OperandTier tier;
};
DType result_type(const TypedOperand* operands, int count);

// bit-exact conversions
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);
uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(uint16_t h);
// double -> f16/bf16, rounded once to nearest even (through float rounded to odd, which keeps
// the sticky information a plain double -> float -> bf16 would lose near ties).
uint16_t double_to_bf16_bits(double d);
uint16_t double_to_f16_bits(double d);

}  // namespace alloy
