// Shared test helpers: source paths, and the one comparison every backend test uses.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "alloy/ir/extent.h"
#include "alloy/tensor/tensor.h"

namespace alloy::testing {

std::string source_path(const std::string& relative);  // ALLOY_SOURCE_DIR + "/" + relative
std::string read_file(const std::string& path);

// `actual` matches `expected` by runtime/validate.h's rule (the one fd.validate uses too).
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double scale = 1.0);

// Runs `fusion_text` on the CPU reference and on the GPU with the same fresh random inputs and
// poisoned GPU outputs, and compares every output. Skips the test when there is no GPU.
// `scale` widens the dtype's tolerance (an f32 result computed from bf16 GEMM outputs inherits
// bf16 rounding differences).
// With `ran`, also hands back what the GPU side planned and launched (`--dump segments`, and
// `--dump cuda` after the run: kernels, and each matmul segment's cuBLASLt call or fallback), for
// tests that must show which path ran, not only that the numbers agree.
struct GpuRun {
  std::string segments, launched;
};
void expect_gpu_matches_cpu(const std::string& fusion_text, const Bindings& sizes, uint64_t seed = 7, double scale = 1.0,
                            GpuRun* ran = nullptr);

bool gpu_available();
std::string gpu_unavailable_reason();

// True where ALLOY_REQUIRE_GPU=1 (scripts/gpu-check sets it on the GPU machine): there a GPU test
// that cannot run is a failure, so a driver problem or a build without the toolkit cannot pass
// as a green run of skipped tests.
bool gpu_required();

// Ends the current test as skipped, saying why; where ALLOY_REQUIRE_GPU=1, as failed. For tests
// that need a GPU or the CUDA backend, not for skips by design (a second GPU, a job size).
#define ALLOY_SKIP_GPU_TEST(why)                                                   \
  switch (0)                                                                       \
  case 0:                                                                          \
  default:                                                                         \
    if (::alloy::testing::gpu_required())                                          \
      GTEST_FAIL() << "ALLOY_REQUIRE_GPU=1, but this GPU test cannot run: " << why; \
    else                                                                           \
      GTEST_SKIP() << why

// Returns from the test (skipped, or failed under ALLOY_REQUIRE_GPU=1) where no CUDA GPU is usable.
#define ALLOY_REQUIRE_GPU()                  \
  if (::alloy::testing::gpu_available()) {   \
  } else                                     \
    ALLOY_SKIP_GPU_TEST("no CUDA GPU available: " << ::alloy::testing::gpu_unavailable_reason())

// The body of the placeholder test a CUDA-only test file holds in a build without the toolkit,
// so the file reports as skipped with the reason instead of dropping out of the list.
#define ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT() \
  ALLOY_SKIP_GPU_TEST("built without the CUDA toolkit (configure with -DALLOY_REQUIRE_CUDA=ON to make that an error)")

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

// A kernel tuning file (ALLOY_KERNEL_TUNING) setting `keys` ('"inner_outer_prefetch": false') in an
// entry for each architecture of the built-in table (sm_80, sm_90; a device takes the entry at or
// below its own), in a fresh temporary folder removed with it (a path of its own: the runtime
// reads each path's file once).
struct TuningFile {
  explicit TuningFile(const std::string& keys);
  ~TuningFile();
  TuningFile(const TuningFile&) = delete;
  TuningFile& operator=(const TuningFile&) = delete;
  std::string dir, path;
};

}  // namespace alloy::testing
