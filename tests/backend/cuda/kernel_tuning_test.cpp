// The per-architecture table of kernel choices (kernel_tuning.h): the built-in entries by compute
// capability, a tuning file laid over them (ALLOY_KERNEL_TUNING), and bad files as user errors
// that name the file and the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "alloy/common/error.h"
#include "alloy/common/settings.h"
#include "test_util.h"
#ifdef ALLOY_HAVE_CUDA
#include "alloy/backend/cuda/kernel_tuning.h"
#include "alloy/backend/cuda/launch_plan.h"
#endif

namespace alloy {
namespace {

#ifndef ALLOY_HAVE_CUDA
TEST(KernelTuning, NeedsTheCudaToolkit) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
#else

using cuda::KernelTuning;

std::string error_of(const std::string& text) {
  try {
    cuda::with_tuning_file(cuda::builtin_kernel_tuning(), text, "tuning.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

// A file in a fresh temporary folder, removed with it. (Its own prefix: a tuning file is read once
// a path a process, so a path testing::TuningFile gives later in the same process must differ.)
struct TempFile {
  explicit TempFile(const std::string& text) {
    dir = std::filesystem::temp_directory_path() / ("alloy_tuning_file_test_" + std::to_string(getpid()) + "_" + std::to_string(count++));
    std::filesystem::create_directories(dir);
    path = (dir / "tuning.json").string();
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;
  std::string path;
  static inline int count = 0;
};

TEST(KernelTuning, BuiltInTableTakesTheNearestArchitectureAtOrBelow) {
  const cuda::KernelTuningTable& table = cuda::builtin_kernel_tuning();
  ASSERT_TRUE(table.count(80) && table.count(90)) << "entries for sm_80 and sm_90";
  KernelTuning h100 = cuda::tuning_for(table, 90);
  EXPECT_EQ(h100.row_threads, 256);
  EXPECT_EQ(h100.row_min_blocks, 0);
  EXPECT_EQ(h100.streaming_threads, 256);
  EXPECT_EQ(h100.column_min_steps, 16);
  EXPECT_EQ(h100.column_blocks_per_sm, 0);
  EXPECT_EQ(h100.grid_threads, 256);
  EXPECT_EQ(h100.grid_blocks_per_sm, 4);
  EXPECT_EQ(h100.grid_min_vectors, 8);
  EXPECT_FALSE(h100.recompute_values);
  EXPECT_TRUE(h100.inner_outer_prefetch);
  EXPECT_EQ(h100, KernelTuning{}) << "the struct's defaults are the built-in entry";
  EXPECT_EQ(cuda::tuning_for(table, 89), table.at(80));   // sm_89: the sm_80 entry
  EXPECT_EQ(cuda::tuning_for(table, 100), table.at(90));  // sm_100: the sm_90 entry
  EXPECT_EQ(cuda::tuning_for(table, 75), table.at(80));   // below every entry: the lowest
  EXPECT_EQ(cuda::kernel_tuning(9, 0), table.at(90));     // ALLOY_KERNEL_TUNING unset
}

TEST(KernelTuning, AFileSetsTheKeysItNamesOverTheBuiltInEntry) {
  cuda::KernelTuningTable table = cuda::with_tuning_file(
      cuda::builtin_kernel_tuning(),
      R"({"sm_90": {"row_threads": 128, "recompute_values": true, "grid_blocks_per_sm": 0, "inner_outer_prefetch": false},
          "sm_86": {"column_min_steps": 32}})",
      "tuning.json");
  KernelTuning h100 = cuda::tuning_for(table, 90);
  EXPECT_EQ(h100.row_threads, 128);
  EXPECT_TRUE(h100.recompute_values);
  EXPECT_FALSE(h100.inner_outer_prefetch);
  EXPECT_EQ(h100.grid_blocks_per_sm, 0) << "grid reductions off";
  EXPECT_EQ(h100.streaming_threads, 256) << "a key the file does not name keeps its value";
  KernelTuning ampere = cuda::tuning_for(table, 86);  // a new entry, from sm_80's
  EXPECT_EQ(ampere.column_min_steps, 32);
  EXPECT_EQ(ampere.row_threads, 256);
  EXPECT_EQ(cuda::tuning_for(table, 80), cuda::builtin_kernel_tuning().at(80)) << "sm_80 itself unchanged";
  EXPECT_EQ(cuda::tuning_for(table, 89).column_min_steps, 32) << "sm_89 now takes the sm_86 entry";
}

TEST(KernelTuning, TheSettingNamesTheFileTheLaunchTargetReads) {
  TempFile file(R"({"sm_90": {"row_threads": 512, "row_min_blocks": 2, "column_blocks_per_sm": 4}})");
  testing::ScopedEnv tuning("ALLOY_KERNEL_TUNING", file.path.c_str());
  EXPECT_EQ(cuda::kernel_tuning(9, 0).row_threads, 512);
  EXPECT_EQ(cuda::kernel_tuning(8, 0).row_threads, 256) << "the file has no sm_80 entry";
  cuda::LaunchTarget target = cuda::LaunchTarget::from_environment(9, 0, 132, 228 * 1024);
  EXPECT_EQ(target.tuning.row_min_blocks, 2);
  EXPECT_EQ(target.tuning.column_blocks_per_sm, 4);
  EXPECT_EQ(target.sm_count, 132);
}

TEST(KernelTuning, BadFilesAreUserErrorsNamingTheFileAndTheKey) {
  auto expect_error = [](const std::string& text, const std::string& says) {
    std::string error = error_of(text);
    EXPECT_EQ(error.rfind("tuning.json: ", 0), 0u) << error;
    EXPECT_NE(error.find(says), std::string::npos) << "for " << text << ": " << error;
  };
  expect_error("{\"sm_90\": {\"row_threads\": 256,}}", "not JSON");
  expect_error("[1, 2]", "expected an object of entries");
  expect_error(R"({"hopper": {"row_threads": 256}})", "\"hopper\": expected an architecture such as sm_90");
  expect_error(R"({"sm_90": 256})", "\"sm_90\" is 256; expected an object of keys");
  expect_error(R"({"sm_90": {"row_thread": 256}})", "\"sm_90\": \"row_thread\": no such key; the keys are row_threads,");
  // thread counts are whole warps: 33 is refused, not rounded down
  expect_error(R"({"sm_90": {"row_threads": 33}})", "\"sm_90\": \"row_threads\" is 33; expected a multiple of 32 from 32 to 1024");
  expect_error(R"({"sm_90": {"streaming_threads": 2048}})", "\"streaming_threads\" is 2048; expected a multiple of 32 from 32 to 1024");
  expect_error(R"({"sm_90": {"row_min_blocks": -1}})", "\"row_min_blocks\" is -1; expected an integer from 0 to 16");
  expect_error(R"({"sm_90": {"column_min_steps": 16.5}})", "\"column_min_steps\" is 16.5; expected an integer from 1 to 1048576");
  expect_error(R"({"sm_90": {"column_blocks_per_sm": "4"}})", "\"column_blocks_per_sm\" is \"4\"; expected an integer from 0 to 32");
  expect_error(R"({"sm_90": {"grid_threads": 100}})", "\"grid_threads\" is 100; expected a multiple of 32 from 32 to 1024");
  expect_error(R"({"sm_90": {"grid_blocks_per_sm": 33}})", "\"grid_blocks_per_sm\" is 33; expected an integer from 0 to 32");
  expect_error(R"({"sm_90": {"grid_min_vectors": 0}})", "\"grid_min_vectors\" is 0; expected an integer from 1 to 1048576");
  expect_error(R"({"sm_90": {"recompute_values": 1}})", "\"recompute_values\" is 1; expected true or false");
  expect_error(R"({"sm_90": {"inner_outer_prefetch": "on"}})", "\"inner_outer_prefetch\" is \"on\"; expected true or false");
  expect_error(R"({"sm_90": {"prefetch": true}})", "the keys are " + cuda::kernel_tuning_keys());
}

// The ALLOY_KERNEL_TUNING setting's help (alloy --help) lists every key a file may name.
TEST(KernelTuning, TheSettingsHelpListsEveryKey) {
  std::string help = settings::help_text(), keys = cuda::kernel_tuning_keys();
  EXPECT_NE(keys.find("inner_outer_prefetch"), std::string::npos) << keys;
  for (size_t at = 0; at < keys.size();) {
    size_t end = std::min(keys.find(", ", at), keys.size());
    std::string key = keys.substr(at, end - at);
    EXPECT_NE(help.find(key), std::string::npos) << "alloy --help does not list the tuning key " << key;
    at = end + 2;
  }
}

TEST(KernelTuning, AnUnreadableOrBadFileIsAUserErrorAtItsFirstUse) {
  testing::ScopedEnv missing("ALLOY_KERNEL_TUNING", "/nonexistent/alloy-tuning.json");
  try {
    cuda::kernel_tuning(9, 0);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("ALLOY_KERNEL_TUNING file /nonexistent/alloy-tuning.json: cannot be read"), std::string::npos)
        << e.what();
  }
  TempFile bad(R"({"sm_90": {"row_threads": 100}})");
  testing::ScopedEnv tuning("ALLOY_KERNEL_TUNING", bad.path.c_str());
  try {
    cuda::LaunchTarget::from_environment(9, 0, 132, 228 * 1024);
    ADD_FAILURE() << "no error for a bad file";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("ALLOY_KERNEL_TUNING file " + bad.path + ": \"sm_90\": \"row_threads\" is 100"), std::string::npos)
        << e.what();
  }
}

#endif  // ALLOY_HAVE_CUDA

}  // namespace
}  // namespace alloy
