#include "alloy/ir/shape_rules.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

namespace alloy::shape_rules {

// ---- small helpers shared by the shape rules -------------------------------------------

std::string shape_str(const ValueType& t) {
  std::string out(dtype_name(t.dtype));
  if (t.is_scalar) return out + " scalar";
  out += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) out += (i ? ", " : "") + t.shape[i].str(true);
  return out + "]";
}

const ValueType& type_of(const InferContext& ctx, int i) { return ctx.inputs[i]->type; }

void require_tensor(const InferContext& ctx, int i, std::string_view role) {
  if (type_of(ctx, i).is_scalar)
    ctx.fail(std::string(role) + " must be a tensor, found a scalar " + std::string(dtype_name(type_of(ctx, i).dtype)));
}

void require_floating(const InferContext& ctx, int i, std::string_view role) {
  DType t = type_of(ctx, i).dtype;
  if (!is_floating(t))
    ctx.fail(std::string(role) + " must be a floating-point tensor (f64 f32 f16 bf16), found " + shape_str(type_of(ctx, i)));
}

OperandTier tier_of(const ValueType& t) {
  if (t.is_scalar) return OperandTier::scalar;
  return t.shape.empty() ? OperandTier::zero_dim : OperandTier::tensor;
}

// PyTorch result_type over the inputs [first, last).
DType promoted(const InferContext& ctx, int first, int last) {
  std::vector<TypedOperand> operands;
  bool all_scalars = true;
  for (int i = first; i < last; ++i) {
    operands.push_back({type_of(ctx, i).dtype, tier_of(type_of(ctx, i))});
    all_scalars &= type_of(ctx, i).is_scalar;
  }
  if (all_scalars) {  // scalar arithmetic keeps the scalars' own widths
    DType t = operands[0].dtype;
    for (auto& o : operands) t = promote_types(t, o.dtype);
    return t;
  }
  return result_type(operands.data(), int(operands.size()));
}

// Two extents meeting on one axis: equal, or one is the constant 1. Different symbols are
// assumed equal and checked when sizes are bound.
Extent unify(const InferContext& ctx, const Extent& a, const Extent& b, const std::string& where) {
  if (a == b || b.is_one()) return a;
  if (a.is_one()) return b;
  if (a.is_constant() && b.is_constant())
    ctx.fail(where + ": sizes " + a.str(true) + " and " + b.str(true) + " do not match and neither is 1");
  ctx.fusion.add_constraint({a, b, std::string(op_name(ctx.kind)) + (ctx.loc.known() ? " at " + ctx.loc.str() : "") + ": " + where});
  return a.is_constant() ? a : b.is_constant() ? b : a;
}

// Two extents that must be equal (no broadcasting): a contraction, cat's other axes, a norm's
// weight. Different symbols become a run-time constraint.
void require_equal(const InferContext& ctx, const Extent& a, const Extent& b, const std::string& where) {
  if (a == b) return;
  if (a.is_constant() && b.is_constant())
    ctx.fail(where + ": sizes " + a.str(true) + " and " + b.str(true) + " must be equal");
  ctx.fusion.add_constraint({a, b, std::string(op_name(ctx.kind)) + (ctx.loc.known() ? " at " + ctx.loc.str() : "") + ": " + where});
}

// An input axis broadcast onto an output axis: equal, or the input's size is 1.
void require_broadcastable(const InferContext& ctx, const Extent& in, const Extent& out, const std::string& where) {
  if (in.is_one() || in == out) return;
  require_equal(ctx, in, out, where);
}

// NumPy broadcasting (right-aligned) of all tensor inputs; scalars broadcast trivially.
std::vector<Extent> broadcast_all(const InferContext& ctx, int first, int last) {
  std::vector<Extent> out;
  for (int i = first; i < last; ++i) {
    const ValueType& t = type_of(ctx, i);
    if (t.is_scalar) continue;
    std::vector<Extent> shape = t.shape;
    if (shape.size() > out.size()) out.insert(out.begin(), shape.size() - out.size(), Extent());
    size_t offset = out.size() - shape.size();
    for (size_t k = 0; k < shape.size(); ++k)
      out[offset + k] = unify(ctx, out[offset + k], shape[k],
                              "broadcasting " + shape_str(t) + " (axis " + std::to_string(k) + ")");
  }
  return out;
}

bool all_scalar(const InferContext& ctx) {
  return std::all_of(ctx.inputs.begin(), ctx.inputs.end(), [](Value* v) { return v->is_scalar(); });
}

