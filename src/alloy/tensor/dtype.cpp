#include "alloy/tensor/dtype.h"

#include <bit>
#include <cmath>

#include "alloy/common/error.h"

namespace alloy {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
  }
  internal_error("bad dtype ", int(t));
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

int dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  internal_error("bad dtype ", int(t));
}

TypeCategory category(DType t) {
  if (t == DType::boolean) return TypeCategory::boolean;
  if (is_integral(t)) return TypeCategory::integral;
  return TypeCategory::floating;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  TypeCategory ca = category(a), cb = category(b);
  if (ca != cb) {
    // The higher category wins, whatever the widths (i64 + f16 -> f16).
    return ca > cb ? a : b;
  }
  if (ca == TypeCategory::integral) return (a == DType::i64 || b == DType::i64) ? DType::i64 : DType::i32;
  // floating: f64 > f32 > {f16, bf16}; f16 with bf16 -> f32
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  if (a == DType::f32 || b == DType::f32) return DType::f32;
  return DType::f32;  // f16 + bf16
}

DType result_type(const TypedOperand* operands, int count) {
  // Per tier, the promoted dtype of that tier's operands (PyTorch's ResultTypeState).
  std::optional<DType> tier_type[3];
  for (int i = 0; i < count; ++i) {
    auto& slot = tier_type[int(operands[i].tier)];
    slot = slot ? promote_types(*slot, operands[i].dtype) : operands[i].dtype;
  }
  std::optional<DType> result = tier_type[0];
  for (int tier = 1; tier < 3; ++tier) {
    if (!tier_type[tier]) continue;
    DType t = *tier_type[tier];
    if (tier == int(OperandTier::scalar)) {
      // wrapped numbers carry only a category: default float f32, int i64
      if (category(t) == TypeCategory::floating) t = DType::f32;
      else if (category(t) == TypeCategory::integral) t = DType::i64;
    }
    if (!result) result = t;
    else if (category(t) > category(*result)) result = t;
  }
  ALLOY_CHECK(result.has_value(), "result_type of no operands");
  // Only scalars: keep the scalar's own dtype (f64 for float literals) -- handled by callers.
  return *result;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);  // quiet NaN, keep sign
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return uint16_t((u + rounding) >> 16);
}

// `d` as a float rounded toward zero, with the lowest mantissa bit set when that was inexact
// ("round to odd"): a later rounding to a format of at most 22 bits is then the correct rounding
// of `d` itself.
static float to_float_round_odd(double d) {
  if (!std::isfinite(d)) return float(d);
  float f = float(d);
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  if (double(f) != d) f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  return f;
}

uint16_t double_to_bf16_bits(double d) { return float_to_bf16_bits(to_float_round_odd(d)); }
uint16_t double_to_f16_bits(double d) { return float_to_f16_bits(to_float_round_odd(d)); }

float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

uint16_t float_to_f16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000) {  // inf or nan
    return uint16_t(sign | 0x7C00 | (abs > 0x7F800000 ? 0x200 | ((abs >> 13) & 0x3FF) : 0));
  }
  if (abs >= 0x477FF000) return uint16_t(sign | 0x7C00);  // rounds to >= 65520 -> inf
  if (abs < 0x38800000) {
    // subnormal half (or zero): value = abs_float; scale to units of 2^-24 and round to even
    float af = std::bit_cast<float>(abs);
    float scaled = af * 16777216.0f;  // 2^24, exact
    // nearbyint uses the current rounding mode, round-to-nearest-even by default
    uint32_t m = uint32_t(std::nearbyint(scaled));
    return uint16_t(sign | m);
  }
  // normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits to nearest even
  uint32_t mant_rounding = 0xFFF + ((abs >> 13) & 1);
  uint32_t r = (abs + mant_rounding) - (uint32_t(112) << 23);
  return uint16_t(sign | (r >> 13));
}

float f16_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace alloy
