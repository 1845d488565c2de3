#include "alloy/runtime/validate.h"

#include <cmath>
#include <sstream>

#include "alloy/runtime/executor.h"

namespace alloy {
namespace {

void tolerance(DType t, double& rtol, double& atol) {
  switch (t) {
    case DType::bf16: rtol = 2e-2; atol = 2e-2; break;
    case DType::f16: rtol = 5e-3; atol = 5e-3; break;
    case DType::f32: rtol = 1e-4; atol = 1e-5; break;
    case DType::f64: rtol = 1e-9; atol = 1e-12; break;
    default: rtol = 0; atol = 0;
  }
}

// The relative L2 error a few flipped roundings may leave (0: none allowed).
double l2_tolerance(DType t) {
  switch (t) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    case DType::f32: return 1e-5;
    default: return 0;
  }
}

// The spacing of the dtype's values just above 1 (0 for integers and bools).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}

}  // namespace

std::string compare_to_reference(const Tensor& actual_any, const Tensor& expected_any, double scale) {
  Tensor actual = packed_cpu(to_cpu(actual_any)), expected = packed_cpu(to_cpu(expected_any));
  if (actual.dtype() != expected.dtype())
    return std::string("dtype ") + std::string(dtype_name(actual.dtype())) + ", expected " + std::string(dtype_name(expected.dtype()));
  if (actual.sizes() != expected.sizes()) return "shape " + actual.str() + ", expected " + expected.str();
  const int64_t n = actual.numel();
  double sum2 = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    double e = load_as_double(expected.data(), expected.dtype(), i);
    if (std::isfinite(e)) sum2 += e * e, ++finite;
  }
  double rtol, atol;
  tolerance(actual.dtype(), rtol, atol);
  atol = std::max(atol, 4 * unit_roundoff(actual.dtype()) * (finite ? std::sqrt(sum2 / double(finite)) : 0.0));
  rtol *= scale;
  atol *= scale;
  double diff2 = 0, ref2 = 0;
  int64_t bad = 0, very_bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < n; ++i) {
    double a = load_as_double(actual.data(), actual.dtype(), i), e = load_as_double(expected.data(), expected.dtype(), i);
    bool ok = (std::isnan(a) && std::isnan(e)) || a == e || std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!ok && bad++ < 5) first << (bad > 1 ? ", " : "") << "[" << i << "] " << a << " vs " << e;
    if (!ok && !(std::fabs(a - e) <= 4 * (atol + rtol * std::fabs(e)))) ++very_bad;
    if (std::isfinite(a) && std::isfinite(e)) diff2 += (a - e) * (a - e), ref2 += e * e;
  }
  if (bad == 0) return {};
  const int64_t scattered = std::max<int64_t>(1, n / 1000);
  double l2_tol = l2_tolerance(actual.dtype());
  if (very_bad == 0 && bad <= scattered && l2_tol > 0 && std::sqrt(diff2) <= l2_tol * std::sqrt(ref2)) return {};
  std::ostringstream out;
  out << bad << " of " << n << " elements differ (" << dtype_name(actual.dtype()) << ": rtol " << rtol << ", atol " << atol
      << "); flat index, actual vs expected: " << first.str();
  return out.str();
}

}  // namespace alloy
