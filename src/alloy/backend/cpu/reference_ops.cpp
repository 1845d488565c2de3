// The CPU reference: one row per OpKind naming the kernel that computes it. The kernels live in
// one file per family (reference_pointwise.cpp, reference_reduction.cpp, reference_shape.cpp,
// reference_indexing.cpp, reference_matmul.cpp, reference_normalization.cpp); the op's kind
// selects the formula inside.
#include "alloy/backend/cpu/reference_ops.h"

#include <array>

#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"

namespace alloy {
namespace {

using namespace reference;
using KernelFn = std::vector<Tensor> (*)(const Op&, const std::vector<Tensor>&, const Sizes&);

struct ReferenceRow {
  OpKind kind;
  KernelFn kernel;
};

// In the order of ALLOY_OP_KINDS, one row per kind (checked at compile time below).
constexpr ReferenceRow kRows[] = {
    {OpKind::neg, unary_op},
    {OpKind::abs, unary_op},
    {OpKind::exp, unary_op},
    {OpKind::log, unary_op},
    {OpKind::sqrt, unary_op},
    {OpKind::rsqrt, unary_op},
    {OpKind::tanh, unary_op},
    {OpKind::sigmoid, unary_op},
    {OpKind::relu, unary_op},
    {OpKind::silu, unary_op},
    {OpKind::erf, unary_op},
    {OpKind::reciprocal, unary_op},
    {OpKind::gelu, unary_op},
    {OpKind::add, binary_op},
    {OpKind::sub, binary_op},
    {OpKind::mul, binary_op},
    {OpKind::div, binary_op},
    {OpKind::pow, binary_op},
    {OpKind::maximum, binary_op},
    {OpKind::minimum, binary_op},
    {OpKind::eq, binary_op},
    {OpKind::ne, binary_op},
    {OpKind::lt, binary_op},
    {OpKind::le, binary_op},
    {OpKind::gt, binary_op},
    {OpKind::ge, binary_op},
    {OpKind::where, where_op},
    {OpKind::cast, cast_op},
    {OpKind::gelu_backward, activation_backward_op},
    {OpKind::relu_backward, activation_backward_op},
    {OpKind::relu_mask, relu_mask_op},
    {OpKind::relu_backward_mask, relu_backward_mask_op},
    {OpKind::sum, reduction_op},
    {OpKind::max, reduction_op},
    {OpKind::min, reduction_op},
    {OpKind::mean, reduction_op},
    {OpKind::var_mean, var_mean_op},
    {OpKind::broadcast_in_dim, view_op},
    {OpKind::expand, view_op},
    {OpKind::reshape, reshape_op},
    {OpKind::permute, view_op},
    {OpKind::slice, view_op},
    {OpKind::squeeze, view_op},
    {OpKind::unsqueeze, view_op},
    {OpKind::cat, cat_op},
    {OpKind::gather, gather_op},
    {OpKind::iota, iota_op},
    {OpKind::matmul, matmul_op},
    {OpKind::linear, linear_op},
    {OpKind::softmax, softmax_op},
    {OpKind::layer_norm, layer_norm_op},
    {OpKind::rms_norm, rms_norm_op},
    {OpKind::segment_set, view_op},
    // resharding ops are identities on global values (a fusion without a mesh); with a mesh they
    // run as communication segments, never here
    {OpKind::all_gather, view_op},
    {OpKind::reduce_scatter, view_op},
    {OpKind::all_reduce, view_op},
    {OpKind::all_to_all, view_op},
    {OpKind::shard_slice, view_op},
};

#define ALLOY_COUNT_KIND(name) +1
constexpr size_t kNumOpKinds = 0 ALLOY_OP_KINDS(ALLOY_COUNT_KIND);
#undef ALLOY_COUNT_KIND

constexpr bool rows_follow_op_kinds() {
  for (size_t i = 0; i < std::size(kRows); ++i)
    if (size_t(kRows[i].kind) != i || kRows[i].kernel == nullptr) return false;
  return true;
}
static_assert(std::size(kRows) == kNumOpKinds, "every OpKind needs a row in the reference table");
static_assert(rows_follow_op_kinds(), "reference table rows must follow the order of ALLOY_OP_KINDS");

}  // namespace

std::vector<Tensor> run_reference_op(const Op& op, const std::vector<Tensor>& inputs,
                                     const std::vector<std::vector<int64_t>>& output_sizes) {
  ALLOY_CHECK(inputs.size() == op.inputs.size(), op_name(op.kind), ": ", inputs.size(), " tensors for ",
              op.inputs.size(), " inputs");
  ALLOY_CHECK(output_sizes.size() == op.outputs.size(), op_name(op.kind), ": ", output_sizes.size(),
              " output shapes for ", op.outputs.size(), " outputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    ALLOY_CHECK(inputs[i].defined(), op_name(op.kind), ": input ", i, " is undefined");
    ALLOY_CHECK(inputs[i].device().kind == DeviceKind::cpu, op_name(op.kind), ": input ", i, " is on ",
                inputs[i].device().str());
  }
  return kRows[size_t(op.kind)].kernel(op, inputs, output_sizes);
}

}  // namespace alloy