ValueType make(DType dtype, std::vector<Extent> shape, bool scalar = false) {
  ValueType t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.is_scalar = scalar;
  return t;
}

std::vector<int64_t> int_list(const InferContext& ctx, std::string_view name) {
  std::vector<int64_t> out;
  if (const Attr* a = ctx.attr(name))
    for (auto& item : a->list) out.push_back(item.i);
  return out;
}

std::vector<int> axes_list(const InferContext& ctx, std::string_view name, int rank) {
  std::vector<int> out;
  for (int64_t d : int_list(ctx, name)) {
    int axis = normalize_axis(d, rank, ctx, name);
    if (std::find(out.begin(), out.end(), axis) != out.end())
      ctx.fail("attribute '" + std::string(name) + "' names axis " + std::to_string(axis) + " twice");
    out.push_back(axis);
  }
  return out;
}

// An extent-list attribute: integers (>= -1 where allowed) and symbols.
std::vector<Extent> extents_attr(const InferContext& ctx, std::string_view name, bool allow_minus_one,
                                 int* minus_one_at = nullptr) {
  std::vector<Extent> out;
  if (minus_one_at) *minus_one_at = -1;
  const Attr* a = ctx.attr(name);
  for (size_t k = 0; a && k < a->list.size(); ++k) {
    const Attr& item = a->list[k];
    if (item.kind == Attr::Kind::symbol) {
      auto known = ctx.fusion.input_symbols();
      if (std::find(known.begin(), known.end(), item.s) == known.end())
        ctx.fail("attribute '" + std::string(name) + "' names the size '" + item.s + "', which no input declares");
      out.push_back(Extent::symbol(item.s));
    } else if (item.i == -1 && allow_minus_one) {
      if (minus_one_at && *minus_one_at >= 0) ctx.fail("attribute '" + std::string(name) + "' has more than one -1");
      if (minus_one_at) *minus_one_at = int(k);
      out.push_back(Extent::constant(-1));
    } else if (item.i < 0) {
      ctx.fail("attribute '" + std::string(name) + "' has a negative size " + std::to_string(item.i));
    } else {
      out.push_back(Extent::constant(item.i));
    }
  }
  return out;
}

Extent product(const std::vector<Extent>& shape) {
  Extent p;
  for (const Extent& e : shape) p = p * e;
  return p;
}

// ---- the shape rules -------------------------------------------------------------------

std::vector<ValueType> infer_unary(const InferContext& ctx) {
  const ValueType& x = type_of(ctx, 0);
  DType out = x.dtype;
  switch (ctx.kind) {
    case OpKind::neg:
      if (x.dtype == DType::boolean) ctx.fail("negation of a bool tensor is not supported; use eq(x, false)");
      break;
    case OpKind::abs: case OpKind::relu:
      break;
    default:  // transcendental ops compute in floating point; integers give the default float
      if (!is_floating(out)) out = DType::f32;
  }
  if (ctx.kind == OpKind::gelu) {
    const std::string& mode = ctx.attr("approximate")->s;
    if (mode != "none" && mode != "tanh") ctx.fail("approximate must be \"none\" or \"tanh\", found \"" + mode + "\"");
  }
  return {make(out, x.shape, x.is_scalar)};
}

bool is_comparison(OpKind k) {
  return k == OpKind::eq || k == OpKind::ne || k == OpKind::lt || k == OpKind::le || k == OpKind::gt || k == OpKind::ge;
}

// A scalar computed from literals alone (neg, abs, add, sub, mul and cast of literals and of such
// scalars): `sub(0, 3000000000)` is the literal -3000000000 in effect, and so is
// `cast(3000000000, dtype=i64)` (what Python's `define_scalar(3000000000, dtype=int64)` writes):
// a typed scalar is a wrapped scalar in PyTorch's result_type, so it meets an i32 tensor as i32
// and is held to the same rule as the bare literal (torch.tensor(3000000000) as a 0-dim i64
// tensor would wrap silently instead; Alloy refuses). Integers are held in a
// long double (exact through 2^64, past any dtype's range where it is not).
struct Constant {
  bool integer = false;
  long double value = 0;
};

// `c` cast to `dtype` as the run casts it: to an integer dtype, floats truncate and integers wrap
// (an explicit cast asks for that); to a floating dtype, a float; to bool, not a constant.
std::optional<Constant> cast_constant(std::optional<Constant> c, DType dtype) {
  if (!c || dtype == DType::boolean) return std::nullopt;
  if (is_floating(dtype)) return Constant{false, c->value};
  long double lo = dtype == DType::i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  long double hi = dtype == DType::i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  long double whole = std::trunc(c->value);
  if (!c->integer && (whole < lo || whole > hi)) return std::nullopt;  // undefined in C++: no constant to state
  if (whole < lo || whole > hi) {
    if (std::fabs(whole) >= 9.2e18L) return std::nullopt;
    whole = dtype == DType::i32 ? (long double)int32_t(uint32_t(int64_t(whole))) : whole;
  }
  return Constant{true, whole};
}

