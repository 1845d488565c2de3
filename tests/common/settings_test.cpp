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
  EXPECT_NE(error_of_set("ROW_THREADS", "256x").find("expected a multiple of 32 from 32 to 1024"), std::string::npos);
  // thread counts are whole warps: 33 is refused, not rounded down
  std::string odd = error_of_set("STREAMING_THREADS", "33");
  EXPECT_NE(odd.find("ALLOY_STREAMING_THREADS='33': expected a multiple of 32 from 32 to 1024"), std::string::npos) << odd;
  std::string unknown = error_of_set("NO_SUCH_THING", "1");
  EXPECT_NE(unknown.find("no setting 'NO_SUCH_THING'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("MATMUL_AUTOTUNE"), std::string::npos) << unknown;  // the list of settings
  EXPECT_EQ(settings::integer("ALLOY_MATMUL_AUTOTUNE"), 8);                 // a refused value changes nothing
}

TEST(Settings, NonDefaultListsExactlyTheChangedOnes) {
  EXPECT_EQ(settings::non_default().find("ALLOY_ROW_THREADS"), std::string::npos);
  {
    testing::ScopedEnv threads("ALLOY_ROW_THREADS", "512");
    EXPECT_EQ(settings::integer("ALLOY_ROW_THREADS"), 512);
    EXPECT_NE(settings::non_default().find("ALLOY_ROW_THREADS=512"), std::string::npos) << settings::non_default();
  }
  EXPECT_EQ(settings::integer("ALLOY_ROW_THREADS"), 256);  // restored
  EXPECT_EQ(settings::non_default().find("ALLOY_ROW_THREADS"), std::string::npos);
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
