// Helpers for the CPU reference tests: build one op in a fresh fusion, make CPU tensors from
// values (contiguous or deliberately strided), run the op and read results back in row-major
// order with a plain index walk (independent of the kernels' own strided iteration).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "alloy/backend/cpu/reference_ops.h"
#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy::reftest {

using Shape = std::vector<int64_t>;

inline Tensor make(DType dtype, Shape sizes, const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, sizes);
  EXPECT_EQ(int64_t(values.size()), t.numel()) << "test data size";
  for (size_t i = 0; i < values.size(); ++i) store_double(t.data(), dtype, int64_t(i), values[i]);
  return t;
}

inline Tensor make_ints(DType dtype, Shape sizes, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(dtype, sizes);
  EXPECT_EQ(int64_t(values.size()), t.numel()) << "test data size";
  for (size_t i = 0; i < values.size(); ++i) store_int(t.data(), dtype, int64_t(i), values[i]);
  return t;
}

inline Tensor scalar(DType dtype, double v) { return make(dtype, {}, {v}); }

inline std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

// Element offset of row-major index k of t (division walk: deliberately the slow, obvious way).
inline int64_t offset_of(const Tensor& t, int64_t k) {
  int64_t offset = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    offset += (k % t.size(d)) * t.stride(d);
    k /= t.size(d);
  }
  return offset;
}

inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (int64_t k = 0; k < t.numel(); ++k) out.push_back(load_as_double(t.data(), t.dtype(), offset_of(t, k)));
  return out;
}

inline std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < t.numel(); ++k) out.push_back(load_as_int(t.data(), t.dtype(), offset_of(t, k)));
  return out;
}

// A copy of `values` laid out with axes reversed in memory and then transposed back: same
// logical tensor, non-contiguous strides and a non-zero offset into a larger buffer.
inline Tensor strided_copy(DType dtype, Shape sizes, const std::vector<double>& vals) {
  int rank = int(sizes.size());
  Shape reversed(sizes.rbegin(), sizes.rend());
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  Tensor storage = Tensor::empty(dtype, {n + 5});
  Shape strides(rank);
  int64_t running = 1;
  for (int d = 0; d < rank; ++d) {  // axis 0 fastest
    strides[d] = running;
    running *= std::max<int64_t>(sizes[d], 1);
  }
  Tensor t = storage.as_strided(sizes, strides, 5);
  for (int64_t k = 0; k < n; ++k) store_double(t.data(), dtype, offset_of(t, k), vals[size_t(k)]);
  return t;
}

inline double bf16(double v) { return bf16_bits_to_float(float_to_bf16_bits(float(v))); }
inline double f16(double v) { return f16_bits_to_float(float_to_f16_bits(float(v))); }

// One op in its own fusion; run() gives its outputs for the given tensors.
struct OpHarness {
  Fusion fusion{"reference_test"};

  Value* input(DType dtype, const Shape& sizes) {
    ValueType t;
    t.dtype = dtype;
    for (int64_t s : sizes) t.shape.push_back(Extent::constant(s));
    return fusion.add_input(fusion.fresh_name("in"), t);
  }
  Value* scalar_input(DType dtype) {
    ValueType t;
    t.dtype = dtype;
    t.is_scalar = true;
    return fusion.add_input(fusion.fresh_name("s"), t);
  }
  Value* literal(double v) { return fusion.add_literal({Literal::Kind::real, 0, v}); }
  Value* int_literal(int64_t v) { return fusion.add_literal({Literal::Kind::integer, v, 0}); }

  const Op& add(OpKind kind, std::vector<Value*> inputs, std::vector<NamedAttr> attrs = {}) {
    fusion.add_op(kind, std::move(inputs), std::move(attrs));
    return *fusion.ops().back();
  }

  // Runs the last op; output sizes come from its (constant) inferred shapes.
  std::vector<Tensor> run_all(const std::vector<Tensor>& tensors) {
    const Op& op = *fusion.ops().back();
    std::vector<Shape> sizes;
    for (const Value* out : op.outputs) {
      Shape s;
      for (const Extent& e : out->shape()) s.push_back(*e.constant_value());
      sizes.push_back(s);
    }
    return run_reference_op(op, tensors, sizes);
  }
  Tensor run(const std::vector<Tensor>& tensors) { return run_all(tensors).at(0); }
};

inline NamedAttr attr(std::string name, Attr value) { return {std::move(name), std::move(value)}; }
inline NamedAttr ints_attr(std::string name, const std::vector<int64_t>& v) { return {std::move(name), Attr::ints(v)}; }

}  // namespace alloy::reftest
