#include "alloy/backend/cuda/codegen/cuda_expressions.h"

#include <cmath>
#include <cstdio>

#include "alloy/common/error.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {

// ---- types ---------------------------------------------------------------------------

// How a dtype is held in registers.
const char* compute_type(DType t) {
  switch (t) {
    case DType::f64: return "double";
    case DType::f32: case DType::f16: case DType::bf16: return "float";
    case DType::i64: case DType::i32: return "alloy_i64";  // one token, so `T(0)` is a valid cast
    case DType::boolean: return "bool";
  }
  return "float";
}

// How a dtype is stored in memory.
const char* storage_type(DType t) {
  switch (t) {
    case DType::f64: return "double";
    case DType::f32: return "float";
    case DType::f16: case DType::bf16: return "alloy_u16";
    case DType::i64: return "long long";
    case DType::i32: return "int";
    case DType::boolean: return "alloy_u8";
  }
  return "float";
}

std::string load_convert(DType t, const std::string& raw) {
  switch (t) {
    case DType::bf16: return "alloy_bf16_to_float(" + raw + ")";
    case DType::f16: return "alloy_f16_to_float(" + raw + ")";
    case DType::i32: return "(long long)(" + raw + ")";
    case DType::boolean: return "(" + raw + " != 0)";
    default: return raw;
  }
}

std::string store_convert(DType t, const std::string& value) {
  switch (t) {
    case DType::bf16: return "alloy_float_to_bf16((float)(" + value + "))";
    case DType::f16: return "alloy_float_to_f16((float)(" + value + "))";
    case DType::f32: return "(float)(" + value + ")";
    case DType::f64: return "(double)(" + value + ")";
    case DType::i32: return "(int)(" + value + ")";
    case DType::i64: return "(long long)(" + value + ")";
    case DType::boolean: return "(alloy_u8)((" + value + ") ? 1 : 0)";
  }
  return value;
}

namespace {

OperandTier tier_of(const Value* v) {
  if (v->is_scalar()) return OperandTier::scalar;
  return v->rank() == 0 ? OperandTier::zero_dim : OperandTier::tensor;
}

}  // namespace

// The dtype an op computes in: its output's, except comparisons (their operands' promotion).
DType op_compute_dtype(const Op& op) {
  switch (op.kind) {
    case OpKind::eq: case OpKind::ne: case OpKind::lt: case OpKind::le: case OpKind::gt: case OpKind::ge: {
      TypedOperand operands[2] = {{op.inputs[0]->dtype(), tier_of(op.inputs[0])}, {op.inputs[1]->dtype(), tier_of(op.inputs[1])}};
      if (op.inputs[0]->is_scalar() && op.inputs[1]->is_scalar()) return promote_types(operands[0].dtype, operands[1].dtype);
      return result_type(operands, 2);
    }
    default:
      return op.outputs[0]->dtype();
  }
}

std::string literal_text(const Literal& lit, const char* ctype) {
  std::string ct = ctype;
  if (lit.kind == Literal::Kind::boolean) return ct == "bool" ? (lit.b ? "true" : "false") : (lit.b ? "(" + ct + ")1" : "(" + ct + ")0");
  if (lit.kind == Literal::Kind::integer) return "(" + ct + ")(" + std::to_string(lit.i) + "LL)";
  if (std::isnan(lit.f)) return "(" + ct + ")__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(lit.f)) return std::string("(") + ct + ")(" + (lit.f > 0 ? "" : "-") + "__longlong_as_double(0x7ff0000000000000LL))";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", lit.f);
  std::string text = buf;
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return "(" + ct + ")(" + text + ")";
}

// A value of a 16-bit float dtype is held in a float register but rounded as PyTorch stores it,
// so a fused chain computes what the op-by-op program computes.
std::string round_to_dtype(DType t, const std::string& expr) {
  if (t == DType::bf16) return "alloy_bf16_to_float(alloy_float_to_bf16((float)(" + expr + ")))";
  if (t == DType::f16) return "alloy_f16_to_float(alloy_float_to_f16((float)(" + expr + ")))";
  return expr;
}

// ---- pointwise expressions: one row per op kind ----------------------------------------

