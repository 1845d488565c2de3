#include "alloy/common/settings.h"

#include <gtest/gtest.h>

#include <string>

#include "alloy/common/error.h"
#include "test_util.h"

namespace alloy {
namespace {

std::string error_of_set(const std::string& name, const std::string& value) {
  try {
    settings::set(name, value);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Settings, SwitchesMeanOneThingAtOneAndAtZero) {
  testing::ScopedEnv restore("ALLOY_NO_SIDE_STREAM", "0");
  for (const char* on : {"1", "true", "ON", "yes"}) {
    settings::set("NO_SIDE_STREAM", on);
    EXPECT_TRUE(settings::flag("ALLOY_NO_SIDE_STREAM")) << on;
  }
  for (const char* off : {"0", "false", "off", "No"}) {
    settings::set("ALLOY_NO_SIDE_STREAM", off);
    EXPECT_FALSE(settings::flag("ALLOY_NO_SIDE_STREAM")) << off;
  }
  settings::set("ALLOY_NO_SIDE_STREAM", "1");
  settings::set("ALLOY_NO_SIDE_STREAM", "");  // empty: the default
  EXPECT_FALSE(settings::flag("ALLOY_NO_SIDE_STREAM"));
}

TEST(Settings, ValuesOutsideTheirKindOrRangeAreUserErrorsNamingTheSetting) {
  EXPECT_NE(error_of_set("NO_COLUMN_KERNELS", "maybe").find("ALLOY_NO_COLUMN_KERNELS='maybe': expected 0 or 1"), std::string::npos);
  EXPECT_NE(error_of_set("MATMUL_AUTOTUNE", "0").find("ALLOY_MATMUL_AUTOTUNE='0': expected an integer from 1 to 32"), std::string::npos);
  EXPECT_NE(error_of_set("MATMUL_AUTOTUNE", "8x").find("expected an integer from 1 to 32"), std::string::npos);
  std::string unknown = error_of_set("NO_SUCH_THING", "1");
  EXPECT_NE(unknown.find("no setting 'NO_SUCH_THING'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("MATMUL_AUTOTUNE"), std::string::npos) << unknown;  // the list of settings
  EXPECT_EQ(settings::integer("ALLOY_MATMUL_AUTOTUNE"), 8);                 // a refused value changes nothing
}

TEST(Settings, NonDefaultListsExactlyTheChangedOnes) {
  EXPECT_EQ(settings::non_default().find("ALLOY_MATMUL_AUTOTUNE"), std::string::npos);
  {
    testing::ScopedEnv autotune("ALLOY_MATMUL_AUTOTUNE", "16");
    EXPECT_EQ(settings::integer("ALLOY_MATMUL_AUTOTUNE"), 16);
    EXPECT_NE(settings::non_default().find("ALLOY_MATMUL_AUTOTUNE=16"), std::string::npos) << settings::non_default();
  }
  EXPECT_EQ(settings::integer("ALLOY_MATMUL_AUTOTUNE"), 8);  // restored
  EXPECT_EQ(settings::non_default().find("ALLOY_MATMUL_AUTOTUNE"), std::string::npos);
}

// Issue 24's bar: at most 20 settings (each with the A/B that keeps it, beside it in settings.cpp);
// the kernels' block sizes and the like are a per-architecture table (backend/cuda/kernel_tuning.h).
TEST(Settings, AtMostTwentyWithNoKernelShapeIntegers) {
  EXPECT_LE(settings::all().size(), 20u);
  for (const settings::Setting& s : settings::all())
    for (const char* moved : {"THREADS", "MIN_BLOCKS", "MIN_STEPS", "BLOCKS_PER_SM", "RECOMPUTE"})
      EXPECT_EQ(std::string(s.name).find(moved), std::string::npos) << s.name << ": a kernel choice belongs in the tuning table";
}

TEST(Settings, EveryOneIsListedWithItsDefaultAndHelp) {
  std::string help = settings::help_text();
  for (const settings::Setting& s : settings::all()) {
    EXPECT_NE(help.find(s.name), std::string::npos) << s.name;
    EXPECT_NE(help.find(s.help), std::string::npos) << s.name;
    EXPECT_EQ(settings::current(s.name), s.fallback) << s.name << " differs from its default in this test process";
  }
}

}  // namespace
}  // namespace alloy
