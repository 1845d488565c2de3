// Internal to the CPU reference: the strided walk, dense load/store in double or int64, and the
// per-family entry points that reference_ops.cpp's table dispatches to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy::reference {

using Shape = std::vector<int64_t>;
using Sizes = std::vector<Shape>;

// Axes merged where one stride continues the next, so a contiguous walk is one flat loop.
struct Walk {
  Shape sizes;
  Shape strides;
};
Walk coalesce(const Shape& sizes, const Shape& strides);

// Calls fn(i, offset) for every element of the (sizes, strides) view in row-major order, where i
// counts 0, 1, ... and offset is in elements relative to the view's first element.
template <class Fn>
void for_each_offset(const Shape& sizes, const Shape& strides, Fn&& fn) {
  for (int64_t s : sizes)
    if (s == 0) return;
  Walk w = coalesce(sizes, strides);
  int rank = int(w.sizes.size());
  if (rank == 0) {
    fn(int64_t(0), int64_t(0));
    return;
  }
  const int64_t inner = w.sizes[rank - 1], inner_stride = w.strides[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t base = 0, i = 0;
  while (true) {
    for (int64_t k = 0; k < inner; ++k) fn(i + k, base + k * inner_stride);
    i += inner;
    int d = rank - 2;
    for (; d >= 0; --d) {
      base += w.strides[d];
      if (++index[d] < w.sizes[d]) break;
      base -= w.strides[d] * w.sizes[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

int64_t numel_of(const Shape& sizes);
std::string shape_str(const Shape& sizes);  // "[2, 3]"

// Strides that read `t` as if broadcast (NumPy, right-aligned) to `out_sizes`; a user error at
// `op`'s location names input `input_index` when the shapes do not broadcast.
Shape broadcast_strides(const Tensor& t, const Shape& out_sizes, const Op& op, int input_index);

// The elements of the view (t's buffer and offset, `sizes`, `strides`) in row-major order.
std::vector<double> load_doubles(const Tensor& t, const Shape& sizes, const Shape& strides);
std::vector<int64_t> load_ints(const Tensor& t, const Shape& sizes, const Shape& strides);
inline std::vector<double> load_doubles(const Tensor& t) { return load_doubles(t, t.sizes(), t.strides()); }
inline std::vector<int64_t> load_ints(const Tensor& t) { return load_ints(t, t.sizes(), t.strides()); }

// Writes values (row-major over dst's sizes) into dst, whatever its strides, rounding to its
// dtype (bf16/f16 round to nearest even; floats to ints truncate, NaN and inf give 0).
void store_doubles(const Tensor& dst, const double* values);
void store_ints(const Tensor& dst, const int64_t* values);

// Copies src into dst (same sizes), converting dtypes (exactly between integer types).
void copy_into(const Tensor& src, const Tensor& dst);

// `value` as a tensor of dtype `t` would hold it (floating dtypes only).
double round_to(DType t, double value);

// Normalizes a (possibly negative) axis; a user error at op's location when out of range.
int normalize_axis(const Op& op, int64_t axis, int rank, const char* what);

// ---- the families (one entry point each; the op's kind selects the row inside) ----------
std::vector<Tensor> unary_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> binary_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> where_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> cast_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> activation_backward_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> relu_mask_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> relu_backward_mask_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> reduction_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> var_mean_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> view_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> reshape_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> cat_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> gather_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> iota_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> matmul_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> linear_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> softmax_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> layer_norm_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);
std::vector<Tensor> rms_norm_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out);

}  // namespace alloy::reference
