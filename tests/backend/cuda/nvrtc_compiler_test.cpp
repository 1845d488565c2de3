// NVRTC compilation needs no GPU: these run in CI. They check that real CUBINs come out for
// several architectures, that the memory and disk caches return what was compiled, and that
// compile errors carry NVRTC's log and the source.
#include <gtest/gtest.h>

#include "test_util.h"

#if !ALLOY_HAVE_CUDA
TEST(NvrtcCompiler, NeedsTheCudaToolkit) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
#else

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "alloy/backend/cuda/loaded_kernel.h"
#include "alloy/backend/cuda/nvrtc_compiler.h"
#include "alloy/common/error.h"
#include "alloy/common/settings.h"

namespace alloy::cuda {
namespace {

namespace fs = std::filesystem;

// A kernel whose source is unique to this process, so a disk cache left by an earlier run
// cannot answer for it.
std::string unique_kernel_source() {
  static std::mt19937_64 rng(std::random_device{}());
  return "// test " + std::to_string(::getpid()) + " " + std::to_string(rng()) + R"(
extern "C" __global__ void scale_f32(const float* x, float* y, float factor, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * factor;
}
)";
}

bool is_elf(const std::vector<char>& bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
}

// Points ALLOY_CACHE_DIR at a fresh folder for one test and restores it afterwards.
class ScopedCacheDir {
 public:
  ScopedCacheDir() {
    if (const char* old = std::getenv("ALLOY_CACHE_DIR")) old_ = old;
    dir_ = fs::temp_directory_path() / ("alloy_nvrtc_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    ::setenv("ALLOY_CACHE_DIR", dir_.c_str(), 1);
    old_setting_ = settings::current("ALLOY_CACHE_DIR");
    settings::set("ALLOY_CACHE_DIR", dir_.string());
  }
  ~ScopedCacheDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    if (old_) ::setenv("ALLOY_CACHE_DIR", old_->c_str(), 1);
    else ::unsetenv("ALLOY_CACHE_DIR");
    settings::set("ALLOY_CACHE_DIR", old_setting_);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  std::optional<std::string> old_;
  std::string old_setting_;
};

std::vector<fs::path> cubin_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec))
    if (entry.path().extension() == ".cubin") files.push_back(entry.path());
  return files;
}

TEST(NvrtcCompiler, CompilesForSm90AndSm80WithoutAGpu_ProducingDifferentElfCubins) {
  std::string source = unique_kernel_source();
  CompileOptions no_disk;
  no_disk.use_disk_cache = false;
  auto sm90 = compile_cuda(source, "scale_f32", 9, 0, no_disk);
  auto sm80 = compile_cuda(source, "scale_f32", 8, 0, no_disk);
  ASSERT_TRUE(sm90 && sm80);
  EXPECT_TRUE(is_elf(sm90->cubin));
  EXPECT_TRUE(is_elf(sm80->cubin));
  EXPECT_EQ(sm90->arch_major, 9);
  EXPECT_EQ(sm80->arch_major, 8);
  EXPECT_NE(sm90->key, sm80->key);
  EXPECT_NE(sm90->cubin, sm80->cubin);
  EXPECT_EQ(sm90->lowered_name, "scale_f32");  // extern "C": not mangled
}

TEST(NvrtcCompiler, SameArguments_ReturnTheCachedModule) {
  std::string source = unique_kernel_source();
  CompileOptions no_disk;
  no_disk.use_disk_cache = false;
  auto first = compile_cuda(source, "scale_f32", 9, 0, no_disk);
  CompileCacheStats before = compile_cache_stats();
  auto second = compile_cuda(source, "scale_f32", 9, 0, no_disk);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(compile_cache_stats().memory_hits, before.memory_hits + 1);
  EXPECT_EQ(compile_cache_stats().compiles, before.compiles);
}

TEST(NvrtcCompiler, DifferentOptions_AreDifferentCacheEntries) {
  std::string source = unique_kernel_source();
  CompileOptions plain, fast;
  plain.use_disk_cache = fast.use_disk_cache = false;
  fast.fast_math = true;
  EXPECT_NE(compile_cuda(source, "scale_f32", 9, 0, plain)->key, compile_cuda(source, "scale_f32", 9, 0, fast)->key);
}

TEST(NvrtcCompiler, AfterTheMemoryCacheIsCleared_TheDiskCacheAnswers) {
  ScopedCacheDir cache;
  std::string source = unique_kernel_source();
  CompileCacheStats start = compile_cache_stats();
  auto compiled = compile_cuda(source, "scale_f32", 9, 0);
  EXPECT_EQ(compile_cache_stats().compiles, start.compiles + 1);
  ASSERT_EQ(cubin_files(cache.dir()).size(), 1u) << "one cache file under " << cache.dir();

  clear_compile_memory_cache();
  auto loaded = compile_cuda(source, "scale_f32", 9, 0);
  CompileCacheStats end = compile_cache_stats();
  EXPECT_EQ(end.compiles, start.compiles + 1) << "no second compile";
  EXPECT_EQ(end.disk_hits, start.disk_hits + 1);
  EXPECT_NE(compiled.get(), loaded.get());
  EXPECT_EQ(loaded->cubin, compiled->cubin);
  EXPECT_EQ(loaded->lowered_name, compiled->lowered_name);
  EXPECT_EQ(loaded->key, compiled->key);
  EXPECT_EQ(loaded->arch_major, 9);
}

