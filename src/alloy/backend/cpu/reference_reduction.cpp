// Reference kernels of the reductions: sum, max, min, mean over `dims` (absent or empty: every
// axis) with `keepdim`, and var_mean. Floats accumulate in double, integers and bools in int64
// (sum of integers gives i64). max/min propagate NaN and reject an empty reduction like
// PyTorch; sum of nothing is 0, mean of nothing is NaN. var_mean is two-pass in double and
// divides by max(0, N - correction), so N <= correction gives inf or NaN as PyTorch does.
#include <algorithm>
#include <cmath>

#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"

namespace alloy::reference {
namespace {

// The input viewed as [outer, inner]: kept axes first (in order), reduced axes last.
struct Grouped {
  Shape sizes, strides;
  int64_t outer = 1, inner = 1;
};

Grouped group_axes(const Op& op, const Tensor& x) {
  int rank = x.dim();
  std::vector<bool> reduced(rank, false);
  const Attr* dims = op.attr("dims");
  std::vector<int64_t> listed;
  if (dims && dims->kind == Attr::Kind::integer) listed.push_back(dims->i);
  else if (dims) for (const Attr& d : dims->list) listed.push_back(d.i);
  if (listed.empty()) std::fill(reduced.begin(), reduced.end(), true);
  for (int64_t d : listed) {
    int axis = normalize_axis(op, d, std::max(rank, 1), "dims");
    if (rank > 0) reduced[axis] = true;
  }
  Grouped g;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < rank; ++i) {
      if (reduced[i] != (pass == 1)) continue;
      g.sizes.push_back(x.size(i));
      g.strides.push_back(x.stride(i));
      (pass == 0 ? g.outer : g.inner) *= x.size(i);
    }
  return g;
}

Tensor output(const Op& op, int index, const Sizes& out, int64_t expected_numel) {
  ALLOY_CHECK(numel_of(out[index]) == expected_numel, op_name(op.kind), ": output shape does not match the reduction");
  return Tensor::empty(op.outputs[index]->dtype(), out[index]);
}

void reject_empty(const Op& op, const Tensor& x, const Grouped& g) {
  if (g.inner == 0)
    user_error(op.loc, op_name(op.kind), ": cannot reduce an empty axis (input is ", x.str(),
               "); expected at least one element along the reduced axes");
}

std::vector<double> reduce_doubles(const Op& op, const Grouped& g, const std::vector<double>& x) {
  std::vector<double> out(size_t(g.outer));
  for (int64_t o = 0; o < g.outer; ++o) {
    const double* row = x.data() + o * g.inner;
    double acc;
    switch (op.kind) {
      case OpKind::sum: case OpKind::mean:
        acc = 0;
        for (int64_t i = 0; i < g.inner; ++i) acc += row[i];
        if (op.kind == OpKind::mean) acc /= double(g.inner);
        break;
      case OpKind::max: case OpKind::min: {
        bool is_max = op.kind == OpKind::max;
        acc = row[0];
        for (int64_t i = 1; i < g.inner && !std::isnan(acc); ++i)
          if (std::isnan(row[i]) || (is_max ? row[i] > acc : row[i] < acc)) acc = row[i];
        break;
      }
      default: internal_error(op_name(op.kind), " is not a reduction");
    }
    out[o] = acc;
  }
  return out;
}

std::vector<int64_t> reduce_ints(const Op& op, const Grouped& g, const std::vector<int64_t>& x) {
  std::vector<int64_t> out(size_t(g.outer));
  for (int64_t o = 0; o < g.outer; ++o) {
    const int64_t* row = x.data() + o * g.inner;
    switch (op.kind) {
      case OpKind::sum: {
        uint64_t acc = 0;  // wraps like PyTorch's int64 accumulation
        for (int64_t i = 0; i < g.inner; ++i) acc += uint64_t(row[i]);
        out[o] = int64_t(acc);
        break;
      }
      case OpKind::max: out[o] = *std::max_element(row, row + g.inner); break;
      case OpKind::min: out[o] = *std::min_element(row, row + g.inner); break;
      default: internal_error(op_name(op.kind), " has no integer form");
    }
  }
  return out;
}

}  // namespace

std::vector<Tensor> reduction_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Tensor& x = in[0];
  Grouped g = group_axes(op, x);
  if (op.kind == OpKind::max || op.kind == OpKind::min) reject_empty(op, x, g);
  Tensor result = output(op, 0, out, g.outer);
  if (!is_floating(x.dtype()) && op.kind != OpKind::mean) {
    std::vector<int64_t> values = reduce_ints(op, g, load_ints(x, g.sizes, g.strides));
    store_ints(result, values.data());
  } else {
    std::vector<double> values = reduce_doubles(op, g, load_doubles(x, g.sizes, g.strides));
    store_doubles(result, values.data());
  }
  return {result};
}

std::vector<Tensor> var_mean_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Tensor& x = in[0];
  Grouped g = group_axes(op, x);
  std::vector<double> values = load_doubles(x, g.sizes, g.strides);
  double divisor = std::max(0.0, double(g.inner) - op.real_attr("correction"));
  std::vector<double> var(size_t(g.outer)), mean(size_t(g.outer));
  for (int64_t o = 0; o < g.outer; ++o) {
    const double* row = values.data() + o * g.inner;
    double sum = 0;
    for (int64_t i = 0; i < g.inner; ++i) sum += row[i];
    double m = sum / double(g.inner);
    double squares = 0;
    for (int64_t i = 0; i < g.inner; ++i) squares += (row[i] - m) * (row[i] - m);
    mean[o] = m;
    var[o] = squares / divisor;
  }
  Tensor var_out = output(op, 0, out, g.outer), mean_out = output(op, 1, out, g.outer);
  store_doubles(var_out, var.data());
  store_doubles(mean_out, mean.data());
  return {var_out, mean_out};
}

}  // namespace alloy::reference
