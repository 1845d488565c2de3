// Shared test helpers: source paths, and the one comparison every backend test uses.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "alloy/ir/extent.h"
#include "alloy/runtime/tensor.h"

namespace alloy::testing {

std::string source_path(const std::string& relative);  // ALLOY_SOURCE_DIR + "/" + relative
std::string read_file(const std::string& path);

// Elementwise |actual - expected| <= atol + rtol * |expected| with tolerances set by `dtype`
// (exact for integers and bools), atol at least 4 units in the last place of the expected values'
// RMS (fused code rounds intermediates elsewhere than the reference); NaN must match NaN. Both
// tensors are compared on the CPU.
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double scale = 1.0);

// Runs `fusion_text` on the CPU reference and on the GPU with the same fresh random inputs and
// poisoned GPU outputs, and compares every output. Skips the test when there is no GPU.
// `scale` widens the dtype's tolerance (an f32 result computed from bf16 GEMM outputs inherits
// bf16 rounding differences).
void expect_gpu_matches_cpu(const std::string& fusion_text, const Bindings& sizes, uint64_t seed = 7, double scale = 1.0);

bool gpu_available();

// Sets an environment variable for one scope (read-per-use settings such as ALLOY_DISABLE_EPILOGUES).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
  std::optional<std::string> old_setting_;  // a setting of common/settings.h: set and restored too
};

}  // namespace alloy::testing
