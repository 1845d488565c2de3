// Reference kernels of the pointwise ops (unary, binary, where, cast, gelu_backward,
// relu_backward). Every input is broadcast (NumPy, right-aligned) to the output shape.
//
// Numerics, following PyTorch:
// - Floating results compute in double from operands first rounded to the computation dtype
//   (the output dtype; f32 for a rank-0 operand when the output is bf16/f16, as PyTorch reads a
//   CPU scalar at "opmath" precision), then round once to the output dtype.
// - Integer and bool results compute exactly in int64 and wrap to the output width.
// - Comparisons compare in the promoted input dtype (operands rounded to it).
// - pow of integers is an integer power; a negative exponent gives 1 for base 1, +-1 for base -1
//   and 0 otherwise (PyTorch's integer pow of a tensor exponent).
// - maximum/minimum propagate NaN; relu(NaN) is NaN; cast float->int truncates toward zero and
//   gives 0 for NaN and inf; cast to bool is x != 0 (NaN -> true).
#include <cmath>
#include <numbers>

#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"

namespace alloy::reference {
namespace {

using Doubles = std::vector<double>;
using Ints = std::vector<int64_t>;

constexpr double kSqrt2 = std::numbers::sqrt2;
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

// The dtype in which PyTorch computes operand `k` of `op` for an output of `compute` dtype.
DType operand_dtype(const Op& op, int k, DType compute) {
  if ((compute == DType::bf16 || compute == DType::f16) && op.inputs[k]->rank() == 0) return DType::f32;
  return compute;
}

// Operand k broadcast to `shape`, as doubles rounded to `round` (a floating dtype).
Doubles load_operand(const Op& op, const std::vector<Tensor>& in, int k, const Shape& shape, DType round) {
  Doubles v = load_doubles(in[k], shape, broadcast_strides(in[k], shape, op, k));
  if (round != DType::f64 && in[k].dtype() != round)
    for (double& x : v) x = round_to(round, x);
  return v;
}

Ints load_operand_ints(const Op& op, const std::vector<Tensor>& in, int k, const Shape& shape) {
  return load_ints(in[k], shape, broadcast_strides(in[k], shape, op, k));
}

template <class T, class F>
std::vector<T> map1(const std::vector<T>& a, F f) {
  std::vector<T> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = f(a[i]);
  return out;
}

template <class R, class T, class F>
std::vector<R> map2(const std::vector<T>& a, const std::vector<T>& b, F f) {
  std::vector<R> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = f(a[i], b[i]);
  return out;
}

Tensor finish(const Op& op, const Shape& shape, const Doubles& values) {
  Tensor out = Tensor::empty(op.outputs[0]->dtype(), shape);
  store_doubles(out, values.data());
  return out;
}

Tensor finish(const Op& op, const Shape& shape, const Ints& values) {
  Tensor out = Tensor::empty(op.outputs[0]->dtype(), shape);
  store_ints(out, values.data());
  return out;
}

// Integer arithmetic that wraps instead of overflowing (two's complement, like the hardware).
int64_t wrap_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
int64_t wrap_sub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }

int64_t integer_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent % 2 == 0) ? 1 : -1;
    return 0;
  }
  uint64_t result = 1, b = uint64_t(base);
  for (uint64_t e = uint64_t(exponent); e; e >>= 1, b *= b)
    if (e & 1) result *= b;
  return int64_t(result);
}

double nan_max(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b); }

double gelu_exact(double x) { return 0.5 * x * (1.0 + std::erf(x / kSqrt2)); }
double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x))); }

// d gelu / dx, as PyTorch's GeluBackward computes it for each mode.
double gelu_exact_derivative(double x) {
  double cdf = 0.5 * (1.0 + std::erf(x / kSqrt2));
  double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
  return cdf + x * pdf;
}
double gelu_tanh_derivative(double x) {
  double inner = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  double t = std::tanh(inner);
  double left = 0.5 * x, right = 1.0 + t;
  double right_derivative = left * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
  return 0.5 * right + right_derivative;
}

bool tanh_mode(const Op& op) { return op.string_attr("approximate") == "tanh"; }

Ints unary_ints(const Op& op, const Ints& x) {
  switch (op.kind) {
    case OpKind::neg: return map1(x, [](int64_t v) { return wrap_sub(0, v); });
    case OpKind::abs: return map1(x, [](int64_t v) { return v < 0 ? wrap_sub(0, v) : v; });
    case OpKind::relu: return map1(x, [](int64_t v) { return v > 0 ? v : int64_t(0); });
    default: internal_error(op_name(op.kind), " has an integer result");
  }
}

