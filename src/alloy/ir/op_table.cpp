#include "alloy/ir/op_table.h"

#include "alloy/ir/shape_rules.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

namespace alloy {
namespace {

using T = AttrSpec::Type;
using namespace shape_rules;

// ---- the table -------------------------------------------------------------------------

AttrSpec required(std::string_view name, T type) { return {name, type, true, std::nullopt}; }
AttrSpec optional(std::string_view name, T type, Attr value) { return {name, type, false, value}; }
AttrSpec absent_ok(std::string_view name, T type) { return {name, type, false, std::nullopt}; }

std::vector<OpRow> build_table() {
  std::vector<OpRow> rows;
  auto unary = [&](OpKind k, std::string_view name) { rows.push_back({k, name, OpClass::unary, 1, 1, 1, {}, infer_unary}); };
  auto binary = [&](OpKind k, std::string_view name) { rows.push_back({k, name, OpClass::binary, 2, 2, 1, {}, infer_binary}); };
  unary(OpKind::neg, "neg"); unary(OpKind::abs, "abs"); unary(OpKind::exp, "exp"); unary(OpKind::log, "log");
  unary(OpKind::sqrt, "sqrt"); unary(OpKind::rsqrt, "rsqrt"); unary(OpKind::tanh, "tanh");
  unary(OpKind::sigmoid, "sigmoid"); unary(OpKind::relu, "relu"); unary(OpKind::silu, "silu");
  unary(OpKind::erf, "erf"); unary(OpKind::reciprocal, "reciprocal");
  rows.push_back({OpKind::gelu, "gelu", OpClass::unary, 1, 1, 1, {optional("approximate", T::string, Attr::string("none"))}, infer_unary});
  binary(OpKind::add, "add"); binary(OpKind::sub, "sub"); binary(OpKind::mul, "mul"); binary(OpKind::div, "div");
  binary(OpKind::pow, "pow"); binary(OpKind::maximum, "maximum"); binary(OpKind::minimum, "minimum");
  binary(OpKind::eq, "eq"); binary(OpKind::ne, "ne"); binary(OpKind::lt, "lt"); binary(OpKind::le, "le");
  binary(OpKind::gt, "gt"); binary(OpKind::ge, "ge");
  rows.push_back({OpKind::where, "where", OpClass::pointwise, 3, 3, 1, {}, infer_where});
  rows.push_back({OpKind::cast, "cast", OpClass::pointwise, 1, 1, 1, {required("dtype", T::dtype)}, infer_cast});
  rows.push_back({OpKind::gelu_backward, "gelu_backward", OpClass::pointwise, 2, 2, 1,
                  {optional("approximate", T::string, Attr::string("none"))}, infer_activation_backward});
  rows.push_back({OpKind::relu_backward, "relu_backward", OpClass::pointwise, 2, 2, 1, {}, infer_activation_backward});
  rows.push_back({OpKind::relu_mask, "relu_mask", OpClass::bitmask, 1, 1, 1, {}, infer_relu_mask});
  rows.push_back({OpKind::relu_backward_mask, "relu_backward_mask", OpClass::bitmask, 2, 2, 1, {}, infer_relu_backward_mask});
  auto reduction = [&](OpKind k, std::string_view name, int outputs, std::vector<AttrSpec> extra) {
    std::vector<AttrSpec> attrs{absent_ok("dims", T::optional_int_list)};
    attrs.insert(attrs.end(), extra.begin(), extra.end());
    attrs.push_back(optional("keepdim", T::boolean, Attr::boolean(false)));
    rows.push_back({k, name, OpClass::reduction, 1, 1, outputs, attrs, infer_reduction});
  };
  reduction(OpKind::sum, "sum", 1, {}); reduction(OpKind::max, "max", 1, {}); reduction(OpKind::min, "min", 1, {});
  reduction(OpKind::mean, "mean", 1, {});
  reduction(OpKind::var_mean, "var_mean", 2, {optional("correction", T::real, Attr::real(0.0))});
  rows.push_back({OpKind::broadcast_in_dim, "broadcast_in_dim", OpClass::shape, 1, 1, 1,
                  {required("shape", T::extent_list), required("broadcast_dims", T::int_list)}, infer_broadcast_in_dim});
  rows.push_back({OpKind::expand, "expand", OpClass::shape, 1, 1, 1, {required("shape", T::extent_list)}, infer_expand});
  rows.push_back({OpKind::reshape, "reshape", OpClass::shape, 1, 1, 1, {required("shape", T::extent_list)}, infer_reshape});
  rows.push_back({OpKind::permute, "permute", OpClass::shape, 1, 1, 1, {required("dims", T::int_list)}, infer_permute});
  rows.push_back({OpKind::slice, "slice", OpClass::shape, 1, 1, 1,
                  {required("starts", T::int_list), required("ends", T::int_list), absent_ok("steps", T::int_list)}, infer_slice});
  rows.push_back({OpKind::squeeze, "squeeze", OpClass::shape, 1, 1, 1, {absent_ok("dims", T::optional_int_list)}, infer_squeeze});
  rows.push_back({OpKind::unsqueeze, "unsqueeze", OpClass::shape, 1, 1, 1, {required("dim", T::integer)}, infer_unsqueeze});
  rows.push_back({OpKind::cat, "cat", OpClass::shape, 1, -1, 1, {optional("dim", T::integer, Attr::integer(0))}, infer_cat});
  rows.push_back({OpKind::gather, "gather", OpClass::indexing, 2, 2, 1, {required("dim", T::integer)}, infer_gather});
  rows.push_back({OpKind::iota, "iota", OpClass::indexing, 0, 0, 1,
                  {required("length", T::extent), optional("dtype", T::dtype, Attr::dtype(DType::i64))}, infer_iota});
  rows.push_back({OpKind::matmul, "matmul", OpClass::matmul, 2, 2, 1, {}, infer_matmul});
  rows.push_back({OpKind::linear, "linear", OpClass::matmul, 2, 3, 1, {}, infer_linear});
  rows.push_back({OpKind::softmax, "softmax", OpClass::composite, 1, 1, 1, {optional("dim", T::integer, Attr::integer(-1))}, infer_softmax});
  rows.push_back({OpKind::layer_norm, "layer_norm", OpClass::composite, 1, 3, 1,
                  {optional("normalized_ndim", T::integer, Attr::integer(1)), optional("eps", T::real, Attr::real(1e-5))}, infer_norm});
  rows.push_back({OpKind::rms_norm, "rms_norm", OpClass::composite, 1, 2, 1,
                  {optional("normalized_ndim", T::integer, Attr::integer(1)), optional("eps", T::real, Attr::real(1e-6))}, infer_norm});
  rows.push_back({OpKind::segment_set, "segment_set", OpClass::control, 1, 1, 1, {}, infer_identity});
  auto communication = [&](OpKind k, std::string_view name, std::vector<AttrSpec> attrs) {
    rows.push_back({k, name, OpClass::communication, 1, 1, 1, std::move(attrs), infer_resharding});
  };
  communication(OpKind::all_gather, "all_gather", {required("axis", T::integer)});
  communication(OpKind::reduce_scatter, "reduce_scatter",
                {required("axis", T::integer), optional("reduce", T::string, Attr::string("sum"))});
  communication(OpKind::all_reduce, "all_reduce", {optional("reduce", T::string, Attr::string("sum"))});
  communication(OpKind::all_to_all, "all_to_all", {required("from_axis", T::integer), required("axis", T::integer)});
  communication(OpKind::shard_slice, "shard_slice", {required("axis", T::integer)});
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.kind < b.kind; });
  for (size_t i = 0; i < rows.size(); ++i) ALLOY_CHECK(size_t(rows[i].kind) == i, "op table has a gap at ", i);
  return rows;
}

