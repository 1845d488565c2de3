#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <unistd.h>

#include "alloy/backend/backend.h"
#include "alloy/common/settings.h"
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "alloy/runtime/validate.h"

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

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double scale) {
  std::string difference = compare_to_reference(actual, expected, scale);
  if (difference.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << difference;
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
  // in-place outputs write their inputs: each run gets its own copy of those
  auto own_targets = [&](const Fusion& f) {
    std::vector<Tensor> own = inputs;
    for (size_t i = 0; i < own.size(); ++i)
      if (std::find(f.output_aliases().begin(), f.output_aliases().end(), f.inputs()[i]) != f.output_aliases().end())
        own[i] = cpu_copy(own[i]);
    return own;
  };
  std::vector<Tensor> expected = cpu.run(own_targets(cpu.fusion()));
  std::vector<Tensor> actual = gpu.run(own_targets(gpu.fusion()));
  gpu.synchronize();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_TRUE(tensors_close(actual[i], expected[i], scale)) << "output " << i << " of\n" << fusion_text << "\nsegments:\n" << gpu.dump("segments");
  if (ran) *ran = GpuRun{gpu.dump("segments"), gpu.dump("cuda")};
}

TuningFile::TuningFile(const std::string& keys) {
  static int made = 0;
  dir = (std::filesystem::temp_directory_path() / ("alloy_tuning_" + std::to_string(getpid()) + "_" + std::to_string(made++))).string();
  std::filesystem::create_directories(dir);
  path = dir + "/tuning.json";
  std::ofstream(path) << "{\"sm_80\": {" << keys << "}, \"sm_90\": {" << keys << "}}";
}

TuningFile::~TuningFile() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
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
