#include "alloy/passes/decompose_composites.h"

#include <algorithm>

#include "alloy/passes/rebuild.h"

namespace alloy {
namespace {

NamedAttr attr(const char* name, Attr value) { return {name, std::move(value)}; }

// The f32 (or f64) working copy of x.
Value* upcast(Rebuilder& b, Value* x, const Value* old, const char* suffix) {
  if (x->dtype() == DType::f32 || x->dtype() == DType::f64) return x;
  return b.target.add_op1(OpKind::cast, {x}, {attr("dtype", Attr::dtype(DType::f32))}, {}, b.name_for(old, suffix));
}

// The composite's output: the result cast back to its dtype under its name (a cast to the same
// dtype costs nothing in a generated kernel), with the statement's annotations (a sharding the
// user wrote on it).
void finish(Rebuilder& b, const Op& op, Value* result) {
  const Value* old = op.outputs[0];
  b.map[old] = b.target.add_op1(OpKind::cast, {result}, {attr("dtype", Attr::dtype(old->dtype()))}, op.loc, old->name);
  b.map[old]->take_annotations_from(*old);
}

Attr trailing_dims(int rank, int64_t count) {
  std::vector<int64_t> dims;
  for (int64_t i = rank - count; i < rank; ++i) dims.push_back(i);
  return Attr::ints(dims);
}

void softmax(const Op& op, Rebuilder& b) {
  const Value* old = op.outputs[0];
  Value* x = upcast(b, b[op.inputs[0]], old, "xf");
  Attr dims = Attr::ints({op.int_attr("dim")});
  Fusion& f = b.target;
  Value* m = f.add_op1(OpKind::max, {x}, {attr("dims", dims), attr("keepdim", Attr::boolean(true))}, {}, b.name_for(old, "max"));
  Value* e = f.add_op1(OpKind::exp, {f.add_op1(OpKind::sub, {x, m}, {}, {}, b.name_for(old, "shifted"))}, {}, {}, b.name_for(old, "exp"));
  Value* s = f.add_op1(OpKind::sum, {e}, {attr("dims", dims), attr("keepdim", Attr::boolean(true))}, {}, b.name_for(old, "sum"));
  Value* y = f.add_op1(OpKind::div, {e, s}, {}, {}, b.name_for(old, "ratio"));
  finish(b, op, y);
}

void normalization(const Op& op, Rebuilder& b, bool layer_norm) {
  const Value* old = op.outputs[0];
  Fusion& f = b.target;
  Value* x = upcast(b, b[op.inputs[0]], old, "xf");
  Attr dims = trailing_dims(x->rank(), op.int_attr("normalized_ndim"));
  Value* eps = b.literal(op.real_attr("eps"));
  Value* y;
  if (layer_norm) {
    auto vm = f.add_op(OpKind::var_mean, {x}, {attr("dims", dims), attr("correction", Attr::real(0)), attr("keepdim", Attr::boolean(true))},
                       {}, {b.name_for(old, "var"), b.name_for(old, "mean")});
    Value* centered = f.add_op1(OpKind::sub, {x, vm[1]}, {}, {}, b.name_for(old, "centered"));
    Value* r = f.add_op1(OpKind::rsqrt, {f.add_op1(OpKind::add, {vm[0], eps}, {}, {}, b.name_for(old, "var_eps"))}, {}, {}, b.name_for(old, "rstd"));
    y = f.add_op1(OpKind::mul, {centered, r}, {}, {}, b.name_for(old, "normed"));
  } else {
    Value* sq = f.add_op1(OpKind::mul, {x, x}, {}, {}, b.name_for(old, "square"));
    Value* ms = f.add_op1(OpKind::mean, {sq}, {attr("dims", dims), attr("keepdim", Attr::boolean(true))}, {}, b.name_for(old, "meansq"));
    Value* r = f.add_op1(OpKind::rsqrt, {f.add_op1(OpKind::add, {ms, eps}, {}, {}, b.name_for(old, "ms_eps"))}, {}, {}, b.name_for(old, "rrms"));
    y = f.add_op1(OpKind::mul, {x, r}, {}, {}, b.name_for(old, "normed"));
  }
  if (op.inputs.size() > 1) y = f.add_op1(OpKind::mul, {y, upcast(b, b[op.inputs[1]], old, "wf")}, {}, {}, b.name_for(old, "scaled"));
  if (op.inputs.size() > 2) y = f.add_op1(OpKind::add, {y, upcast(b, b[op.inputs[2]], old, "bf")}, {}, {}, b.name_for(old, "shifted"));
  finish(b, op, y);
}

// pow(x, 0.5) / pow(x, -0.5): sqrt / rsqrt (literal_half_exponent). Whether it was rewritten.
bool pow_of_a_half(const Op& op, Rebuilder& b) {
  const double half = literal_half_exponent(op);
  if (half == 0) return false;
  const Value* old = op.outputs[0];
  b.map[old] = b.target.add_op1(half > 0 ? OpKind::sqrt : OpKind::rsqrt, {b[op.inputs[0]]}, {}, op.loc, old->name);
  b.map[old]->take_annotations_from(*old);
  return true;
}

// A reduction over axes of size 1 only (or of a 0-dim tensor) reduces nothing: sum, mean, max and
// min are the value itself (cast to the result's dtype, the axes squeezed unless kept), var_mean's
// mean too and its variance (x - x) / max(0, 1 - correction) (0, or NaN at a correction of 1 or
// more, and NaN for an infinite or NaN x, as PyTorch's). The generated kernels take reductions of
// at least one axis to reduce. Whether it was rewritten.
bool reduction_of_nothing(const Op& op, Rebuilder& b) {
  const Value* x = op.inputs[0];
  std::vector<int64_t> dims = op.attr("dims") ? op.ints_attr("dims") : std::vector<int64_t>{};
  if (dims.empty())
    for (int a = 0; a < x->rank(); ++a) dims.push_back(a);
  for (int64_t& d : dims) {
    if (d < 0) d += x->rank();
    if (d < 0 || d >= x->rank() || !x->shape()[size_t(d)].is_one()) return false;
  }
  Fusion& f = b.target;
  Value* y = b[x];
  if (!op.bool_attr("keepdim") && !dims.empty())
    y = f.add_op1(OpKind::squeeze, {y}, {attr("dims", Attr::ints(dims))}, {}, b.name_for(op.outputs[0], "squeezed"));
  auto finish_as = [&](const Value* old, Value* value) {
    b.map[old] = f.add_op1(OpKind::cast, {value}, {attr("dtype", Attr::dtype(old->dtype()))}, op.loc, old->name);
    b.map[old]->take_annotations_from(*old);
  };
  if (op.kind != OpKind::var_mean) {
    finish_as(op.outputs[0], y);
    return true;
  }
  Value* yf = upcast(b, y, op.outputs[0], "xf");
  Value* zero = f.add_op1(OpKind::sub, {yf, yf}, {}, {}, b.name_for(op.outputs[0], "deviation"));
  Value* var = f.add_op1(OpKind::div, {zero, b.literal(std::max(0.0, 1.0 - op.real_attr("correction")))}, {}, {},
                         b.name_for(op.outputs[0], "ratio"));
  finish_as(op.outputs[0], var);
  finish_as(op.outputs[1], yf);
  return true;
}

}  // namespace

std::unique_ptr<Fusion> decompose_composites(const Fusion& fusion) {
  return rebuild_fusion(fusion, [](const Op& op, Rebuilder& b) {
    switch (op.kind) {
      case OpKind::softmax: softmax(op, b); return true;
      case OpKind::layer_norm: normalization(op, b, true); return true;
      case OpKind::rms_norm: normalization(op, b, false); return true;
      case OpKind::pow: return pow_of_a_half(op, b);
      case OpKind::sum: case OpKind::mean: case OpKind::max: case OpKind::min: case OpKind::var_mean:
        return reduction_of_nothing(op, b);
      default: return false;
    }
  });
}

}  // namespace alloy