Doubles unary_doubles(const Op& op, const Doubles& x) {
  switch (op.kind) {
    case OpKind::neg: return map1(x, [](double v) { return -v; });
    case OpKind::abs: return map1(x, [](double v) { return std::fabs(v); });
    case OpKind::exp: return map1(x, [](double v) { return std::exp(v); });
    case OpKind::log: return map1(x, [](double v) { return std::log(v); });
    case OpKind::sqrt: return map1(x, [](double v) { return std::sqrt(v); });
    case OpKind::rsqrt: return map1(x, [](double v) { return 1.0 / std::sqrt(v); });
    case OpKind::tanh: return map1(x, [](double v) { return std::tanh(v); });
    case OpKind::sigmoid: return map1(x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
    case OpKind::relu: return map1(x, [](double v) { return std::isnan(v) ? v : v > 0 ? v : 0.0; });
    case OpKind::silu: return map1(x, [](double v) { return v / (1.0 + std::exp(-v)); });
    case OpKind::erf: return map1(x, [](double v) { return std::erf(v); });
    case OpKind::reciprocal: return map1(x, [](double v) { return 1.0 / v; });
    case OpKind::gelu: return tanh_mode(op) ? map1(x, gelu_tanh) : map1(x, gelu_exact);
    default: internal_error(op_name(op.kind), " is not a unary op");
  }
}

Ints arithmetic_ints(const Op& op, const Ints& a, const Ints& b) {
  switch (op.kind) {
    case OpKind::add: return map2<int64_t>(a, b, wrap_add);
    case OpKind::sub: return map2<int64_t>(a, b, wrap_sub);
    case OpKind::mul: return map2<int64_t>(a, b, wrap_mul);
    case OpKind::pow: return map2<int64_t>(a, b, integer_pow);
    case OpKind::maximum: return map2<int64_t>(a, b, [](int64_t x, int64_t y) { return std::max(x, y); });
    case OpKind::minimum: return map2<int64_t>(a, b, [](int64_t x, int64_t y) { return std::min(x, y); });
    default: internal_error(op_name(op.kind), " has no integer form");
  }
}

Doubles arithmetic_doubles(const Op& op, const Doubles& a, const Doubles& b) {
  // (pow to a literal half: PyTorch's sqrt / rsqrt, literal_half_exponent)
  if (const double half = literal_half_exponent(op); half != 0)
    return map2<double>(a, b, [half](double x, double) { return half > 0 ? std::sqrt(x) : 1.0 / std::sqrt(x); });
  switch (op.kind) {
    case OpKind::add: return map2<double>(a, b, [](double x, double y) { return x + y; });
    case OpKind::sub: return map2<double>(a, b, [](double x, double y) { return x - y; });
    case OpKind::mul: return map2<double>(a, b, [](double x, double y) { return x * y; });
    case OpKind::div: return map2<double>(a, b, [](double x, double y) { return x / y; });
    case OpKind::pow: return map2<double>(a, b, [](double x, double y) { return std::pow(x, y); });
    case OpKind::maximum: return map2<double>(a, b, nan_max);
    case OpKind::minimum: return map2<double>(a, b, nan_min);
    default: internal_error(op_name(op.kind), " is not an arithmetic op");
  }
}

template <class T>
Ints compare(const Op& op, const std::vector<T>& a, const std::vector<T>& b) {
  switch (op.kind) {
    case OpKind::eq: return map2<int64_t>(a, b, [](T x, T y) { return int64_t(x == y); });
    case OpKind::ne: return map2<int64_t>(a, b, [](T x, T y) { return int64_t(x != y); });
    case OpKind::lt: return map2<int64_t>(a, b, [](T x, T y) { return int64_t(x < y); });
    case OpKind::le: return map2<int64_t>(a, b, [](T x, T y) { return int64_t(x <= y); });
    case OpKind::gt: return map2<int64_t>(a, b, [](T x, T y) { return int64_t(x > y); });
    case OpKind::ge: return map2<int64_t>(a, b, [](T x, T y) { return int64_t(x >= y); });
    default: internal_error(op_name(op.kind), " is not a comparison");
  }
}

bool is_comparison(OpKind k) {
  return k == OpKind::eq || k == OpKind::ne || k == OpKind::lt || k == OpKind::le || k == OpKind::gt || k == OpKind::ge;
}

// PyTorch's result_type of the op's inputs (declared dtypes; literals and scalar inputs are
// wrapped numbers, rank-0 tensors rank below tensors with dims).
DType promoted_input_dtype(const Op& op) {
  std::vector<TypedOperand> operands;
  bool all_scalars = true;
  for (const Value* v : op.inputs) {
    OperandTier tier = v->is_scalar() ? OperandTier::scalar : v->rank() == 0 ? OperandTier::zero_dim : OperandTier::tensor;
    operands.push_back({v->dtype(), tier});
    all_scalars &= v->is_scalar();
  }
  if (all_scalars) {
    DType t = operands[0].dtype;
    for (auto& o : operands) t = promote_types(t, o.dtype);
    return t;
  }
  return result_type(operands.data(), int(operands.size()));
}

}  // namespace

