#include "alloy/passes/split_var_mean.h"

#include "alloy/passes/rebuild.h"

namespace alloy {
namespace {

std::vector<int64_t> reduced_dims(const Op& op) {
  const Attr* dims = op.attr("dims");
  if (dims && dims->kind == Attr::Kind::list) return op.ints_attr("dims");
  std::vector<int64_t> all;
  for (int a = 0; a < op.inputs[0]->rank(); ++a) all.push_back(a);
  return all;
}

// The element count the var_mean reduces, when it is a constant.
std::optional<int64_t> reduced_count(const Op& op, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    auto size = op.inputs[0]->shape()[size_t(d < 0 ? d + op.inputs[0]->rank() : d)].constant_value();
    if (!size) return std::nullopt;
    n *= *size;
  }
  return n;
}

bool split(const Op& op, Rebuilder& b) {
  if (op.kind != OpKind::var_mean) return false;
  std::vector<int64_t> dims = reduced_dims(op);
  double correction = op.real_attr("correction");
  std::optional<int64_t> n = reduced_count(op, dims);
  if (correction != 0 && !n) return false;
  Fusion& f = b.target;
  const Value* var_out = op.outputs[0];
  const Value* mean_out = op.outputs[1];
  Value* x = b[op.inputs[0]];
  DType dtype = x->dtype();
  if (dtype != DType::f32 && dtype != DType::f64)
    x = f.add_op1(OpKind::cast, {x}, {{"dtype", Attr::dtype(DType::f32)}}, op.loc, b.name_for(mean_out, "xf"));
  NamedAttr dims_attr{"dims", Attr::ints(dims)};
  Value* mean = f.add_op1(OpKind::mean, {x}, {dims_attr, {"keepdim", Attr::boolean(true)}}, op.loc, b.name_for(mean_out, "kept"));
  Value* centered = f.add_op1(OpKind::sub, {x, mean}, {}, op.loc, b.name_for(var_out, "centered"));
  Value* square = f.add_op1(OpKind::mul, {centered, centered}, {}, op.loc, b.name_for(var_out, "square"));
  bool keepdim = op.bool_attr("keepdim");
  Value* var = f.add_op1(OpKind::mean, {square}, {dims_attr, {"keepdim", Attr::boolean(keepdim)}}, op.loc, b.name_for(var_out, "biased"));
  if (correction != 0)
    var = f.add_op1(OpKind::mul, {var, b.literal(double(*n) / (double(*n) - correction))}, {}, op.loc, b.name_for(var_out, "unbiased"));
  Value* mean_result = keepdim ? mean : f.add_op1(OpKind::squeeze, {mean}, {dims_attr}, op.loc, b.name_for(mean_out, "squeezed"));
  b.map[var_out] = f.add_op1(OpKind::cast, {var}, {{"dtype", Attr::dtype(dtype)}}, op.loc, var_out->name);
  b.map[mean_out] = f.add_op1(OpKind::cast, {mean_result}, {{"dtype", Attr::dtype(dtype)}}, op.loc, mean_out->name);
  b.map[var_out]->take_annotations_from(*var_out);
  b.map[mean_out]->take_annotations_from(*mean_out);
  return true;
}

}  // namespace

std::unique_ptr<Fusion> split_var_mean(const Fusion& fusion) { return rebuild_fusion(fusion, split); }

}  // namespace alloy
