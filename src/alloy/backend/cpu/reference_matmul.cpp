// Reference kernels of matmul (torch.matmul: 1-D operands, broadcast batch axes) and linear
// (x @ w^T + bias, w [out, in] or [in]). Operands are first made contiguous in double (integers:
// int64, wrapping), accumulated there, and rounded once to the output dtype, as a GEMM with a
// wide accumulator and a fused bias epilogue would.
#include <algorithm>
#include <string>
#include <type_traits>

#include "alloy/backend/cpu/reference_kernels.h"
#include "alloy/ir/op_table.h"

namespace alloy::reference {
namespace {

// The view's elements in row-major order, as the accumulation type.
template <class T>
std::vector<T> load_as(const Tensor& t) {
  if constexpr (std::is_same_v<T, double>) {
    return load_doubles(t);
  } else {
    std::vector<int64_t> v = load_ints(t);
    return std::vector<T>(v.begin(), v.end());  // int64 -> uint64 so products wrap without UB
  }
}

template <class T>
void store_as(const Tensor& dst, const std::vector<T>& values) {
  if constexpr (std::is_same_v<T, double>) {
    store_doubles(dst, values.data());
  } else {
    std::vector<int64_t> v(values.begin(), values.end());
    store_ints(dst, v.data());
  }
}

// c[M, N] += a[M, K] @ b[K, N], all contiguous; the inner loop runs over contiguous rows of b.
template <class T>
void gemm(const T* a, const T* b, T* c, int64_t m_size, int64_t k_size, int64_t n_size) {
  for (int64_t m = 0; m < m_size; ++m) {
    T* c_row = c + m * n_size;
    const T* a_row = a + m * k_size;
    for (int64_t k = 0; k < k_size; ++k) {
      const T a_mk = a_row[k];
      const T* b_row = b + k * n_size;
      for (int64_t n = 0; n < n_size; ++n) c_row[n] += a_mk * b_row[n];
    }
  }
}

// Offsets (in whole matrices) of each output batch entry into an operand's batch axes.
std::vector<int64_t> batch_offsets(const Shape& operand_batch, const Shape& out_batch) {
  Shape strides(out_batch.size(), 0);
  int64_t running = 1;
  size_t shift = out_batch.size() - operand_batch.size();
  for (size_t i = operand_batch.size(); i-- > 0;) {
    if (operand_batch[i] != 1) strides[shift + i] = running;
    running *= operand_batch[i];
  }
  std::vector<int64_t> offsets(size_t(numel_of(out_batch)));
  for_each_offset(out_batch, strides, [&](int64_t i, int64_t offset) { offsets[i] = offset; });
  return offsets;
}

Shape broadcast_batch(const Op& op, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t x = i + a.size() >= out.size() ? a[i + a.size() - out.size()] : 1;
    int64_t y = i + b.size() >= out.size() ? b[i + b.size() - out.size()] : 1;
    if (x != y && x != 1 && y != 1)
      user_error(op.loc, "matmul: batch axes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

template <class T>
Tensor matmul_as(const Op& op, const Tensor& a, const Tensor& b, const Shape& out_sizes) {
  int ra = a.dim(), rb = b.dim();
  Shape batch_a(a.sizes().begin(), a.sizes().end() - 2), batch_b(b.sizes().begin(), b.sizes().end() - 2);
  int64_t m_size = a.size(ra - 2), k_size = a.size(ra - 1), n_size = b.size(rb - 1);
  Shape batch = broadcast_batch(op, batch_a, batch_b);
  std::vector<T> av = load_as<T>(a), bv = load_as<T>(b);
  std::vector<T> c(size_t(numel_of(batch) * m_size * n_size), T(0));
  std::vector<int64_t> a_at = batch_offsets(batch_a, batch), b_at = batch_offsets(batch_b, batch);
  for (size_t i = 0; i < a_at.size(); ++i)
    gemm(av.data() + a_at[i] * m_size * k_size, bv.data() + b_at[i] * k_size * n_size, c.data() + i * m_size * n_size,
         m_size, k_size, n_size);
  ALLOY_CHECK(numel_of(out_sizes) == int64_t(c.size()), "matmul: output ", shape_str(out_sizes), " has the wrong size");
  Tensor out = Tensor::empty(op.outputs[0]->dtype(), out_sizes);
  store_as(out, c);
  return out;
}

template <class T>
Tensor linear_as(const Op& op, const std::vector<Tensor>& in, const Shape& out_sizes) {
  const Tensor &x = in[0], &w = in[1];
  int64_t in_features = x.size(x.dim() - 1);
  int64_t rows = numel_of(Shape(x.sizes().begin(), x.sizes().end() - 1));
  // w^T as [in, out]: a 1-D weight is one output column.
  Tensor w_t = w.dim() == 2 ? w.permute({1, 0}) : w.as_strided({w.size(0), 1}, {w.stride(0), 0}, w.offset());
  int64_t out_features = w_t.size(1);
  std::vector<T> xv = load_as<T>(x), wv = load_as<T>(w_t);
  std::vector<T> y(size_t(rows * out_features), T(0));
  gemm(xv.data(), wv.data(), y.data(), rows, in_features, out_features);
  if (in.size() == 3) {
    std::vector<T> bias = load_as<T>(in[2]);
    bool one = bias.size() == 1;
    if (!one && int64_t(bias.size()) != out_features)
      user_error(op.loc, "linear: bias has ", bias.size(), " elements; expected ", out_features, " (one per output feature)");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out_features; ++j) y[r * out_features + j] += bias[one ? 0 : j];
  }
  ALLOY_CHECK(numel_of(out_sizes) == int64_t(y.size()), "linear: output ", shape_str(out_sizes), " has the wrong size");
  Tensor out = Tensor::empty(op.outputs[0]->dtype(), out_sizes);
  store_as(out, y);
  return out;
}

}  // namespace

std::vector<Tensor> matmul_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  Tensor a = in[0], b = in[1];
  if (a.dim() == 0 || b.dim() == 0) user_error(op.loc, "matmul: both operands need at least 1 dimension");
  // torch.matmul: a 1-D a is a row [1, K], a 1-D b a column [K, 1]; the added axis is dropped.
  if (a.dim() == 1) a = a.as_strided({1, a.size(0)}, {0, a.stride(0)}, a.offset());
  if (b.dim() == 1) b = b.as_strided({b.size(0), 1}, {b.stride(0), 0}, b.offset());
  if (a.size(a.dim() - 1) != b.size(b.dim() - 2))
    user_error(op.loc, "matmul: contraction sizes differ: a is ", shape_str(in[0].sizes()), ", b is ", shape_str(in[1].sizes()));
  if (is_floating(op.outputs[0]->dtype())) return {matmul_as<double>(op, a, b, out[0])};
  return {matmul_as<uint64_t>(op, a, b, out[0])};
}

std::vector<Tensor> linear_op(const Op& op, const std::vector<Tensor>& in, const Sizes& out) {
  const Tensor &x = in[0], &w = in[1];
  if (x.dim() == 0 || w.dim() == 0 || w.dim() > 2 || x.size(x.dim() - 1) != w.size(w.dim() - 1))
    user_error(op.loc, "linear: x is ", shape_str(x.sizes()), " and weight is ", shape_str(w.sizes()),
               "; expected weight [out_features, in_features] (or [in_features]) with in_features = x's last axis");
  if (is_floating(op.outputs[0]->dtype())) return {linear_as<double>(op, in, out[0])};
  return {linear_as<uint64_t>(op, in, out[0])};
}

}  // namespace alloy::reference
