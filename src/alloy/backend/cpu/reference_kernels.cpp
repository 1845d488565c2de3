// The strided walk and the dense load/store shared by the reference kernels.
#include "alloy/backend/cpu/reference_kernels.h"

#include <cmath>
#include <string>

#include "alloy/ir/op_table.h"

namespace alloy::reference {
namespace {

template <class T, class Out, class Convert>
void load_typed(const Tensor& t, const Shape& sizes, const Shape& strides, Out* out, Convert convert) {
  const T* p = static_cast<const T*>(t.data());
  for_each_offset(sizes, strides, [&](int64_t i, int64_t offset) { out[i] = convert(p[offset]); });
}

template <class T, class In, class Convert>
void store_typed(const Tensor& dst, const In* values, Convert convert) {
  T* p = static_cast<T*>(dst.data());
  for_each_offset(dst.sizes(), dst.strides(), [&](int64_t i, int64_t offset) { p[offset] = convert(values[i]); });
}


}  // namespace

std::string shape_str(const Shape& sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

Walk coalesce(const Shape& sizes, const Shape& strides) {
  Walk w;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!w.sizes.empty() && w.strides.back() == strides[d] * sizes[d]) {
      w.sizes.back() *= sizes[d];
      w.strides.back() = strides[d];
    } else {
      w.sizes.push_back(sizes[d]);
      w.strides.push_back(strides[d]);
    }
  }
  return w;
}

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Shape broadcast_strides(const Tensor& t, const Shape& out_sizes, const Op& op, int input_index) {
  int offset = int(out_sizes.size()) - t.dim();
  if (offset < 0)
    user_error(op.loc, op_name(op.kind), ": input ", input_index, " has shape ", shape_str(t.sizes()),
               ", which has more axes than the result ", shape_str(out_sizes));
  Shape strides(out_sizes.size(), 0);
  for (int i = 0; i < t.dim(); ++i) {
    int64_t n = t.size(i), m = out_sizes[offset + i];
    if (n == m) strides[offset + i] = t.stride(i);
    else if (n != 1)
      user_error(op.loc, op_name(op.kind), ": input ", input_index, " has shape ", shape_str(t.sizes()),
                 ", which does not broadcast to ", shape_str(out_sizes), " (axis ", i, ": ", n, " vs ", m, ")");
  }
  return strides;
}

std::vector<double> load_doubles(const Tensor& t, const Shape& sizes, const Shape& strides) {
  std::vector<double> out(size_t(numel_of(sizes)));
  if (out.empty()) return out;
  double* o = out.data();
  switch (t.dtype()) {
    case DType::f64: load_typed<double>(t, sizes, strides, o, [](double v) { return v; }); break;
    case DType::f32: load_typed<float>(t, sizes, strides, o, [](float v) { return double(v); }); break;
    case DType::f16: load_typed<uint16_t>(t, sizes, strides, o, [](uint16_t v) { return double(f16_bits_to_float(v)); }); break;
    case DType::bf16: load_typed<uint16_t>(t, sizes, strides, o, [](uint16_t v) { return double(bf16_bits_to_float(v)); }); break;
    case DType::i64: load_typed<int64_t>(t, sizes, strides, o, [](int64_t v) { return double(v); }); break;
    case DType::i32: load_typed<int32_t>(t, sizes, strides, o, [](int32_t v) { return double(v); }); break;
    case DType::boolean: load_typed<uint8_t>(t, sizes, strides, o, [](uint8_t v) { return v ? 1.0 : 0.0; }); break;
  }
  return out;
}