std::optional<Constant> constant_of(const Value* v, int depth = 0) {
  if (v->literal) {
    if (v->literal->kind == Literal::Kind::boolean) return std::nullopt;
    bool integer = v->literal->kind == Literal::Kind::integer;
    return Constant{integer, integer ? (long double)v->literal->i : (long double)v->literal->f};
  }
  const Op* op = v->producer;
  if (!op || !v->is_scalar() || depth > 64) return std::nullopt;
  if (op->kind == OpKind::cast) return cast_constant(constant_of(op->inputs[0], depth + 1), v->dtype());
  std::vector<Constant> in;
  for (const Value* x : op->inputs) {
    auto c = constant_of(x, depth + 1);
    if (!c) return std::nullopt;
    in.push_back(*c);
  }
  bool integer = std::all_of(in.begin(), in.end(), [](const Constant& c) { return c.integer; });
  long double value;
  switch (op->kind) {
    case OpKind::neg: value = -in[0].value; break;
    case OpKind::abs: value = std::fabs(in[0].value); break;
    case OpKind::add: value = in[0].value + in[1].value; break;
    case OpKind::sub: value = in[0].value - in[1].value; break;
    case OpKind::mul: value = in[0].value * in[1].value; break;
    default: return std::nullopt;
  }
  return Constant{integer, integer ? value : (long double)double(value)};  // reals computed as doubles, as the run does
}

std::string constant_text(const Constant& c) {
  if (c.integer && std::fabs(c.value) < 9e18L) return std::to_string((long long)c.value);  // exact: as written
  char text[32];
  auto [end, ec] = std::to_chars(text, text + sizeof text, double(c.value));  // the shortest form that reads back
  return ec == std::errc() ? std::string(text, end) : "a number";
}

// A literal (or a scalar computed from literals alone) meets integer tensors in their dtype: one
// the dtype cannot hold would wrap, so it is refused (as PyTorch refuses `int32_tensor +
// 99999999999` and NumPy `uint8(1) + 300`); so is an integer raised to a negative power, which has
// no integer result. A float literal past a floating dtype's range is not refused: it rounds to
// inf as NumPy and PyTorch's binary ops round it (`where(mask, x, -1e300)` masks with -inf).
void check_literals_fit(const InferContext& ctx, size_t first, size_t last, DType operand_dtype) {
  if (!is_integral(operand_dtype) || operand_dtype == DType::boolean) return;
  long double lo = operand_dtype == DType::i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  long double hi = operand_dtype == DType::i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  for (size_t i = first; i < last && i < ctx.inputs.size(); ++i) {
    const Value* v = ctx.inputs[i];
    auto c = constant_of(v);
    if (!c || !c->integer) continue;  // a float literal promotes the result instead (PyTorch's rule)
    std::string what = v->literal ? "the literal " + constant_text(*c) : "'" + v->name + "' (" + constant_text(*c) + ", computed from literals)";
    std::string dtype(dtype_name(operand_dtype));
    if (c->value < lo || c->value > hi)
      ctx.fail(what + " does not fit " + dtype + ", the dtype of the other operand (expected " + std::to_string((long long)lo) +
               " to " + std::to_string((long long)hi) + ")");
    if (ctx.kind == OpKind::pow && i == 1 && c->value < 0)
      ctx.fail("an integer (" + dtype + ") raised to the negative power " + constant_text(*c) +
               " has no integer result; cast the base to a floating dtype first");
  }
}

std::vector<ValueType> infer_binary(const InferContext& ctx) {
  DType t = promoted(ctx, 0, 2);
  check_literals_fit(ctx, 0, 2, t);
  if (is_comparison(ctx.kind)) t = DType::boolean;
  else if (ctx.kind == OpKind::div && !is_floating(t)) t = all_scalar(ctx) ? DType::f64 : DType::f32;
  else if (t == DType::boolean && (ctx.kind == OpKind::sub || ctx.kind == OpKind::pow))
    ctx.fail(std::string(op_name(ctx.kind)) + " of two bool values is not supported");
  return {make(t, broadcast_all(ctx, 0, 2), all_scalar(ctx))};
}

