// The measured machine costs of --pipeline auto (runtime/tune/machine_costs.h) in one process (a team
// of one): measured once, written to the cache file, read back, a corrupt file measured again,
// and the settings that measure again or keep no file. Under mpirun, multidevice_mpitest.cpp
// checks that every rank gets the same numbers.
#include "alloy/runtime/tune/machine_costs.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "alloy/multidevice/communicator.h"
#include "test_util.h"

namespace alloy {
namespace {

namespace fs = std::filesystem;

class MachineCostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "alloy_machine_costs_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    cache_.emplace("ALLOY_CACHE_DIR", dir_.c_str());
    forget_machine_costs();
  }
  void TearDown() override {
    forget_machine_costs();
    cache_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  host_ir::MachineCosts costs() {
    auto team = multidevice::communicator_for({0}, Device{});
    return machine_costs(*team, *team, Device{});
  }
  std::string file() const { return dir_ + "/machine_costs.json"; }

  std::string dir_;
  std::optional<testing::ScopedEnv> cache_;
};

TEST_F(MachineCostsTest, MeasuredOnce_WrittenToTheCache_AndReadBack) {
  host_ir::MachineCosts measured = costs();
  EXPECT_EQ(measured.source, "measured now, kept in " + file());
  EXPECT_EQ(measured.key, "cpu, self, 1 rank");
  EXPECT_FALSE(measured.overlaps);
  EXPECT_GT(measured.gemm_flops_per_us, 0);
  EXPECT_GT(measured.hop_bytes_per_us, 0);
  EXPECT_GT(measured.gather_bytes_per_us, 0);
  EXPECT_GT(measured.off_gather_bytes_per_us, 0);  // the unpipelined program's collectives, measured apart
  EXPECT_GT(measured.off_scatter_bytes_per_us, 0);
  EXPECT_GE(measured.launch_us, 0);
  ASSERT_EQ(machine_costs_file(), file());
  std::ifstream in(file());
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["machines"]["cpu, self, 1 rank"]["gemm_flops_per_us"].get<double>(), measured.gemm_flops_per_us);
  // the same process asks again: kept in memory; a new process (forgotten): read from the file
  EXPECT_EQ(costs().source, measured.source);
  forget_machine_costs();
  host_ir::MachineCosts read = costs();
  EXPECT_EQ(read.source, "read from " + file());
  EXPECT_EQ(read.gemm_flops_per_us, measured.gemm_flops_per_us);
  EXPECT_EQ(read.hop_latency_us, measured.hop_latency_us);
  EXPECT_EQ(read.gemm_half_rows, measured.gemm_half_rows);
  EXPECT_EQ(read.off_scatter_latency_us, measured.off_scatter_latency_us);
  EXPECT_EQ(read.off_scatter_bytes_per_us, measured.off_scatter_bytes_per_us);
  EXPECT_EQ(read.off_gather_bytes_per_us, measured.off_gather_bytes_per_us);
}

TEST_F(MachineCostsTest, ACorruptOrIncompleteCacheFile_IsMeasuredAgainAndRewritten) {
  for (const char* bad : {"not json at all", "{\"version\": 3, \"machines\": {\"cpu, self, 1 rank\": {\"hop_latency_us\": 3}}}",
                          "{\"version\": 3, \"machines\": {\"cpu, self, 1 rank\": {\"hop_latency_us\": \"fast\"}}}", "[1, 2]",
                          "{\"version\": 99}",
                          // version 1's complete entry: its GEMM numbers were whole runs, measured again
                          "{\"version\": 1, \"machines\": {\"cpu, self, 1 rank\": {\"hop_latency_us\": 3, \"hop_bytes_per_us\": 1, "
                          "\"gather_latency_us\": 3, \"gather_bytes_per_us\": 1, \"gemm_flops_per_us\": 1, \"gemm_half_rows\": 0, "
                          "\"launch_us\": 29}}}",
                          // version 2's complete entry: the unpipelined collectives were not measured apart
                          "{\"version\": 2, \"machines\": {\"cpu, self, 1 rank\": {\"hop_latency_us\": 3, \"hop_bytes_per_us\": 1, "
                          "\"gather_latency_us\": 3, \"gather_bytes_per_us\": 1, \"gemm_flops_per_us\": 1, \"gemm_half_rows\": 0, "
                          "\"launch_us\": 8}}}"}) {
    SCOPED_TRACE(bad);
    std::ofstream(file()) << bad;
    forget_machine_costs();
    EXPECT_EQ(costs().source.rfind("measured now", 0), 0u);
    forget_machine_costs();
    EXPECT_EQ(costs().source, "read from " + file());  // rewritten whole
  }
}

TEST_F(MachineCostsTest, RemeasureAndNoCacheSettings) {
  costs();
  forget_machine_costs();
  {
    testing::ScopedEnv again("ALLOY_PIPELINE_REMEASURE", "1");
    EXPECT_EQ(costs().source.rfind("measured now", 0), 0u);
  }
  forget_machine_costs();
  fs::remove(file());
  {
    testing::ScopedEnv none("ALLOY_PIPELINE_NO_COST_CACHE", "1");
    EXPECT_EQ(costs().source, "measured now (no cache file)");
  }
  EXPECT_FALSE(fs::exists(file()));
}

}  // namespace
}  // namespace alloy