std::string pointwise_expr(const Op& op, const std::vector<std::string>& a, const char* ct) {
  std::string T = ct;
  auto call = [&](const char* f) { return std::string(f) + "(" + a[0] + ")"; };
  switch (op.kind) {
    case OpKind::neg: return "(-" + a[0] + ")";
    case OpKind::abs: return call("ax_abs");
    case OpKind::exp: return call("ax_exp");
    case OpKind::log: return call("ax_log");
    case OpKind::sqrt: return call("ax_sqrt");
    case OpKind::rsqrt: return "(" + T + "(1) / ax_sqrt(" + a[0] + "))";
    case OpKind::tanh: return call("ax_tanh");
    case OpKind::sigmoid: return "(" + T + "(1) / (" + T + "(1) + ax_exp(-" + a[0] + ")))";
    case OpKind::relu: return call("ax_relu");
    case OpKind::silu: return "(" + a[0] + " / (" + T + "(1) + ax_exp(-" + a[0] + ")))";
    case OpKind::erf: return call("ax_erf");
    case OpKind::reciprocal: return "(" + T + "(1) / " + a[0] + ")";
    case OpKind::gelu:
      if (op.string_attr("approximate") == "tanh")
        return "(" + T + "(0.5) * " + a[0] + " * (" + T + "(1) + ax_tanh(" + T + "(0.7978845608028654) * (" + a[0] + " + " + T +
               "(0.044715) * " + a[0] + " * " + a[0] + " * " + a[0] + "))))";
      return "(" + T + "(0.5) * " + a[0] + " * (" + T + "(1) + ax_erf(" + a[0] + " * " + T + "(0.7071067811865476))))";
    case OpKind::add: return "(" + a[0] + " + " + a[1] + ")";
    case OpKind::sub: return "(" + a[0] + " - " + a[1] + ")";
    case OpKind::mul: return "(" + a[0] + " * " + a[1] + ")";
    case OpKind::div: return "(" + a[0] + " / " + a[1] + ")";
    case OpKind::pow: return "ax_pow(" + a[0] + ", " + a[1] + ")";
    case OpKind::maximum: return "ax_max(" + a[0] + ", " + a[1] + ")";
    case OpKind::minimum: return "ax_min(" + a[0] + ", " + a[1] + ")";
    case OpKind::eq: return "(" + a[0] + " == " + a[1] + ")";
    case OpKind::ne: return "(" + a[0] + " != " + a[1] + ")";
    case OpKind::lt: return "(" + a[0] + " < " + a[1] + ")";
    case OpKind::le: return "(" + a[0] + " <= " + a[1] + ")";
    case OpKind::gt: return "(" + a[0] + " > " + a[1] + ")";
    case OpKind::ge: return "(" + a[0] + " >= " + a[1] + ")";
    case OpKind::where: return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";
    case OpKind::relu_backward: return "(" + a[1] + " > " + T + "(0) ? " + a[0] + " : " + T + "(0))";
    case OpKind::gelu_backward: {
      const std::string &g = a[0], &x = a[1];
      if (op.string_attr("approximate") == "tanh") {
        std::string inner = T + "(0.7978845608028654) * (" + x + " + " + T + "(0.044715) * " + x + " * " + x + " * " + x + ")";
        std::string th = "ax_tanh(" + inner + ")";
        return "([&]() { " + T + " th = " + th + "; return " + g + " * (" + T + "(0.5) * (" + T + "(1) + th) + " + T + "(0.5) * " +
               x + " * (" + T + "(1) - th * th) * " + T + "(0.7978845608028654) * (" + T + "(1) + " + T + "(3 * 0.044715) * " + x +
               " * " + x + ")); }())";
      }
      return "(" + g + " * (" + T + "(0.5) * (" + T + "(1) + ax_erf(" + x + " * " + T + "(0.7071067811865476))) + " + x + " * ax_exp(" + T +
             "(-0.5) * " + x + " * " + x + ") * " + T + "(0.3989422804014327)))";
    }
    default:
      internal_error("no CUDA expression for ", op_name(op.kind));
  }
}

}  // namespace alloy::cuda