std::vector<ValueType> infer_where(const InferContext& ctx) {
  if (type_of(ctx, 0).dtype != DType::boolean)
    ctx.fail("condition must be bool, found " + shape_str(type_of(ctx, 0)));
  DType t = promoted(ctx, 1, 3);
  check_literals_fit(ctx, 1, 3, t);
  // Two scalar branches with a tensor condition make a tensor of PyTorch's default dtype for
  // Python numbers: torch.where(c, 1.5, 0) is f32 (integers stay i64, bools bool).
  if (type_of(ctx, 1).is_scalar && type_of(ctx, 2).is_scalar && !type_of(ctx, 0).is_scalar && t == DType::f64) t = DType::f32;
  return {make(t, broadcast_all(ctx, 0, 3), all_scalar(ctx))};
}

std::vector<ValueType> infer_cast(const InferContext& ctx) {
  const ValueType& x = type_of(ctx, 0);
  return {make(ctx.attr("dtype")->dt, x.shape, x.is_scalar)};
}

std::vector<ValueType> infer_activation_backward(const InferContext& ctx) {
  if (ctx.kind == OpKind::gelu_backward) {
    const std::string& mode = ctx.attr("approximate")->s;
    if (mode != "none" && mode != "tanh") ctx.fail("approximate must be \"none\" or \"tanh\", found \"" + mode + "\"");
  }
  require_tensor(ctx, 0, "grad");
  DType t = promoted(ctx, 0, 2);
  if (ctx.kind == OpKind::gelu_backward && !is_floating(t)) t = DType::f32;
  return {make(t, broadcast_all(ctx, 0, 2))};
}

// ---- ReLU bit masks -------------------------------------------------------------------------
// A mask packs the last axis (N elements) into ceil(N / 32) i32 words: bit j of word k is
// element 32k + j (x > 0), bits past N are 0 (cuBLASLt's RELU_AUX layout for a row-major result).

constexpr int64_t kMaskBits = 32;

// ceil(n / 32): a constant, n / 32 where that is a whole monomial (n = 128 * K), else a derived size.
Extent mask_words(const InferContext& ctx, const Extent& n) {
  if (auto c = n.constant_value()) return Extent::constant((*c + kMaskBits - 1) / kMaskBits);
  Extent exact = n / Extent::constant(kMaskBits);
  if (exact.denominator() == 1) return exact;
  return ctx.fusion.define_ceil_div(n, kMaskBits);
}

void require_mask_operand(const InferContext& ctx, int i, std::string_view role) {
  require_tensor(ctx, i, role);
  const ValueType& t = type_of(ctx, i);
  if (t.rank() < 1) ctx.fail(std::string(role) + " must have at least 1 dimension, found " + shape_str(t));
  if (t.dtype == DType::boolean) ctx.fail(std::string(role) + " must be a numeric tensor, found " + shape_str(t));
}

std::vector<ValueType> infer_relu_mask(const InferContext& ctx) {
  require_mask_operand(ctx, 0, "input");
  std::vector<Extent> shape = type_of(ctx, 0).shape;
  shape.back() = mask_words(ctx, shape.back());
  return {make(DType::i32, shape)};
}

std::vector<ValueType> infer_relu_backward_mask(const InferContext& ctx) {
  require_mask_operand(ctx, 0, "grad");
  require_tensor(ctx, 1, "mask");
  const ValueType &grad = type_of(ctx, 0), &mask = type_of(ctx, 1);
  std::vector<Extent> expected = grad.shape;
  expected.back() = mask_words(ctx, grad.shape.back());
  std::string want = "i32[";
  for (size_t k = 0; k < expected.size(); ++k) want += (k ? ", " : "") + expected[k].str(true);
  want += "] (relu_mask of a tensor of grad's shape: the last axis " + grad.shape.back().str(true) + " packed 32 to a word)";
  if (mask.dtype != DType::i32) ctx.fail("mask is " + shape_str(mask) + "; expected " + want);
  if (mask.rank() != grad.rank()) ctx.fail("mask is " + shape_str(mask) + "; expected " + want);
  for (int k = 0; k < grad.rank(); ++k) {
    const Extent &m = mask.shape[k], &e = expected[k];
    if (m.is_constant() && e.is_constant() && !(m == e)) ctx.fail("mask is " + shape_str(mask) + "; expected " + want);
    require_equal(ctx, m, e, k + 1 == grad.rank() ? "mask words of the last axis" : "mask axis " + std::to_string(k));
  }
  return {make(grad.dtype, grad.shape)};
}