std::vector<int64_t> load_ints(const Tensor& t, const Shape& sizes, const Shape& strides) {
  if (is_floating(t.dtype())) {  // a scalar given as a float: truncate like a C cast
    std::vector<double> d = load_doubles(t, sizes, strides);
    std::vector<int64_t> out(d.size());
    for (size_t i = 0; i < d.size(); ++i) out[i] = float_to_int(d[i], DType::i64);
    return out;
  }
  std::vector<int64_t> out(size_t(numel_of(sizes)));
  if (out.empty()) return out;
  int64_t* o = out.data();
  switch (t.dtype()) {
    case DType::i64: load_typed<int64_t>(t, sizes, strides, o, [](int64_t v) { return v; }); break;
    case DType::i32: load_typed<int32_t>(t, sizes, strides, o, [](int32_t v) { return int64_t(v); }); break;
    case DType::boolean: load_typed<uint8_t>(t, sizes, strides, o, [](uint8_t v) { return int64_t(v != 0); }); break;
    default: internal_error("load_ints of ", dtype_name(t.dtype()));
  }
  return out;
}

// Half dtypes from f32, as PyTorch's kernels compute them (in f32, then rounded): a value is
// rounded to f32 first, then to bf16 or f16 (0.21484375 * 3.3 is 0.7109375 in bf16 that way, as
// in PyTorch and the generated kernels; the exact product's nearest is 0.70703125).
void store_doubles(const Tensor& dst, const double* v) {
  if (dst.numel() == 0) return;
  switch (dst.dtype()) {
    case DType::f64: store_typed<double>(dst, v, [](double x) { return x; }); break;
    case DType::f32: store_typed<float>(dst, v, [](double x) { return float(x); }); break;
    case DType::f16: store_typed<uint16_t>(dst, v, [](double x) { return double_to_f16_bits(double(float(x))); }); break;
    case DType::bf16: store_typed<uint16_t>(dst, v, [](double x) { return double_to_bf16_bits(double(float(x))); }); break;
    case DType::i64: store_typed<int64_t>(dst, v, [](double x) { return float_to_int(x, DType::i64); }); break;
    case DType::i32: store_typed<int32_t>(dst, v, [](double x) { return int32_t(float_to_int(x, DType::i32)); }); break;
    case DType::boolean: store_typed<uint8_t>(dst, v, [](double x) { return uint8_t(x != 0.0); }); break;
  }
}

void store_ints(const Tensor& dst, const int64_t* v) {
  if (dst.numel() == 0) return;
  switch (dst.dtype()) {
    case DType::i64: store_typed<int64_t>(dst, v, [](int64_t x) { return x; }); break;
    case DType::i32: store_typed<int32_t>(dst, v, [](int64_t x) { return int32_t(uint32_t(uint64_t(x))); }); break;
    case DType::boolean: store_typed<uint8_t>(dst, v, [](int64_t x) { return uint8_t(x != 0); }); break;
    default: {
      std::vector<double> d(size_t(dst.numel()));
      for (size_t i = 0; i < d.size(); ++i) d[i] = double(v[i]);
      store_doubles(dst, d.data());
    }
  }
}

void copy_into(const Tensor& src, const Tensor& dst) {
  ALLOY_CHECK(src.sizes() == dst.sizes(), "copy_into between ", src.str(), " and ", dst.str());
  if (!is_floating(src.dtype()) && !is_floating(dst.dtype())) {
    std::vector<int64_t> values = load_ints(src);
    store_ints(dst, values.data());
  } else {
    std::vector<double> values = load_doubles(src);
    store_doubles(dst, values.data());
  }
}

double round_to(DType t, double value) {
  switch (t) {
    case DType::f64: return value;
    case DType::f32: return double(float(value));
    case DType::f16: return double(f16_bits_to_float(double_to_f16_bits(value)));
    case DType::bf16: return double(bf16_bits_to_float(double_to_bf16_bits(value)));
    default: internal_error("round_to of ", dtype_name(t));
  }
}

int normalize_axis(const Op& op, int64_t axis, int rank, const char* what) {
  if (axis < -rank || axis >= rank)
    user_error(op.loc, op_name(op.kind), ": ", what, ": axis ", axis, " is out of range for rank ", rank,
               " (expected ", -rank, " to ", rank - 1, ")");
  return int(axis < 0 ? axis + rank : axis);
}

}  // namespace alloy::reference
