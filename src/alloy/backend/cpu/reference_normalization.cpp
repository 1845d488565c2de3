// Reference kernels of the composite normalizations, computed directly (not through their
// decomposition) in double and rounded once to the input's dtype:
//   softmax(x, dim)                     exp(x - max) / sum(exp(x - max)) along dim
//   layer_norm(x, [w], [b], k, eps)     (x - mean) / sqrt(var + eps) * w + b over the last k
//                                       axes, var biased (divides by N)
//   rms_norm(x, [w], k, eps)            x / sqrt(mean(x^2) + eps) * w over the last k axes
#include <algorithm>
#include <cmath>

#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"

namespace alloy::reference {
namespace {

void softmax_row(double* row, int64_t n) {
  double top = -INFINITY;
  for (int64_t i = 0; i < n; ++i) top = std::isnan(row[i]) || std::isnan(top) ? NAN : std::max(top, row[i]);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += (row[i] = std::exp(row[i] - top));
  for (int64_t i = 0; i < n; ++i) row[i] /= total;
}

// x as [outer, inner] over its last k axes, and the optional per-element parameters.
struct Normalized {
  int64_t outer = 1, inner = 1;
  std::vector<double> x;
  std::vector<double> weight, bias;  // empty when absent
};

Normalized load_normalized(const Op& op, const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  int64_t k = op.int_attr("normalized_ndim");
  if (k < 1 || k > x.dim())
    user_error(op.loc, op_name(op.kind), ": normalized_ndim = ", k, " is out of range for a rank-", x.dim(), " input");
  Normalized n;
  for (int i = 0; i < x.dim(); ++i) (i < x.dim() - k ? n.outer : n.inner) *= x.size(i);
  n.x = load_doubles(x);
  for (size_t p = 1; p < in.size(); ++p) {
    if (numel_of(in[p].sizes()) != n.inner)
      user_error(op.loc, op_name(op.kind), ": ", p == 1 ? "weight" : "bias", " has ", numel_of(in[p].sizes()),
                 " elements; expected ", n.inner, " (the normalized shape)");
    (p == 1 ? n.weight : n.bias) = load_doubles(in[p]);
  }
  return n;
}

Tensor store_result(const Op& op, const Sizes& out, const std::vector<double>& values) {
  Tensor result = Tensor::empty(op.outputs[0]->dtype(), out[0]);
  ALLOY_CHECK(result.numel() == int64_t(values.size()), op_name(op.kind), ": output has the wrong size");
  store_doubles(result, values.data());
  return result;
}

}  // namespace

std::vector<Tensor> softmax_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Tensor& x = in[0];
  int rank = x.dim();
  int axis = normalize_axis(op, op.int_attr("dim"), std::max(rank, 1), "dim");
  // Walk x with the softmax axis last; write back through the same permutation of the output.
  std::vector<int> order;
  for (int i = 0; i < rank; ++i)
    if (i != axis) order.push_back(i);
  if (rank > 0) order.push_back(axis);
  Tensor moved = x.permute(order);
  std::vector<double> values = load_doubles(moved);
  int64_t n = rank > 0 ? x.size(axis) : 1;
  for (int64_t start = 0; n > 0 && start < int64_t(values.size()); start += n) softmax_row(values.data() + start, n);
  Tensor result = Tensor::empty(op.outputs[0]->dtype(), out[0]);
  ALLOY_CHECK(result.sizes() == x.sizes(), "softmax: output shape differs from the input's");
  store_doubles(result.permute(order), values.data());
  return {result};
}

std::vector<Tensor> layer_norm_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  Normalized n = load_normalized(op, in);
  double eps = op.real_attr("eps");
  std::vector<double> y(n.x.size());
  for (int64_t o = 0; o < n.outer; ++o) {
    const double* row = n.x.data() + o * n.inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n.inner; ++i) mean += row[i];
    mean /= double(n.inner);
    for (int64_t i = 0; i < n.inner; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= double(n.inner);
    double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n.inner; ++i) {
      double v = (row[i] - mean) * rstd;
      if (!n.weight.empty()) v *= n.weight[i];
      if (!n.bias.empty()) v += n.bias[i];
      y[o * n.inner + i] = v;
    }
  }
  return {store_result(op, out, y)};
}

std::vector<Tensor> rms_norm_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  Normalized n = load_normalized(op, in);
  double eps = op.real_attr("eps");
  std::vector<double> y(n.x.size());
  for (int64_t o = 0; o < n.outer; ++o) {
    const double* row = n.x.data() + o * n.inner;
    double squares = 0;
    for (int64_t i = 0; i < n.inner; ++i) squares += row[i] * row[i];
    double rrms = 1.0 / std::sqrt(squares / double(n.inner) + eps);
    for (int64_t i = 0; i < n.inner; ++i) {
      double v = row[i] * rrms;
      if (!n.weight.empty()) v *= n.weight[i];
      y[o * n.inner + i] = v;
    }
  }
  return {store_result(op, out, y)};
}

}  // namespace alloy::reference
