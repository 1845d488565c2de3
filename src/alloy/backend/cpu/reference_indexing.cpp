// Reference kernels of the indexing ops. gather(x, index, dim=k) is torch.gather: out[..., i_k, ...]
// = x[..., index[..., i_k, ...], ...], with every index value checked against x's axis k (a user
// error naming the value, its position and the valid range; torch takes no negative indices) and
// index no longer than x off axis k. iota(length=N) is 0, 1, ..., N-1 in its dtype.
#include <algorithm>
#include <limits>

#include "alloy/backend/cpu/reference_indexing.h"

#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"

namespace alloy::reference {
namespace {

// Row-major strides of a contiguous tensor of `sizes`.
Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  return strides;
}

// The multi-index of element i (row-major) of `sizes`, as "[a, b]".
std::string position_str(int64_t i, const Shape& sizes) {
  Shape at(sizes.size(), 0);
  for (size_t d = sizes.size(); d-- > 0;) {
    at[d] = i % sizes[d];
    i /= sizes[d];
  }
  return shape_str(at);
}

// For each element of index (row-major), the element of contiguous x it reads; checks the values.
std::vector<int64_t> gather_sources(const Op& op, const Tensor& x, const Tensor& index, int axis) {
  const Shape& sizes = index.sizes();
  check_gather_extents(op, sizes, x.sizes(), axis);
  const int64_t extent = x.dim() == 0 ? 1 : x.size(axis);
  Shape strides = contiguous_strides(x.sizes());
  const int64_t axis_stride = x.dim() == 0 ? 0 : strides[size_t(axis)];
  if (x.dim() > 0) strides[size_t(axis)] = 0;  // the position along the axis comes from the index
  std::vector<int64_t> values = load_ints(index);
  std::vector<int64_t> sources(values.size());
  for_each_offset(sizes, strides, [&](int64_t i, int64_t offset) {
    int64_t v = values[size_t(i)];
    if (v < 0 || v >= extent) gather_index_out_of_range(op, v, i, sizes, x.sizes(), axis);
    sources[size_t(i)] = offset + v * axis_stride;
  });
  return sources;
}

}  // namespace

void check_gather_extents(const Op& op, const Shape& index_sizes, const Shape& input_sizes, int axis) {
  for (size_t d = 0; d < index_sizes.size() && d < input_sizes.size(); ++d)
    if (int(d) != axis && index_sizes[d] > input_sizes[d])
      user_error(op.loc, "gather: index ", shape_str(index_sizes), " is longer than the input ", shape_str(input_sizes), " on axis ", d,
                 " (", index_sizes[d], " > ", input_sizes[d], "); expected index.size(d) <= input.size(d) for every d but dim ", axis);
}

void gather_index_out_of_range(const Op& op, int64_t value, int64_t position, const Shape& index_sizes, const Shape& input_sizes,
                               int axis) {
  // (a sharded run's gather may read a value gathered across the ranks: named as the user's)
  const Value* x = op.inputs[0];
  const std::string& input = x->sharding_source.kind == ShardingSource::Kind::resharded ? x->sharding_source.from : x->name;
  const int64_t extent = input_sizes.empty() ? 1 : input_sizes[size_t(axis)];
  user_error(op.loc, "gather: index value ", value, " at index position ", position_str(position, index_sizes), " is out of range for axis ",
             axis, " of the input '", input, "' ", shape_str(input_sizes),
             extent == 0 ? "; the axis is empty (size 0): no index is in range" : "; expected 0 to " + std::to_string(extent - 1),
             value < 0 ? " (negative indices are not taken, as torch.gather takes none)" : "");
}

std::vector<Tensor> gather_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Tensor &x = in[0], &index = in[1];
  if (x.dim() != index.dim())
    user_error(op.loc, "gather: index ", shape_str(index.sizes()), " and input ", shape_str(x.sizes()), " differ in rank");
  int axis = normalize_axis(op, op.int_attr("dim"), std::max(1, x.dim()), "dim");
  ALLOY_CHECK(out[0] == index.sizes(), "gather: output ", shape_str(out[0]), " for index ", shape_str(index.sizes()));
  std::vector<int64_t> sources = gather_sources(op, x, index, axis);
  Tensor result = Tensor::empty(op.outputs[0]->dtype(), out[0]);
  if (is_floating(x.dtype())) {
    std::vector<double> values = load_doubles(x), picked(sources.size());
    for (size_t i = 0; i < sources.size(); ++i) picked[i] = values[size_t(sources[i])];
    store_doubles(result, picked.data());
  } else {
    std::vector<int64_t> values = load_ints(x), picked(sources.size());
    for (size_t i = 0; i < sources.size(); ++i) picked[i] = values[size_t(sources[i])];
    store_ints(result, picked.data());
  }
  return {result};
}

std::vector<Tensor> iota_op(const Op& op, const std::vector<Tensor>&, const Sizes& out) {
  ALLOY_CHECK(out[0].size() == 1, "iota: output ", shape_str(out[0]), " is not 1-D");
  const int64_t n = out[0][0];
  DType dtype = op.outputs[0]->dtype();
  if (dtype == DType::i32 && n - 1 > std::numeric_limits<int32_t>::max())
    user_error(op.loc, "iota: length ", n, " counts past i32's largest value; use dtype=i64");
  Tensor result = Tensor::empty(dtype, out[0]);
  if (is_floating(dtype)) {
    std::vector<double> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[size_t(i)] = double(i);
    store_doubles(result, values.data());
  } else {
    std::vector<int64_t> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[size_t(i)] = i;
    store_ints(result, values.data());
  }
  return {result};
}

}  // namespace alloy::reference