std::vector<Tensor> unary_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  DType result = op.outputs[0]->dtype();
  if (!is_floating(result)) return {finish(op, out[0], unary_ints(op, load_operand_ints(op, in, 0, out[0])))};
  Doubles x = load_operand(op, in, 0, out[0], operand_dtype(op, 0, result));
  return {finish(op, out[0], unary_doubles(op, x))};
}

std::vector<Tensor> binary_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Shape& shape = out[0];
  if (is_comparison(op.kind)) {
    DType common = promoted_input_dtype(op);
    if (!is_floating(common))
      return {finish(op, shape, compare(op, load_operand_ints(op, in, 0, shape), load_operand_ints(op, in, 1, shape)))};
    return {finish(op, shape, compare(op, load_operand(op, in, 0, shape, common), load_operand(op, in, 1, shape, common)))};
  }
  DType result = op.outputs[0]->dtype();
  if (!is_floating(result))
    return {finish(op, shape, arithmetic_ints(op, load_operand_ints(op, in, 0, shape), load_operand_ints(op, in, 1, shape)))};
  Doubles a = load_operand(op, in, 0, shape, operand_dtype(op, 0, result));
  Doubles b = load_operand(op, in, 1, shape, operand_dtype(op, 1, result));
  return {finish(op, shape, arithmetic_doubles(op, a, b))};
}

std::vector<Tensor> where_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Shape& shape = out[0];
  Ints cond = load_operand_ints(op, in, 0, shape);
  auto select = [&](const auto& a, const auto& b) {
    auto r = a;
    for (size_t i = 0; i < r.size(); ++i) r[i] = cond[i] ? a[i] : b[i];
    return r;
  };
  if (!is_floating(op.outputs[0]->dtype()))
    return {finish(op, shape, select(load_operand_ints(op, in, 1, shape), load_operand_ints(op, in, 2, shape)))};
  return {finish(op, shape, select(load_operand(op, in, 1, shape, DType::f64), load_operand(op, in, 2, shape, DType::f64)))};
}

std::vector<Tensor> cast_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  Tensor result = Tensor::empty(op.outputs[0]->dtype(), out[0]);
  Tensor source = in[0].as_strided(out[0], broadcast_strides(in[0], out[0], op, 0), in[0].offset());
  copy_into(source, result);
  return {result};
}

std::vector<Tensor> activation_backward_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Shape& shape = out[0];
  DType result = op.outputs[0]->dtype();
  if (op.kind == OpKind::relu_backward && !is_floating(result)) {
    Ints grad = load_operand_ints(op, in, 0, shape), x = load_operand_ints(op, in, 1, shape);
    return {finish(op, shape, map2<int64_t>(grad, x, [](int64_t g, int64_t v) { return v <= 0 ? int64_t(0) : g; }))};
  }
  Doubles grad = load_operand(op, in, 0, shape, operand_dtype(op, 0, result));
  Doubles x = load_operand(op, in, 1, shape, operand_dtype(op, 1, result));
  switch (op.kind) {
    case OpKind::relu_backward:
      return {finish(op, shape, map2<double>(grad, x, [](double g, double v) { return v <= 0 ? 0.0 : g; }))};
    case OpKind::gelu_backward: {
      bool tanh = tanh_mode(op);
      return {finish(op, shape, map2<double>(grad, x, [tanh](double g, double v) {
                       return g * (tanh ? gelu_tanh_derivative(v) : gelu_exact_derivative(v));
                     }))};
    }
    default: internal_error(op_name(op.kind), " is not an activation backward");
  }
}

}  // namespace alloy::reference