// Reduced shape; `dims` empty or absent reduces every axis (torch.sum(x, dim=[]) does too).
std::vector<Extent> reduced_shape(const InferContext& ctx, const ValueType& x) {
  std::vector<int> axes = axes_list(ctx, "dims", x.rank());
  bool keepdim = ctx.attr("keepdim")->b;
  std::vector<Extent> out;
  for (int i = 0; i < x.rank(); ++i) {
    bool reduced = axes.empty() || std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) out.push_back(x.shape[i]);
    else if (keepdim) out.push_back(Extent());
  }
  return out;
}

std::vector<ValueType> infer_reduction(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  DType t = x.dtype;
  if (ctx.kind == OpKind::sum && !is_floating(t)) t = DType::i64;  // torch.sum promotes integers
  if (ctx.kind == OpKind::mean || ctx.kind == OpKind::var_mean) require_floating(ctx, 0, "input");
  std::vector<Extent> shape = reduced_shape(ctx, x);
  if (ctx.kind == OpKind::var_mean) return {make(t, shape), make(t, shape)};
  return {make(t, shape)};
}

std::vector<ValueType> infer_broadcast_in_dim(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  std::vector<Extent> shape = extents_attr(ctx, "shape", false);
  std::vector<int64_t> dims = int_list(ctx, "broadcast_dims");
  if (int(dims.size()) != x.rank())
    ctx.fail("broadcast_dims has " + std::to_string(dims.size()) + " entries; expected one per input axis (" +
             std::to_string(x.rank()) + ") for input " + shape_str(x));
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= int64_t(shape.size()))
      ctx.fail("broadcast_dims[" + std::to_string(i) + "] = " + std::to_string(dims[i]) + " is out of range for an output of rank " +
               std::to_string(shape.size()));
    if (i > 0 && dims[i] <= dims[i - 1]) ctx.fail("broadcast_dims must be strictly increasing");
    const Extent& in = x.shape[i];
    require_broadcastable(ctx, in, shape[dims[i]], "input axis " + std::to_string(i) + " onto output axis " + std::to_string(dims[i]));
  }
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_expand(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  std::vector<Extent> shape = extents_attr(ctx, "shape", true);
  if (shape.size() < x.shape.size())
    ctx.fail("shape has " + std::to_string(shape.size()) + " entries, fewer than the input's rank " + std::to_string(x.rank()));
  size_t offset = shape.size() - x.shape.size();
  for (size_t k = 0; k < shape.size(); ++k) {
    bool keep = shape[k].constant_value() == -1;
    if (k < offset) {
      if (keep) ctx.fail("-1 is not allowed for a new leading axis (" + std::to_string(k) + ")");
      continue;
    }
    const Extent& in = x.shape[k - offset];
    if (keep) shape[k] = in;
    else require_broadcastable(ctx, in, shape[k], "expanding axis " + std::to_string(k - offset));
  }
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_reshape(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  int minus_one = -1;
  std::vector<Extent> shape = extents_attr(ctx, "shape", true, &minus_one);
  Extent in_total = product(x.shape);
  if (minus_one >= 0) {
    Extent known;
    for (size_t k = 0; k < shape.size(); ++k)
      if (int(k) != minus_one) known = known * shape[k];
    if (known.constant_value() == 0) ctx.fail("cannot infer -1 when another size is 0");
    shape[minus_one] = in_total / known;
  }
  for (auto& e : shape)
    if (!e.is_constant() && e.powers().empty())  // a non-integral constant such as 3/2
      ctx.fail("cannot reshape " + shape_str(x) + ": " + in_total.str(true) + " elements do not fit the requested shape");
  Extent out_total = product(shape);
  if (!(out_total == in_total)) {
    if (in_total.is_constant() && out_total.is_constant())
      ctx.fail("cannot reshape " + shape_str(x) + " (" + in_total.str(true) + " elements) into " +
               std::to_string(shape.size()) + " axes of " + out_total.str(true) + " elements");
    require_equal(ctx, in_total, out_total, "element count");
  }
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_permute(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  std::vector<int> dims = axes_list(ctx, "dims", x.rank());
  if (int(dims.size()) != x.rank())
    ctx.fail("dims has " + std::to_string(dims.size()) + " entries; expected a permutation of all " +
             std::to_string(x.rank()) + " axes of " + shape_str(x));
  std::vector<Extent> shape;
  for (int d : dims) shape.push_back(x.shape[d]);
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_slice(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  std::vector<int64_t> starts = int_list(ctx, "starts"), ends = int_list(ctx, "ends"), steps = int_list(ctx, "steps");
  if (starts.size() != ends.size())
    ctx.fail("starts has " + std::to_string(starts.size()) + " entries and ends " + std::to_string(ends.size()) + "; expected the same");
  if (!steps.empty() && steps.size() != starts.size())
    ctx.fail("steps has " + std::to_string(steps.size()) + " entries; expected " + std::to_string(starts.size()));
  if (int(starts.size()) > x.rank())
    ctx.fail("starts has " + std::to_string(starts.size()) + " entries, more than the input's rank " + std::to_string(x.rank()));
  std::vector<Extent> shape = x.shape;
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t step = steps.empty() ? 1 : steps[k];
    if (step <= 0) ctx.fail("steps[" + std::to_string(k) + "] = " + std::to_string(step) + "; expected a positive step");
    if (auto n = x.shape[k].constant_value()) {
      shape[k] = Extent::constant(slice_length(*n, starts[k], ends[k], step));
    } else if (starts[k] == 0 && ends[k] >= std::numeric_limits<int32_t>::max() && step == 1) {
      // the whole of a symbolic axis
    } else {
      // Python slicing of a size known when the inputs are bound: a derived size
      shape[k] = ctx.fusion.define_slice(x.shape[k], starts[k], ends[k], step);
    }
  }
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_squeeze(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  std::vector<int> axes = axes_list(ctx, "dims", x.rank());
  std::vector<Extent> shape;
  for (int i = 0; i < x.rank(); ++i) {
    bool named = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (axes.empty()) named = x.shape[i].is_one();
    if (!named) { shape.push_back(x.shape[i]); continue; }
    if (x.shape[i].is_one()) continue;
    if (x.shape[i].is_constant()) { shape.push_back(x.shape[i]); continue; }  // torch.squeeze: a no-op
    ctx.fail("axis " + std::to_string(i) + " has the symbolic size " + x.shape[i].str(true) +
             "; squeeze needs a size known to be 1");
  }
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_unsqueeze(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  int axis = normalize_axis(ctx.attr("dim")->i, x.rank() + 1, ctx, "dim");
  std::vector<Extent> shape = x.shape;
  shape.insert(shape.begin() + axis, Extent());
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_cat(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) require_tensor(ctx, int(i), "every input");
  const ValueType& first = type_of(ctx, 0);
  if (first.rank() == 0) ctx.fail("cannot concatenate 0-dim tensors");
  int axis = normalize_axis(ctx.attr("dim")->i, first.rank(), ctx, "dim");
  std::vector<Extent> shape = first.shape;
  std::vector<Extent> terms{first.shape[axis]};
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    const ValueType& t = type_of(ctx, int(i));
    if (t.rank() != first.rank())
      ctx.fail("input " + std::to_string(i) + " is " + shape_str(t) + "; expected rank " + std::to_string(first.rank()) +
               " like input 0 (" + shape_str(first) + ")");
    for (int k = 0; k < first.rank(); ++k)
      if (k != axis && !(t.shape[k] == shape[k])) {
        if (t.shape[k].is_constant() && shape[k].is_constant())
          ctx.fail("input " + std::to_string(i) + " is " + shape_str(t) + "; axis " + std::to_string(k) + " must be " +
                   shape[k].str(true) + " like input 0");
        require_equal(ctx, shape[k], t.shape[k], "axis " + std::to_string(k));
      }
    terms.push_back(t.shape[axis]);
  }
  // The concatenated size is a sum; it stays a monomial when the terms share their symbols.
  Extent unit = terms[0];
  int64_t coefficient_sum = 0;
  bool same_symbols = true;
  for (const Extent& e : terms) {
    if (e.powers() != terms[0].powers()) { same_symbols = false; break; }
  }
  if (same_symbols) {
    Extent symbols_only;
    for (auto& [name, p] : terms[0].powers())
      for (int i = 0; i < p; ++i) symbols_only = symbols_only * Extent::symbol(name);
    for (const Extent& e : terms) {
      auto c = (e / symbols_only).constant_value();
      if (!c) { same_symbols = false; break; }
      coefficient_sum += *c;
    }
    if (same_symbols) shape[axis] = Extent::constant(coefficient_sum) * symbols_only;
  }
  if (!same_symbols) shape[axis] = ctx.fusion.define_sum(terms);
  std::vector<TypedOperand> operands;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) operands.push_back({type_of(ctx, int(i)).dtype, OperandTier::tensor});
  return {make(result_type(operands.data(), int(operands.size())), shape)};
}

void require_same_dtype(const InferContext& ctx) {
  for (size_t i = 1; i < ctx.inputs.size(); ++i)
    if (type_of(ctx, int(i)).dtype != type_of(ctx, 0).dtype)
      ctx.fail("all operands must have one dtype; found " + shape_str(type_of(ctx, 0)) + " and " + shape_str(type_of(ctx, int(i))));
  if (type_of(ctx, 0).dtype == DType::boolean) ctx.fail("bool operands are not supported");
}

std::vector<ValueType> infer_matmul(const InferContext& ctx) {
  require_tensor(ctx, 0, "a");
  require_tensor(ctx, 1, "b");
  require_same_dtype(ctx);
  std::vector<Extent> a = type_of(ctx, 0).shape, b = type_of(ctx, 1).shape;
  if (a.empty() || b.empty()) ctx.fail("both operands need at least 1 dimension; found " + shape_str(type_of(ctx, 0)) + " and " + shape_str(type_of(ctx, 1)));
  bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), Extent());
  if (b_vector) b.push_back(Extent());
  const Extent& ka = a[a.size() - 1];
  const Extent& kb = b[b.size() - 2];
  if (!(ka == kb)) {
    if (ka.is_constant() && kb.is_constant())
      ctx.fail("contraction sizes differ: a is " + shape_str(type_of(ctx, 0)) + ", b is " + shape_str(type_of(ctx, 1)) +
               "; expected a's last axis to equal b's " + (b_vector ? "only" : "second-to-last") + " axis");
    require_equal(ctx, ka, kb, "contraction axis");
  }
  // batch axes broadcast like NumPy
  std::vector<Extent> batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  size_t rank = std::max(batch_a.size(), batch_b.size());
  batch_a.insert(batch_a.begin(), rank - batch_a.size(), Extent());
  batch_b.insert(batch_b.begin(), rank - batch_b.size(), Extent());
  std::vector<Extent> shape;
  for (size_t i = 0; i < rank; ++i) shape.push_back(unify(ctx, batch_a[i], batch_b[i], "batch axis " + std::to_string(i)));
  if (!a_vector) shape.push_back(a[a.size() - 2]);
  if (!b_vector) shape.push_back(b.back());
  return {make(type_of(ctx, 0).dtype, shape)};
}