TEST(NvrtcCompiler, CorruptDiskEntry_IsIgnoredAndRecompiled) {
  ScopedCacheDir cache;
  std::string source = unique_kernel_source();
  auto compiled = compile_cuda(source, "scale_f32", 8, 0);
  auto files = cubin_files(cache.dir());
  ASSERT_EQ(files.size(), 1u);
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "ALLOYCUBIN1\ngarbage";
  clear_compile_memory_cache();
  CompileCacheStats before = compile_cache_stats();
  auto again = compile_cuda(source, "scale_f32", 8, 0);
  EXPECT_EQ(compile_cache_stats().compiles, before.compiles + 1);
  EXPECT_EQ(compile_cache_stats().disk_hits, before.disk_hits);
  EXPECT_EQ(again->cubin, compiled->cubin);
}

TEST(NvrtcCompiler, UnwritableCacheDir_StillCompiles) {
  ScopedCacheDir cache;
  std::ofstream(cache.dir()) << "a file where the cache folder should be";
  auto module = compile_cuda(unique_kernel_source(), "scale_f32", 9, 0);
  EXPECT_TRUE(is_elf(module->cubin));
}

TEST(NvrtcCompiler, TemplateKernel_IsFoundByItsNameExpression) {
  std::string source = R"(
template <int N> __global__ void add_n(int* x) { x[threadIdx.x] += N; }
template __global__ void add_n<3>(int*);
)";
  CompileOptions no_disk;
  no_disk.use_disk_cache = false;
  auto module = compile_cuda(source, "add_n<3>", 9, 0, no_disk);
  EXPECT_EQ(module->lowered_name.rfind("_Z", 0), 0u) << module->lowered_name;
  EXPECT_NE(module->lowered_name.find("add_n"), std::string::npos);
}

TEST(NvrtcCompiler, SyntaxError_IsAnInternalErrorWithTheLogAndNumberedSource) {
  std::string source = "extern \"C\" __global__ void broken(float* x) {\n  x[0] = undeclared_name;\n}\n";
  CompileOptions no_disk;
  no_disk.use_disk_cache = false;
  try {
    compile_cuda(source, "broken", 9, 0, no_disk);
    FAIL() << "expected an InternalError";
  } catch (const InternalError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("broken"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;  // from NVRTC's log
    EXPECT_NE(what.find("2  "), std::string::npos) << what;              // numbered source line
    EXPECT_NE(what.find("sm_90"), std::string::npos) << what;
  }
}

TEST(NvrtcCompiler, UnsupportedArchitecture_IsAUserError) {
  CompileOptions no_disk;
  no_disk.use_disk_cache = false;
  try {
    compile_cuda(unique_kernel_source(), "scale_f32", 1, 0, no_disk);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("sm_10"), std::string::npos) << e.what();
  }
}

TEST(NvrtcCompiler, ParseCudaArch_AcceptsTheUsualSpellings) {
  auto a = parse_cuda_arch("sm_90");
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a.major, 9);
  EXPECT_EQ(a.minor, 0);
  EXPECT_EQ(a.suffix, "");
  auto b = parse_cuda_arch("sm_90a");
  EXPECT_EQ(b.major, 9);
  EXPECT_EQ(b.suffix, "a");
  auto c = parse_cuda_arch("8.6");
  EXPECT_EQ(c.major, 8);
  EXPECT_EQ(c.minor, 6);
  auto d = parse_cuda_arch("100");
  EXPECT_EQ(d.major, 10);
  EXPECT_EQ(d.minor, 0);
  EXPECT_FALSE(parse_cuda_arch("").valid());
  EXPECT_FALSE(parse_cuda_arch("sm_").valid());
  EXPECT_FALSE(parse_cuda_arch("hopper").valid());
  EXPECT_FALSE(parse_cuda_arch("sm_90x").valid());
  EXPECT_FALSE(parse_cuda_arch("8.").valid());
}

TEST(LoadedKernel, CubinRunsOn_SameMajorAndNoNewerMinorOnly) {
  EXPECT_TRUE(cubin_runs_on(8, 0, "", 8, 6));
  EXPECT_FALSE(cubin_runs_on(8, 6, "", 8, 0));
  EXPECT_FALSE(cubin_runs_on(8, 0, "", 9, 0));
  EXPECT_FALSE(cubin_runs_on(9, 0, "", 8, 0));
  EXPECT_TRUE(cubin_runs_on(9, 0, "a", 9, 0));
  EXPECT_FALSE(cubin_runs_on(9, 0, "a", 9, 1));
}

}  // namespace
}  // namespace alloy::cuda

#endif  // ALLOY_HAVE_CUDA
