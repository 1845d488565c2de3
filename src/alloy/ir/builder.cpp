#include "alloy/ir/builder.h"

#include <string_view>

#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"

namespace alloy {
namespace {

// The fusion every handle among `inputs` belongs to; a user error when they disagree or none is
// a value (all literals), since then no fusion is known.
Fusion& fusion_of(OpKind kind, const std::vector<Operand>& inputs, const SourceLoc& loc) {
  Fusion* fusion = nullptr;
  for (const Operand& in : inputs) {
    if (!in.handle) continue;
    if (!in.handle->valid()) user_error(loc, op_name(kind), ": an argument is an empty TensorHandle");
    if (fusion && in.handle->fusion() != fusion)
      user_error(loc, op_name(kind), ": arguments come from different fusions");
    fusion = in.handle->fusion();
  }
  if (!fusion) user_error(loc, op_name(kind), ": at least one argument must be a value of a fusion, not a literal");
  return *fusion;
}

std::vector<Value*> values_of(Fusion& fusion, const std::vector<Operand>& inputs) {
  std::vector<Value*> values;
  for (const Operand& in : inputs) values.push_back(in.handle ? in.handle->value() : fusion.add_literal(*in.literal));
  return values;
}

Attr shape_attr(OpKind kind, const std::vector<Dim>& shape, const SourceLoc& loc) {
  Attr list;
  list.kind = Attr::Kind::list;
  for (const Dim& d : shape) {
    if (auto c = d.extent.constant_value()) list.list.push_back(Attr::integer(*c));
    else if (auto s = d.extent.as_symbol(); s && is_symbol_name(*s)) list.list.push_back(Attr::symbol(*s));
    else user_error(loc, op_name(kind), ": shape entry ", d.extent.str(true), " must be an integer or a size symbol");
  }
  return list;
}

TensorHandle one(OpKind kind, const std::vector<Operand>& inputs, std::vector<NamedAttr> attrs, const CallSite& site) {
  return apply_op(kind, inputs, std::move(attrs), call_site(site))[0];
}

TensorHandle reduction(OpKind kind, const TensorHandle& x, const std::vector<int64_t>& dims, bool keepdim,
                       const CallSite& site) {
  std::vector<NamedAttr> attrs;
  if (!dims.empty()) attrs.push_back({"dims", Attr::ints(dims)});
  attrs.push_back({"keepdim", Attr::boolean(keepdim)});
  return one(kind, {x}, std::move(attrs), site);
}

std::string_view base_name(std::string_view path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

SourceLoc call_site(const CallSite& site) {
  return SourceLoc{std::string(base_name(site.file_name())), int(site.line()), int(site.column())};
}

std::vector<TensorHandle> apply_op(OpKind kind, const std::vector<Operand>& inputs, std::vector<NamedAttr> attrs,
                                   const SourceLoc& loc) {
  Fusion& fusion = fusion_of(kind, inputs, loc);
  std::vector<TensorHandle> out;
  for (Value* v : fusion.add_op(kind, values_of(fusion, inputs), std::move(attrs), loc)) out.emplace_back(v, &fusion);
  return out;
}

TensorHandle TensorHandle::named(const std::string& name) const {
  if (!valid()) user_error_at("TensorHandle::named", "the handle is empty");
  if (!is_value_name(name)) user_error_at("TensorHandle::named", "'", name, "' is not a valid value name");
  if (Value* other = fusion_->find_value(name); other && other != value_)
    user_error_at("TensorHandle::named", "'", name, "' is already defined");
  fusion_->rename_value(value_, name);
  return *this;
}

Extent sym(std::string name) { return Extent::symbol(std::move(name)); }

// ---- FusionBuilder -----------------------------------------------------------------------

FusionBuilder::FusionBuilder(std::string name) {
  if (!is_value_name(name)) user_error_at("FusionBuilder", "'", name, "' is not a valid fusion name");
  fusion_ = std::make_unique<Fusion>(std::move(name));
}

Fusion& FusionBuilder::fusion() {
  if (!fusion_) user_error_at("FusionBuilder", "build() was already called");
  return *fusion_;
}

TensorHandle FusionBuilder::input(std::string name, DType dtype, std::vector<Dim> shape,
                                  std::optional<Sharding> sharding, CallSite site) {
  SourceLoc loc = call_site(site);
  if (!is_value_name(name)) user_error(loc, "input: '", name, "' is not a valid value name");
  ValueType type;
  type.dtype = dtype;
  for (Dim& d : shape) {
    // What a parameter can declare in the text format: a size, a symbol or `?`.
    auto c = d.extent.constant_value();
    auto s = d.extent.as_symbol();
    if (!(c && *c >= 0) && !(s && (d.extent.is_dynamic_symbol() || is_symbol_name(*s))))
      user_error(loc, "input '", name, "': size ", d.extent.str(true),
                 " must be a non-negative integer, a size symbol or fb.dynamic()");
    type.shape.push_back(std::move(d.extent));
  }
  if (sharding && sharding->shard_axis && (*sharding->shard_axis < 0 || *sharding->shard_axis >= type.rank()))
    user_error(loc, "input '", name, "': shard axis ", *sharding->shard_axis, " is out of range for rank ", type.rank());
  Fusion& f = fusion();
  return TensorHandle(f.add_input(std::move(name), type, std::move(sharding), loc), &f);
}

TensorHandle FusionBuilder::scalar(std::string name, DType dtype, CallSite site) {
  SourceLoc loc = call_site(site);
  if (!is_value_name(name)) user_error(loc, "scalar: '", name, "' is not a valid value name");
  ValueType type;
  type.dtype = dtype;
  type.is_scalar = true;
  Fusion& f = fusion();
  return TensorHandle(f.add_input(std::move(name), type, {}, loc), &f);
}

TensorHandle FusionBuilder::literal(Operand value, CallSite site) {
  if (value.handle) user_error(call_site(site), "literal: expected a number or a bool, found a value");
  Fusion& f = fusion();
  return TensorHandle(f.add_literal(*value.literal), &f);
}

Extent FusionBuilder::dynamic() { return Extent::dynamic(fusion().next_dynamic_id()); }

void FusionBuilder::output(const TensorHandle& value, CallSite site) {
  SourceLoc loc = call_site(site);
  if (!value.valid()) user_error(loc, "output: the handle is empty");
  if (value.fusion() != &fusion()) user_error(loc, "output: '", value.name(), "' belongs to another fusion");
  fusion_->add_output(value.value(), loc);
}

std::unique_ptr<Fusion> FusionBuilder::build(CallSite site) {
  if (fusion().outputs().empty())
    user_error(call_site(site), "fusion '", fusion_->name(), "' has no outputs; call output() before build()");
  return std::move(fusion_);
}

// ---- one function per op -----------------------------------------------------------------

#define ALLOY_BUILDER_UNARY(name) \
  TensorHandle name(const TensorHandle& x, CallSite site) { return one(OpKind::name, {x}, {}, site); }
#define ALLOY_BUILDER_BINARY(name) \
  TensorHandle name(const Operand& a, const Operand& b, CallSite site) { return one(OpKind::name, {a, b}, {}, site); }
ALLOY_BUILDER_POINTWISE_OPS(ALLOY_BUILDER_UNARY, ALLOY_BUILDER_BINARY)
#undef ALLOY_BUILDER_UNARY
#undef ALLOY_BUILDER_BINARY

TensorHandle gelu(const TensorHandle& x, std::string approximate, CallSite site) {
  return one(OpKind::gelu, {x}, {{"approximate", Attr::string(std::move(approximate))}}, site);
}

TensorHandle where(const Operand& condition, const Operand& a, const Operand& b, CallSite site) {
  return one(OpKind::where, {condition, a, b}, {}, site);
}

TensorHandle cast(const TensorHandle& x, DType dtype, CallSite site) {
  return one(OpKind::cast, {x}, {{"dtype", Attr::dtype(dtype)}}, site);
}

TensorHandle gelu_backward(const TensorHandle& grad, const TensorHandle& x, std::string approximate, CallSite site) {
  return one(OpKind::gelu_backward, {grad, x}, {{"approximate", Attr::string(std::move(approximate))}}, site);
}

TensorHandle relu_backward(const TensorHandle& grad, const TensorHandle& x, CallSite site) {
  return one(OpKind::relu_backward, {grad, x}, {}, site);
}

TensorHandle relu_mask(const TensorHandle& x, CallSite site) { return one(OpKind::relu_mask, {x}, {}, site); }

TensorHandle relu_backward_mask(const TensorHandle& grad, const TensorHandle& mask, CallSite site) {
  return one(OpKind::relu_backward_mask, {grad, mask}, {}, site);
}

TensorHandle sum(const TensorHandle& x, std::vector<int64_t> dims, bool keepdim, CallSite site) {
  return reduction(OpKind::sum, x, dims, keepdim, site);
}
TensorHandle max(const TensorHandle& x, std::vector<int64_t> dims, bool keepdim, CallSite site) {
  return reduction(OpKind::max, x, dims, keepdim, site);
}
TensorHandle min(const TensorHandle& x, std::vector<int64_t> dims, bool keepdim, CallSite site) {
  return reduction(OpKind::min, x, dims, keepdim, site);
}
TensorHandle mean(const TensorHandle& x, std::vector<int64_t> dims, bool keepdim, CallSite site) {
  return reduction(OpKind::mean, x, dims, keepdim, site);
}

std::pair<TensorHandle, TensorHandle> var_mean(const TensorHandle& x, std::vector<int64_t> dims, double correction,
                                               bool keepdim, CallSite site) {
  std::vector<NamedAttr> attrs;
  if (!dims.empty()) attrs.push_back({"dims", Attr::ints(dims)});
  attrs.push_back({"correction", Attr::real(correction)});
  attrs.push_back({"keepdim", Attr::boolean(keepdim)});
  auto outs = apply_op(OpKind::var_mean, {x}, std::move(attrs), call_site(site));
  return {outs[0], outs[1]};
}

TensorHandle broadcast_in_dim(const TensorHandle& x, std::vector<Dim> shape, std::vector<int64_t> broadcast_dims,
                              CallSite site) {
  SourceLoc loc = call_site(site);
  return apply_op(OpKind::broadcast_in_dim, {x},
                  {{"shape", shape_attr(OpKind::broadcast_in_dim, shape, loc)},
                   {"broadcast_dims", Attr::ints(broadcast_dims)}},
                  loc)[0];
}

TensorHandle expand(const TensorHandle& x, std::vector<Dim> shape, CallSite site) {
  SourceLoc loc = call_site(site);
  return apply_op(OpKind::expand, {x}, {{"shape", shape_attr(OpKind::expand, shape, loc)}}, loc)[0];
}

TensorHandle reshape(const TensorHandle& x, std::vector<Dim> shape, CallSite site) {
  SourceLoc loc = call_site(site);
  return apply_op(OpKind::reshape, {x}, {{"shape", shape_attr(OpKind::reshape, shape, loc)}}, loc)[0];
}

TensorHandle permute(const TensorHandle& x, std::vector<int64_t> dims, CallSite site) {
  return one(OpKind::permute, {x}, {{"dims", Attr::ints(dims)}}, site);
}

TensorHandle slice(const TensorHandle& x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                   std::vector<int64_t> steps, CallSite site) {
  std::vector<NamedAttr> attrs{{"starts", Attr::ints(starts)}, {"ends", Attr::ints(ends)}};
  if (!steps.empty()) attrs.push_back({"steps", Attr::ints(steps)});
  return one(OpKind::slice, {x}, std::move(attrs), site);
}

TensorHandle squeeze(const TensorHandle& x, std::vector<int64_t> dims, CallSite site) {
  std::vector<NamedAttr> attrs;
  if (!dims.empty()) attrs.push_back({"dims", Attr::ints(dims)});
  return one(OpKind::squeeze, {x}, std::move(attrs), site);
}

TensorHandle unsqueeze(const TensorHandle& x, int64_t dim, CallSite site) {
  return one(OpKind::unsqueeze, {x}, {{"dim", Attr::integer(dim)}}, site);
}

TensorHandle cat(const std::vector<TensorHandle>& inputs, int64_t dim, CallSite site) {
  std::vector<Operand> operands(inputs.begin(), inputs.end());
  if (operands.empty()) user_error(call_site(site), "cat: takes at least 1 argument, found 0");
  return one(OpKind::cat, operands, {{"dim", Attr::integer(dim)}}, site);
}

TensorHandle gather(const TensorHandle& x, const TensorHandle& index, int64_t dim, CallSite site) {
  return one(OpKind::gather, {x, index}, {{"dim", Attr::integer(dim)}}, site);
}

TensorHandle iota(FusionBuilder& fb, Dim length, DType dtype, CallSite site) {
  SourceLoc loc = call_site(site);
  Attr size = shape_attr(OpKind::iota, {length}, loc).list[0];
  Fusion& f = fb.fusion();
  return TensorHandle(f.add_op(OpKind::iota, {}, {{"length", size}, {"dtype", Attr::dtype(dtype)}}, loc)[0], &f);
}

TensorHandle matmul(const TensorHandle& a, const TensorHandle& b, CallSite site) {
  return one(OpKind::matmul, {a, b}, {}, site);
}

TensorHandle linear(const TensorHandle& x, const TensorHandle& weight, std::optional<TensorHandle> bias, CallSite site) {
  std::vector<Operand> inputs{x, weight};
  if (bias) inputs.push_back(*bias);
  return one(OpKind::linear, inputs, {}, site);
}

TensorHandle softmax(const TensorHandle& x, int64_t dim, CallSite site) {
  return one(OpKind::softmax, {x}, {{"dim", Attr::integer(dim)}}, site);
}

TensorHandle layer_norm(const TensorHandle& x, std::optional<TensorHandle> weight, std::optional<TensorHandle> bias,
                        int64_t normalized_ndim, double eps, CallSite site) {
  if (bias && !weight) user_error(call_site(site), "layer_norm: a bias needs a weight too");
  std::vector<Operand> inputs{x};
  if (weight) inputs.push_back(*weight);
  if (bias) inputs.push_back(*bias);
  return one(OpKind::layer_norm, inputs,
             {{"normalized_ndim", Attr::integer(normalized_ndim)}, {"eps", Attr::real(eps)}}, site);
}

TensorHandle rms_norm(const TensorHandle& x, std::optional<TensorHandle> weight, int64_t normalized_ndim, double eps,
                      CallSite site) {
  std::vector<Operand> inputs{x};
  if (weight) inputs.push_back(*weight);
  return one(OpKind::rms_norm, inputs,
             {{"normalized_ndim", Attr::integer(normalized_ndim)}, {"eps", Attr::real(eps)}}, site);
}

}  // namespace alloy