std::vector<ValueType> infer_linear(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) require_tensor(ctx, int(i), i == 0 ? "x" : i == 1 ? "weight" : "bias");
  require_same_dtype(ctx);
  const ValueType &x = type_of(ctx, 0), &w = type_of(ctx, 1);
  if (x.rank() < 1) ctx.fail("x must have at least 1 dimension, found " + shape_str(x));
  if (w.rank() != 1 && w.rank() != 2)
    ctx.fail("weight is " + shape_str(w) + "; expected 2 dims [out_features, in_features] (or 1)");
  const Extent& in = x.shape.back();
  const Extent& w_in = w.shape.back();
  if (!(in == w_in)) {
    if (in.is_constant() && w_in.is_constant())
      ctx.fail("x is " + shape_str(x) + " and weight is " + shape_str(w) + "; expected weight's last axis (in_features) to be " +
               in.str(true));
    require_equal(ctx, in, w_in, "in_features");
  }
  std::vector<Extent> shape(x.shape.begin(), x.shape.end() - 1);
  if (w.rank() == 2) shape.push_back(w.shape[0]);
  if (ctx.inputs.size() == 3) {
    const ValueType& bias = type_of(ctx, 2);
    Extent out_features = w.rank() == 2 ? w.shape[0] : Extent();
    if (bias.rank() > 1 || (bias.rank() == 1 && !bias.shape[0].is_one() && !(bias.shape[0] == out_features))) {
      if (bias.rank() == 1 && !bias.shape[0].is_constant())
        unify(ctx, bias.shape[0], out_features, "bias");
      else
        ctx.fail("bias is " + shape_str(bias) + "; expected [" + out_features.str(true) + "] (one per output feature)");
    }
  }
  return {make(x.dtype, shape)};
}