const std::vector<OpRow>& table() {
  static const std::vector<OpRow> rows = build_table();
  return rows;
}

}  // namespace

const Attr* InferContext::attr(std::string_view name) const {
  for (auto& a : attrs)
    if (a.name == name) return &a.value;
  return nullptr;
}

void InferContext::fail(const std::string& message) const {
  user_error(loc, op_name(kind), ": ", message);
}

const OpRow& op_row(OpKind kind) { return table().at(size_t(kind)); }

const OpRow* find_op(std::string_view name) {
  for (auto& row : table())
    if (row.name == name) return &row;
  return nullptr;
}

std::string_view op_name(OpKind kind) { return op_row(kind).name; }

std::vector<std::string_view> all_op_names() {
  std::vector<std::string_view> names;
  for (auto& row : table()) names.push_back(row.name);
  return names;
}

int normalize_axis(int64_t axis, int rank, const InferContext& ctx, std::string_view what) {
  if (axis < -rank || axis >= rank)
    ctx.fail(std::string(what) + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) +
             (rank == 0 ? " (a 0-dim tensor has none; reductions and squeeze take 0 or -1 as PyTorch does)"
                        : " (expected " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")"));
  return int(axis < 0 ? axis + rank : axis);
}

bool is_pointwise(OpKind kind) {
  OpClass c = op_row(kind).op_class;
  return c == OpClass::unary || c == OpClass::binary || c == OpClass::pointwise;
}

std::vector<int> reduced_axes(const Op& op) {
  int rank = op.inputs[0]->rank();
  std::vector<int> axes;
  if (const Attr* dims = op.attr("dims"); dims && dims->kind == Attr::Kind::list)
    for (auto& d : dims->list) axes.push_back(int(d.i < 0 ? d.i + rank : d.i));
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  std::sort(axes.begin(), axes.end());
  return axes;
}

int64_t slice_length(int64_t n, int64_t start, int64_t end, int64_t step) {
  auto clamp = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t(0), n); };
  int64_t b = clamp(start), e = clamp(end);
  return e > b ? (e - b - 1) / step + 1 : 0;
}

bool is_communication(OpKind kind) { return op_row(kind).op_class == OpClass::communication; }

bool is_view(OpKind kind) {
  switch (kind) {
    case OpKind::broadcast_in_dim: case OpKind::expand: case OpKind::reshape: case OpKind::permute:
    case OpKind::slice: case OpKind::squeeze: case OpKind::unsqueeze:
      return true;
    default:
      return false;
  }
}

}  // namespace alloy
