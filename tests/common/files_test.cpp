// why_unwritable: the reasons a run's output file cannot be written, told before the run, and
// nothing created while asking (every rank of a job checks the same names at once: a probe file
// one rank made and removed was "not a regular file" to another, session 38's held-out round).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "alloy/common/files.h"

namespace alloy {
namespace {

namespace fs = std::filesystem;

TEST(Files, WhyUnwritable_TellsTheReasonAndCreatesNothing) {
  std::string pattern = (fs::temp_directory_path() / "alloy_files_XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const fs::path dir = pattern;
  EXPECT_EQ(why_unwritable((dir / "y.npy").string()), "");
  EXPECT_TRUE(fs::is_empty(dir)) << "the check made a file";
  std::ofstream(dir / "old.npy") << "x";
  EXPECT_EQ(why_unwritable((dir / "old.npy").string()), "");
  EXPECT_EQ(why_unwritable(dir.string()), "it is a directory");
  EXPECT_EQ(why_unwritable("/dev/null"), "it is not a regular file");
  EXPECT_EQ(why_unwritable((dir / "missing" / "y.npy").string()), "its directory " + (dir / "missing").string() + " is missing");
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directory(dir / "ro");
    ::chmod((dir / "ro").c_str(), 0555);
    EXPECT_EQ(why_unwritable((dir / "ro" / "y.npy").string()), "its directory " + (dir / "ro").string() + " is not writable");
    ::chmod((dir / "ro").c_str(), 0755);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace alloy