std::vector<ValueType> infer_softmax(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  require_floating(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  normalize_axis(ctx.attr("dim")->i, std::max(1, x.rank()), ctx, "dim");
  return {make(x.dtype, x.shape)};
}

std::vector<ValueType> infer_norm(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) require_tensor(ctx, int(i), i == 0 ? "input" : i == 1 ? "weight" : "bias");
  require_floating(ctx, 0, "input");
  const ValueType& x = type_of(ctx, 0);
  int64_t k = ctx.attr("normalized_ndim")->i;
  if (k < 1 || k > x.rank())
    ctx.fail("normalized_ndim = " + std::to_string(k) + " is out of range for input " + shape_str(x) + "; expected 1 to " +
             std::to_string(x.rank()));
  std::vector<Extent> normalized(x.shape.end() - k, x.shape.end());
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    const ValueType& p = type_of(ctx, int(i));
    std::string role = i == 1 ? "weight" : "bias";
    bool mismatch = p.shape.size() != normalized.size();
    for (size_t j = 0; !mismatch && j < normalized.size(); ++j)
      mismatch = !(p.shape[j] == normalized[j]) && p.shape[j].is_constant() && normalized[j].is_constant();
    if (mismatch) {
      std::string expected;
      for (size_t j = 0; j < normalized.size(); ++j) expected += (j ? ", " : "") + normalized[j].str(true);
      ctx.fail(role + " is " + shape_str(p) + "; expected the normalized shape [" + expected + "]");
    }
    for (size_t j = 0; j < normalized.size(); ++j)
      require_equal(ctx, p.shape[j], normalized[j], role + " axis " + std::to_string(j));
  }
  if (ctx.attr("eps")->f < 0) ctx.fail("eps must not be negative");
  return {make(x.dtype, x.shape)};
}

