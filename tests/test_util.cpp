#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "alloy/backend/backend.h"
#include "alloy/common/settings.h"
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"

namespace alloy::testing {

std::string source_path(const std::string& relative) { return std::string(ALLOY_SOURCE_DIR) + "/" + relative; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool gpu_available() { return backend::device_runtime(DeviceKind::cuda).available(); }

std::string gpu_unavailable_reason() { return backend::device_runtime(DeviceKind::cuda).unavailable_reason(); }

bool gpu_required() {
  const char* v = std::getenv("ALLOY_REQUIRE_GPU");
  return v && std::string_view(v) == "1";
}

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

// The root mean square of a CPU tensor's finite values.
double rms(const Tensor& t) {
  double sum = 0;
  int64_t count = 0, n = t.numel();
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t offset = 0;
    for (int d = 0; d < t.dim(); ++d) offset += index[d] * t.stride(d);
    double v = load_as_double(t.data(), t.dtype(), offset);
    if (std::isfinite(v)) sum += v * v, ++count;
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++index[d] < t.size(d)) break;
      index[d] = 0;
    }
  }
  return count ? std::sqrt(sum / double(count)) : 0.0;
}

}  // namespace

::testing::AssertionResult tensors_close(const Tensor& actual_any, const Tensor& expected_any, double scale) {
  Tensor actual = to_cpu(actual_any), expected = to_cpu(expected_any);
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual.dtype()) << " vs " << dtype_name(expected.dtype());
  if (actual.sizes() != expected.sizes()) return ::testing::AssertionFailure() << "shape " << actual.str() << " vs " << expected.str();
  double rtol, atol;
  tolerance(actual.dtype(), rtol, atol);
  // Fused GPU code rounds intermediates at other points than the op-by-op reference (a GEMM's
  // epilogue computes GELU from the unrounded product); through a later contraction that is an
  // error on the scale of the whole tensor, not of each element: allow a few units in the last
  // place of the expected values' RMS.
  atol = std::max(atol, 4 * unit_roundoff(actual.dtype()) * rms(expected));
  rtol *= scale;
  atol *= scale;
  // Elementwise within (atol, rtol); or, for floats, a few scattered elements outside it (long
  // bf16 reductions flip a few roundings): at most one in a thousand (at least one), each within
  // 4x the tolerance, and the relative L2 error within what the dtype allows. A wrong row, or one
  // element off by more than a flipped rounding can make it, still fails (test_util_test.cpp).
  double l2_tol = actual.dtype() == DType::bf16 ? 1e-2 : actual.dtype() == DType::f16 ? 2e-3 : actual.dtype() == DType::f32 ? 1e-5 : 0;
  double diff2 = 0, ref2 = 0;
  int64_t n = actual.numel(), bad = 0, very_bad = 0;
  const int64_t scattered = std::max<int64_t>(1, n / 1000);
  std::vector<int64_t> index(actual.dim(), 0);
  std::ostringstream first;
  for (int64_t k = 0; k < n; ++k) {
    int64_t oa = 0, oe = 0;
    for (int d = 0; d < actual.dim(); ++d) {
      oa += index[d] * actual.stride(d);
      oe += index[d] * expected.stride(d);
    }
    double a = load_as_double(actual.data(), actual.dtype(), oa), e = load_as_double(expected.data(), expected.dtype(), oe);
    bool ok = (std::isnan(a) && std::isnan(e)) || (a == e) || std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!ok && bad++ < 5) first << "  at flat index " << k << ": " << a << " vs expected " << e << "\n";
    if (!ok && !(std::fabs(a - e) <= 4 * (atol + rtol * std::fabs(e)))) ++very_bad;
    if (std::isfinite(a) && std::isfinite(e)) {
      diff2 += (a - e) * (a - e);
      ref2 += e * e;
    }
    for (int d = actual.dim() - 1; d >= 0; --d) {
      if (++index[d] < actual.size(d)) break;
      index[d] = 0;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  if (very_bad == 0 && bad <= scattered && l2_tol > 0 && std::sqrt(diff2) <= l2_tol * std::sqrt(ref2))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " elements differ (rtol " << rtol << ", atol " << atol << "):\n"
                                       << first.str();
}

void expect_gpu_matches_cpu(const std::string& fusion_text, const Bindings& sizes, uint64_t seed, double scale, GpuRun* ran) {
  ALLOY_REQUIRE_GPU();
  auto cpu_fusion = parse_fusion(fusion_text, "test.fusion", std::nullopt);
  auto gpu_fusion = parse_fusion(fusion_text, "test.fusion", std::nullopt);
  std::vector<Tensor> given(cpu_fusion->inputs().size());
  std::vector<Tensor> inputs = complete_inputs(*cpu_fusion, given, sizes, seed);
  FusionExecutor cpu(std::move(cpu_fusion), {DeviceChoice::cpu});
  ExecutorOptions gpu_options{DeviceChoice::cuda};
  gpu_options.poison_outputs = true;
  FusionExecutor gpu(std::move(gpu_fusion), gpu_options);
  std::vector<Tensor> expected = cpu.run(inputs);
  std::vector<Tensor> actual = gpu.run(inputs);
  gpu.synchronize();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_TRUE(tensors_close(actual[i], expected[i], scale)) << "output " << i << " of\n" << fusion_text << "\nsegments:\n" << gpu.dump("segments");
  if (ran) *ran = GpuRun{gpu.dump("segments"), gpu.dump("cuda")};
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  setenv(name, value, 1);
  for (const settings::Setting& s : settings::all())
    if (std::string(s.name) == name) {
      old_setting_ = settings::current(name);
      settings::set(name, value);
    }
}

ScopedEnv::~ScopedEnv() {
  if (old_) setenv(name_, old_->c_str(), 1);
  else unsetenv(name_);
  if (old_setting_) settings::set(name_, *old_setting_);
}

}  // namespace alloy::testing