std::vector<ValueType> infer_identity(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  return {type_of(ctx, 0)};
}

// A resharding op: the same global value with another sharding. Axes are checked against the
// rank; the reduction against the ones a partial value can hold.
std::vector<ValueType> infer_resharding(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  ValueType t = type_of(ctx, 0);
  for (const char* name : {"axis", "from_axis"})
    if (const Attr* a = ctx.attr(name)) normalize_axis(a->i, t.rank(), ctx, name);
  if (const Attr* r = ctx.attr("reduce"); r && r->s != "sum" && r->s != "max" && r->s != "min")
    ctx.fail("reduce must be \"sum\", \"max\" or \"min\", found \"" + r->s + "\"");
  return {t};
}

// ---- indexing ------------------------------------------------------------------------------

// gather(x, index, dim=k), torch.gather: index is an integer tensor of x's rank and the result has
// index's shape and x's dtype. Off axis k, index may be shorter than x (torch reads x's leading
// part), never longer; sizes known only when bound, and the index values, are checked at run time.
std::vector<ValueType> infer_gather(const InferContext& ctx) {
  require_tensor(ctx, 0, "input");
  require_tensor(ctx, 1, "index");
  const ValueType &x = type_of(ctx, 0), &index = type_of(ctx, 1);
  if (index.dtype != DType::i64 && index.dtype != DType::i32)
    ctx.fail("index must be an integer tensor (i64 or i32), found " + shape_str(index));
  if (index.rank() != x.rank())
    ctx.fail("index is " + shape_str(index) + " and input is " + shape_str(x) + "; expected an index of the input's rank (" +
             std::to_string(x.rank()) + ")");
  int axis = normalize_axis(ctx.attr("dim")->i, std::max(1, x.rank()), ctx, "dim");
  for (int d = 0; d < x.rank(); ++d) {
    auto n = index.shape[d].constant_value(), m = x.shape[d].constant_value();
    if (d != axis && n && m && *n > *m)
      ctx.fail("index is " + shape_str(index) + " and input is " + shape_str(x) + "; index axis " + std::to_string(d) + " (size " +
               std::to_string(*n) + ") must not be longer than the input's (" + std::to_string(*m) + ") off the gathered axis " +
               std::to_string(axis));
  }
  return {make(x.dtype, index.shape)};
}

// iota(length=N, dtype=i64): 0, 1, ..., N-1, as torch.arange(N, dtype=...); N an integer or a size
// symbol an input declares.
std::vector<ValueType> infer_iota(const InferContext& ctx) {
  const Attr& length = *ctx.attr("length");
  DType t = ctx.attr("dtype")->dt;
  if (t == DType::boolean) ctx.fail("dtype must be i64, i32 or a floating dtype (as torch.arange takes), found bool");
  if (length.kind == Attr::Kind::symbol) {
    auto known = ctx.fusion.input_symbols();
    if (std::find(known.begin(), known.end(), length.s) == known.end())
      ctx.fail("length names the size '" + length.s + "', which no input declares");
    return {make(t, {Extent::symbol(length.s)})};
  }
  if (length.i < 0) ctx.fail("length must not be negative, found " + std::to_string(length.i));
  if (t == DType::i32 && length.i - 1 > std::numeric_limits<int32_t>::max())
    ctx.fail("length " + std::to_string(length.i) + " counts past i32's largest value; use dtype=i64");
  return {make(t, {Extent::constant(length.i)})};
}

}  // namespace alloy::shape_rules
