// The `alloy` program as a user meets it: run, check, print and compile on the examples and on
// bad input, through the built binary. Exit codes: 0 success, 1 user error, 2 usage error.
#include <chrono>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "alloy/common/settings.h"
#include "alloy/tensor/npy.h"
#include "test_util.h"

namespace alloy {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// A fresh directory for one test, removed afterwards.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("alloy_cli_test_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }

  // `env`: what runs the CLI (a prefix such as settings_unset())
  CliResult alloy(const std::string& args, const std::string& env = "") const {
    std::string command = env + " '" + ALLOY_CLI_PATH + "' " + args + " >'" + path("stdout") + "' 2>'" + path("stderr") + "'";
    int status = std::system(command.c_str());
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = testing::read_file(path("stdout"));
    r.err = testing::read_file(path("stderr"));
    return r;
  }

  // `env` with every ALLOY_ setting unset: output that reports the settings a run differs in is
  // then the same wherever the tests run (scripts/gpu-check exports some for its A/B passes)
  static std::string settings_unset() {
    std::string env = "env";
    for (const settings::Setting& s : settings::all()) env += std::string(" -u ") + s.name;
    return env;
  }

  static std::string example(const std::string& name) { return "'" + testing::source_path("examples/" + name) + "'"; }

  fs::path dir_;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The complete events ("X") of a trace file, by process (rank) and thread (stream, or kHostTid for
// the host): their names. Reading the file parses it: invalid JSON throws.
using TraceEvents = std::map<std::pair<int, int>, std::vector<std::string>>;
TraceEvents trace_events(const std::string& path, std::map<std::pair<int, int>, std::string>* thread_names = nullptr,
                         std::set<int>* processes = nullptr) {
  nlohmann::json file = nlohmann::json::parse(testing::read_file(path));
  EXPECT_EQ(file.at("displayTimeUnit"), "ms");
  TraceEvents events;
  for (const auto& e : file.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && thread_names) (*thread_names)[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
    if (e.at("ph") == "M" && e.at("name") == "process_name" && processes) processes->insert(e.at("pid").get<int>());
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("ts").get<double>(), 0) << e.dump();
    EXPECT_GE(e.at("dur").get<double>(), 0) << e.dump();
    events[{e.at("pid"), e.at("tid")}].push_back(e.at("name"));
  }
  return events;
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string last_line(const std::string& text) {
  std::string trimmed = text.substr(0, text.find_last_not_of('\n') + 1);
  return trimmed.substr(trimmed.find_last_of('\n') + 1);
}

Tensor f32_tensor(std::vector<int64_t> sizes, std::vector<float> values) {
  Tensor t = Tensor::empty(DType::f32, std::move(sizes));
  for (size_t i = 0; i < values.size(); ++i) t.data_as<float>()[i] = values[i];
  return t;
}

// ---- alloy run -----------------------------------------------------------------------------

TEST_F(CliTest, Run_MlpExample_PrintsEachOutputsNameDtypeShapeAndSummary) {
  CliResult r = alloy("run " + example("mlp.fusion") + " --bind B=1 --bind S=4 --device cpu");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "y: bf16[1, 4, 768]  mean=")) << r.out;
  EXPECT_TRUE(contains(r.out, " std=")) << r.out;
  EXPECT_TRUE(contains(r.out, " first=[")) << r.out;
  EXPECT_TRUE(contains(r.out, "input x: bf16[1, 4, 768] random")) << r.out;
}

// The examples of one device, each with the sizes it needs; the sharded ones run under mpirun
// (CliMpiTest). Every file in examples/ is one or the other.
const std::map<std::string, std::string>& single_device_examples() {
  static const std::map<std::string, std::string> runs{
      {"mlp.fusion", "--bind B=2 --bind S=8"},
      {"mlp_backward.fusion", "--bind T=24"},
      {"mlp_relu.fusion", "--bind T=8"},
      {"mlp_relu_backward.fusion", "--bind T=8"},
      {"layer_norm.fusion", ""},
      {"softmax.fusion", ""},
      {"rms_norm.fusion", ""},
      {"rope.fusion", "--bind B=1 --bind S=4"},
      {"masked_mean.fusion", "--bind B=3 --bind T=5 --bind h.2=16"},
      {"cross_entropy.fusion", "--bind T=4 --bind V=16"},  // random targets are 0..9: V >= 10
      {"adam_step.fusion", "--bind N=1000"},
      {"sgd_momentum.fusion", "--bind N=1000"}};
  return runs;
}

std::vector<std::string> example_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_path("examples")))
    if (entry.path().extension() == ".fusion") names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(CliTest, Run_EveryExample_Succeeds) {
  int ran = 0;
  for (const std::string& name : example_names()) {
    auto run = single_device_examples().find(name);
    if (run == single_device_examples().end()) {
      // not listed: it must be a sharded example, which alone says how to launch it
      CliResult r = alloy("run " + example(name) + " --bind T=8 --device cpu");
      EXPECT_EQ(r.code, 1) << name << " is neither listed above nor sharded\n" << r.out << r.err;
      EXPECT_TRUE(contains(r.err, "mpirun -n")) << name << ": " << r.err;
      continue;
    }
    CliResult r = alloy("run " + example(name) + " " + run->second);
    EXPECT_EQ(r.code, 0) << name << " " << run->second << "\n" << r.out << r.err;
    ++ran;
  }
  EXPECT_EQ(ran, int(single_device_examples().size()));
}

TEST_F(CliTest, Run_Seed_DecidesTheRandomInputs) {
  std::string args = "run " + example("softmax.fusion");
  CliResult a = alloy(args + " --seed 7"), b = alloy(args + " --seed 7"), c = alloy(args + " --seed 8");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(last_line(a.out), last_line(c.out));
}

TEST_F(CliTest, Run_UnboundSymbols_IsAUserErrorListingEachSize) {
  CliResult r = alloy("run " + example("mlp.fusion"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "B (input 'x', axis 0)")) << r.err;
  EXPECT_TRUE(contains(r.err, "S (input 'x', axis 1)")) << r.err;
  EXPECT_TRUE(contains(r.err, "--bind")) << r.err;
}

TEST_F(CliTest, Run_DynamicAxisWithoutASize_SaysHowToBindIt) {
  CliResult r = alloy("run " + example("masked_mean.fusion") + " --bind B=2 --bind T=3");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "input 'h', axis 2, declared ? (--bind h.2=N)")) << r.err;
}

TEST_F(CliTest, Run_BindOfAnUnknownSymbol_IsAUserErrorListingTheSizes) {
  CliResult r = alloy("run " + example("mlp.fusion") + " --bind B=1 --bind S=2 --bind Q=3");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "--bind Q=3: fusion 'mlp' has no size named 'Q'; its sizes are B, S")) << r.err;
}

TEST_F(CliTest, Run_AbsurdlyLargeBind_IsAUserErrorNotACrash) {
  CliResult r = alloy("run " + example("mlp.fusion") + " --bind B=1000000000000 --bind S=1000000000000");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "input 'x': declared bf16[B, S, 768], is too large to draw")) << r.err;
}

TEST_F(CliTest, Run_BindContradictingAnInputFile_IsAUserError) {
  write_npy(path("h.npy"), f32_tensor({2, 3, 4}, std::vector<float>(24, 1.0f)));
  CliResult r = alloy("run " + example("masked_mean.fusion") + " --input h=" + path("h.npy") + " --bind B=5");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "--bind B=5: contradicts input 'h', axis 0, which has size 2")) << r.err;
}

TEST_F(CliTest, Run_InputFiles_FixTheSizesAndTheValues) {
  // masked_mean of h [1, 3, 2] keeping positions 0 and 2: the mean of rows 0 and 2.
  write_npy(path("h.npy"), f32_tensor({1, 3, 2}, {1, 10, 100, 1000, 3, 30}));
  Tensor mask = Tensor::empty(DType::boolean, {1, 3});
  mask.data_as<uint8_t>()[0] = 1, mask.data_as<uint8_t>()[1] = 0, mask.data_as<uint8_t>()[2] = 1;
  write_npy(path("mask.npy"), mask);
  CliResult r = alloy("run " + example("masked_mean.fusion") + " --input h=" + path("h.npy") + " --input mask=" +
                      path("mask.npy") + " --save-outputs " + path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "pooled: f32[1, 2]")) << r.out;
  Tensor pooled = read_npy(path("out/pooled.npy"));
  ASSERT_EQ(pooled.sizes(), (std::vector<int64_t>{1, 2}));
  EXPECT_FLOAT_EQ(pooled.data_as<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(pooled.data_as<float>()[1], 20.0f);
}

TEST_F(CliTest, Run_SaveOutputs_WritesEveryOutputWithBf16AsExactF32) {
  std::string file = write("f.fusion",
                           "fusion f(x: bf16[3], y: f32[3]) {\n"
                           "  s = add(x, x)\n"
                           "  p = mul(y, 3.0)\n"
                           "  return s, p\n"
                           "}\n");
  // 1 + 2^-8 rounds to the bf16 value 1 (ties to even); 1.5 is exact.
  write_npy(path("x.npy"), f32_tensor({3}, {1.00390625f, 1.5f, -2.0f}));
  write_npy(path("y.npy"), f32_tensor({3}, {1.0f, 0.5f, -4.0f}));
  CliResult r = alloy("run '" + file + "' --input x=" + path("x.npy") + " --input y=" + path("y.npy") + " --save-outputs " +
                      path("out/nested"));
  ASSERT_EQ(r.code, 0) << r.err;
  Tensor s = read_npy(path("out/nested/s.npy")), p = read_npy(path("out/nested/p.npy"));
  ASSERT_EQ(s.dtype(), DType::f32);
  EXPECT_EQ(s.data_as<float>()[0], 2.0f);
  EXPECT_EQ(s.data_as<float>()[1], 3.0f);
  EXPECT_EQ(s.data_as<float>()[2], -4.0f);
  EXPECT_EQ(p.data_as<float>()[2], -12.0f);
}

TEST_F(CliTest, Run_InputFileOfAnIntegerDtypeForAFloatInput_IsAUserError) {
  Tensor ids = Tensor::empty(DType::i64, {3});
  for (int i = 0; i < 3; ++i) ids.data_as<int64_t>()[i] = i;
  write_npy(path("ids.npy"), ids);
  std::string file = write("f.fusion", "fusion f(x: bf16[3]) {\n  y = neg(x)\n  return y\n}\n");
  CliResult r = alloy("run '" + file + "' --input x=" + path("ids.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "input 'x': expected bf16 (or another floating dtype, rounded), found i64")) << r.err;
}

// A file for a scalar input is converted by value, where the declared dtype holds the value (held-
// out check: 2^31 into an i32 wrapped, 2.5 became 2, 2 was a bool, 1e6 an f16 infinity, each exit 0).
TEST_F(CliTest, Run_ScalarInputFileOfAValueItsDtypeCannotHold_IsAUserError) {
  std::string file = write("f.fusion", "fusion f(x: i32[2], k: i32, b: bool, h: f16) {\n  y = add(x, k)\n  z = where(b, h, h)\n  return y, z\n}\n");
  auto scalar = [&](const std::string& name, DType dtype, double value) {
    Tensor t = Tensor::empty(dtype, {});
    if (is_floating(dtype)) store_double(t.data(), dtype, 0, value);
    else store_int(t.data(), dtype, 0, int64_t(value));
    write_npy(path(name), t);
    return path(name);
  };
  struct Case {
    std::string inputs, error;
  };
  const std::vector<Case> cases = {
      {"--input k=" + scalar("k1.npy", DType::i64, 2147483648.0), "input 'k': expected an i32 value, found 2147483648 (the i64 file), which does not fit"},
      {"--input k=" + scalar("k2.npy", DType::f64, 2.5), "input 'k': expected an i32 value, found 2.5 (the f64 file), which is not an integer"},
      {"--input b=" + scalar("b.npy", DType::i32, 2), "input 'b': expected a bool value, found 2 (the i32 file), which is not 0 or 1"},
      {"--input h=" + scalar("h.npy", DType::f64, 1e6), "input 'h': expected an f16 value, found 1e+06 (the f64 file), past the largest finite f16"},
  };
  for (const Case& c : cases) {
    CliResult r = alloy("run '" + file + "' " + c.inputs);
    EXPECT_EQ(r.code, 1) << c.inputs;
    EXPECT_TRUE(contains(r.err, c.error)) << r.err;
  }
  // values the dtypes hold are taken: an integral f64 and an i64 into the i32, 1 into the bool
  CliResult r = alloy("run '" + file + "' --input k=" + scalar("k3.npy", DType::f64, -7.0) + " --input b=" + scalar("b1.npy", DType::i64, 1));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "k: i32[] from")) << r.out;
}

TEST_F(CliTest, Run_InputFileOfTheWrongShape_IsAUserErrorNamingTheAxis) {
  write_npy(path("x.npy"), f32_tensor({2, 4}, std::vector<float>(8, 0.0f)));
  std::string file = write("f.fusion", "fusion f(x: f32[2, 3]) {\n  y = neg(x)\n  return y\n}\n");
  CliResult r = alloy("run '" + file + "' --input x=" + path("x.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "input 'x', axis 1")) << r.err;
}

TEST_F(CliTest, Run_MalformedInputFile_IsAUserErrorNamingTheFile) {
  write("x.npy", "not numpy at all");
  CliResult r = alloy("run " + example("softmax.fusion") + " --input scores=" + path("x.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, path("x.npy") + ": not a .npy file")) << r.err;
}

TEST_F(CliTest, Run_UnknownInputName_IsAUserErrorListingTheInputs) {
  write_npy(path("x.npy"), f32_tensor({1}, {1}));
  CliResult r = alloy("run " + example("softmax.fusion") + " --input logits=" + path("x.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "has no input named 'logits'; its inputs are scores")) << r.err;
}

TEST_F(CliTest, Run_Bench_PrintsMedianMinAndRunsAsTheLastLine) {
  CliResult r = alloy("run " + example("softmax.fusion") + " --bench 3");
  ASSERT_EQ(r.code, 0) << r.err;
  std::regex format(R"(bench median_us=[0-9]+(\.[0-9]+)? min_us=[0-9]+(\.[0-9]+)? runs=3)");
  EXPECT_TRUE(std::regex_match(last_line(r.out), format)) << last_line(r.out);
}

TEST_F(CliTest, Run_DumpIr_PrintsTheCanonicalFusionBeforeTheOutputs) {
  CliResult r = alloy("run " + example("mlp.fusion") + " --bind B=1 --bind S=2 --dump ir");
  ASSERT_EQ(r.code, 0) << r.err;
  size_t ir = r.out.find("fusion mlp(");
  ASSERT_NE(ir, std::string::npos) << r.out;
  EXPECT_LT(ir, r.out.find("y: bf16[1, 2, 768]"));
}

// Each dump is titled with what it shows: `ir` the fusion before the passes, `segments` after them.
TEST_F(CliTest, Run_Dumps_SayWhichStageTheyShow) {
  CliResult r = alloy("run " + example("mlp.fusion") + " --bind B=1 --bind S=2 --device cpu --dump ir --dump segments");
  ASSERT_EQ(r.code, 0) << r.err;
  size_t ir = r.out.find("== dump ir: the fusion as parsed, before the passes\nfusion mlp(");
  size_t segments = r.out.find("== dump segments: the fusion after the passes (composites decomposed), cut into segments\n");
  ASSERT_NE(ir, std::string::npos) << r.out;
  ASSERT_NE(segments, std::string::npos) << r.out;
  EXPECT_LT(ir, segments);
}

// `--dump cuda` prints what the run launched, so it comes after the run: on the GPU the kernels
// its first run compiled; on the CPU it says there are none.
TEST_F(CliTest, Run_DumpCuda_PrintsTheKernelsTheRunLaunched) {
  CliResult cpu = alloy("run " + example("softmax.fusion") + " --device cpu --dump cuda");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  size_t title = cpu.out.find("== dump cuda: what the run launched");
  ASSERT_NE(title, std::string::npos) << cpu.out;
  EXPECT_LT(cpu.out.find("probs: bf16"), title) << cpu.out;  // printed after the run
  EXPECT_TRUE(contains(cpu.out, "no generated CUDA code (the plan runs on cpu)")) << cpu.out;
  ALLOY_REQUIRE_GPU();  // the GPU half: skipped (or failed under ALLOY_REQUIRE_GPU=1) without one
  CliResult gpu = alloy("run " + example("softmax.fusion") + " --device cuda --dump cuda");
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  EXPECT_TRUE(contains(gpu.out, "__global__")) << gpu.out;
  EXPECT_TRUE(contains(gpu.out, "// segment ")) << gpu.out;
  EXPECT_FALSE(contains(gpu.out, "no generated CUDA code")) << gpu.out;
  CliResult mlp = alloy("run " + example("mlp.fusion") + " --bind B=2 --bind S=8 --device cuda --dump cuda");
  ASSERT_EQ(mlp.code, 0) << mlp.err;
  EXPECT_TRUE(contains(mlp.out, "[matmul]: cuBLASLt, epilogue ")) << mlp.out;
}

TEST_F(CliTest, Run_FusionOption_PicksTheNamedFusionOfSeveral) {
  std::string file = write("two.fusion",
                           "fusion first(x: f32[2]) {\n  y = neg(x)\n  return y\n}\n"
                           "fusion second(x: f32[3]) {\n  z = exp(x)\n  return z\n}\n");
  CliResult r = alloy("run '" + file + "' --fusion second");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "z: f32[3]")) << r.out;
  CliResult missing = alloy("run '" + file + "' --fusion third");
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(contains(missing.err, "has no fusion named 'third'; it holds first, second")) << missing.err;
}

TEST_F(CliTest, Run_MissingFile_IsAUserError) {
  CliResult r = alloy("run " + path("nope.fusion"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "nope.fusion: cannot open the .fusion file: no such file")) << r.err;
}

// With a GPU the run happens on it; without one it is a user error that says why. Which of the
// two is expected comes from this process's own look at the GPU, so neither can stand in for the other.
TEST_F(CliTest, Run_CudaDevice_RunsOnTheGpuOrSaysThereIsNone) {
  CliResult r = alloy("run " + example("softmax.fusion") + " --device cuda");
  if (testing::gpu_available()) {
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "on cuda:0")) << r.out;
    EXPECT_TRUE(contains(r.out, "probs: ")) << r.out;
  } else {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "--device cuda: no GPU found")) << r.err;
    EXPECT_TRUE(contains(r.err, "use --device cpu or auto")) << r.err;
  }
}

// ---- usage errors --------------------------------------------------------------------------

TEST_F(CliTest, Usage_MalformedArguments_ExitWithCode2) {
  const char* bad[] = {"",                                   // no subcommand
                       "frobnicate x.fusion",                // unknown subcommand
                       "run",                                // no file
                       "run x.fusion --frobnicate",          // unknown option
                       "run x.fusion --device tpu",          // not a device
                       "run x.fusion --dump everything",     // not a stage
                       "run x.fusion --bench 0",             // not a count
                       "run x.fusion --seed minus-one"};     // not a number
  for (const char* args : bad) {
    CliResult r = alloy(args);
    EXPECT_EQ(r.code, 2) << "alloy " << args << "\n" << r.out << r.err;
  }
}

TEST_F(CliTest, Usage_MalformedBind_ExitsWithCode2) {
  for (const char* bind : {"B", "B=", "B=four", "=4"}) {
    CliResult r = alloy("run " + example("mlp.fusion") + " --bind " + bind);
    EXPECT_EQ(r.code, 2) << bind << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "--bind")) << r.err;
  }
}

TEST_F(CliTest, Usage_Help_ExitsWithCode0) {
  CliResult r = alloy("run --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.out, "--bind")) << r.out;
}

// ---- alloy check, print, compile -------------------------------------------------------------

TEST_F(CliTest, Check_EveryExample_IsValid) {
  std::vector<std::string> names = example_names();
  EXPECT_GE(names.size(), 11u);
  for (const std::string& name : names) {
    CliResult r = alloy("check " + example(name));
    EXPECT_EQ(r.code, 0) << name << "\n" << r.err;
    EXPECT_TRUE(contains(r.out, ": ok")) << r.out;
  }
}

TEST_F(CliTest, Check_ErrorsInTwoFusions_ReportsBothWithFileLineAndColumn) {
  std::string file = write("bad.fusion",
                           "fusion a(x: f32[4]) {\n"
                           "  y = exp(x, foo=1)\n"
                           "  return y\n"
                           "}\n"
                           "fusion good(x: f32[4]) {\n"
                           "  return x\n"
                           "}\n"
                           "fusion b(x: f32[4], w: f32[3, 5]) {\n"
                           "  y = linear(x, w)\n"
                           "  return y\n"
                           "}\n");
  CliResult r = alloy("check '" + file + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, file + ":2:14: exp: unknown attribute 'foo'")) << r.err;
  EXPECT_TRUE(contains(r.err, file + ":9:7: linear:")) << r.err;
  EXPECT_TRUE(contains(r.err, "2 errors in")) << r.err;
}

TEST_F(CliTest, Check_SyntaxError_IsLocated) {
  std::string file = write("bad.fusion", "fusion a(x: f32[4]) {\n  y = exp(x\n  return y\n}\n");
  CliResult r = alloy("check '" + file + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, file + ":3:3:")) << r.err;
}

TEST_F(CliTest, Print_OfThePrint_IsTheSameText) {
  CliResult once = alloy("print " + example("layer_norm.fusion"));
  ASSERT_EQ(once.code, 0) << once.err;
  std::string printed = write("printed.fusion", once.out);
  CliResult twice = alloy("print '" + printed + "'");
  ASSERT_EQ(twice.code, 0) << twice.err;
  EXPECT_EQ(once.out, twice.out);
}

TEST_F(CliTest, Compile_BuildsEveryKernelForTheArchitectureWithoutAGpu) {
#ifndef ALLOY_HAVE_CUDA
  ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#endif
  CliResult r = alloy("compile " + example("layer_norm.fusion") + " --arch sm_90");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[normalization]")) << r.out;
  EXPECT_TRUE(contains(r.out, "compiled for sm_90")) << r.out;
  CliResult dump = alloy("compile " + example("softmax.fusion") + " --arch sm_80 --dump cuda", settings_unset());
  EXPECT_EQ(dump.code, 0) << dump.err;
  EXPECT_TRUE(contains(dump.out, "__global__")) << dump.out;
  // a setting that differs from its default heads the compile's dump too
  CliResult set = alloy("--set NO_TILE_TRANSPOSES=1 compile " + example("softmax.fusion") + " --arch sm_80 --dump cuda", settings_unset());
  EXPECT_EQ(set.code, 0) << set.err;
  EXPECT_TRUE(set.out.starts_with("# settings: ALLOY_NO_TILE_TRANSPOSES=1\n")) << set.out;
  EXPECT_FALSE(contains(dump.out, "# settings:")) << dump.out;
  CliResult bad = alloy("compile " + example("mlp.fusion") + " --arch vulkan");
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(contains(bad.err, "--arch vulkan")) << bad.err;
}

// `alloy compile --dump segments|program`: the plan a GPU run makes, offline. The AdamW step is
// one kernel writing p, m and v in place; its program copies nothing.
TEST_F(CliTest, Compile_DumpsTheCudaPlanWithItsInPlaceOutputs) {
#ifndef ALLOY_HAVE_CUDA
  ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#endif
  CliResult r = alloy("compile " + example("adam_step.fusion") + " --dump segments --dump program");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "== dump segments (cuda)")) << r.out;
  EXPECT_TRUE(contains(r.out, "segments (cuda): 1\n  segment 0 [pointwise]")) << r.out;
  EXPECT_TRUE(contains(r.out, "in-place outputs:\n  p2 -> p: written in place by segment 0: pointwise")) << r.out;
  EXPECT_TRUE(contains(r.out, "Allocate v2: f32[N] = the memory of input v (written in place)")) << r.out;
  EXPECT_FALSE(contains(r.out, "Copy ")) << r.out;
  EXPECT_TRUE(contains(r.out, "compiled for sm_90")) << r.out;  // and the kernels still compile
  CliResult bad = alloy("compile " + example("adam_step.fusion") + " --dump ir");
  EXPECT_EQ(bad.code, 2) << bad.out;
}

TEST_F(CliTest, Compile_WithBoundSizes_ReportsTheKernelARunWouldLaunch) {
#ifndef ALLOY_HAVE_CUDA
  ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT();
#endif
  CliResult r = alloy("compile " + example("mlp_backward.fusion") + " --bind T=8192");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[reduction] variant")) << r.out;  // the bias gradients: column kernels
  EXPECT_TRUE(contains(r.out, "_x32_")) << r.out;
  EXPECT_TRUE(contains(r.out, "registers")) << r.out;
  CliResult unknown = alloy("compile " + example("mlp_backward.fusion") + " --bind Q=3");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_TRUE(contains(unknown.err, "--bind Q=3")) << unknown.err;
  CliResult malformed = alloy("compile " + example("mlp_backward.fusion") + " --bind T=x");
  EXPECT_EQ(malformed.code, 2);
}

}  // namespace
}  // namespace alloy

namespace alloy {
namespace {

// Settings (issue 16): listed by --help, set by --set or the environment, one meaning of 0/1,
// bad values are errors naming them, and dumps say which differ from their defaults.
TEST_F(CliTest, Settings_AreListedSetAndReportedInDumps) {
  CliResult help = alloy("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_TRUE(contains(help.out, "ALLOY_NO_COLUMN_KERNELS=0")) << help.out;
  EXPECT_TRUE(contains(help.out, "--set")) << help.out;

  CliResult set = alloy("--set NO_SIDE_STREAM=1 run " + example("layer_norm.fusion") + " --device cpu --dump segments", settings_unset());
  EXPECT_EQ(set.code, 0) << set.err;
  EXPECT_TRUE(contains(set.out, "# settings: ALLOY_NO_SIDE_STREAM=1\n")) << set.out;
  // after the subcommand too (it passes what it does not know to the top level)
  CliResult after = alloy("run " + example("layer_norm.fusion") + " --device cpu --dump segments --set NO_SIDE_STREAM=1", settings_unset());
  EXPECT_EQ(after.code, 0) << after.err;
  EXPECT_TRUE(contains(after.out, "# settings: ALLOY_NO_SIDE_STREAM=1\n")) << after.out;
  CliResult plain = alloy("run " + example("layer_norm.fusion") + " --device cpu --dump segments", settings_unset());
  EXPECT_EQ(plain.code, 0) << plain.err;
  EXPECT_FALSE(contains(plain.out, "# settings:")) << plain.out;

  CliResult unknown = alloy("--set NO_SUCH=1 run " + example("layer_norm.fusion"));
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(contains(unknown.err, "no setting 'NO_SUCH'")) << unknown.err;
  CliResult bad = alloy("--set MATMUL_AUTOTUNE=99 run " + example("layer_norm.fusion"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(contains(bad.err, "ALLOY_MATMUL_AUTOTUNE='99': expected an integer from 1 to 32")) << bad.err;
  CliResult env = alloy("run " + example("layer_norm.fusion") + " --device cpu");
  CliResult bad_env = CliResult{};
  {
    testing::ScopedEnv maybe("ALLOY_NO_COLUMN_KERNELS", "1");  // the test process's own copy stays valid
    ::setenv("ALLOY_NO_COLUMN_KERNELS", "maybe", 1);           // the child's environment
    bad_env = alloy("run " + example("layer_norm.fusion") + " --device cpu");
  }
  EXPECT_EQ(env.code, 0) << env.err;
  EXPECT_EQ(bad_env.code, 2) << "a usage error, as through --set";
  EXPECT_TRUE(contains(bad_env.err, "ALLOY_NO_COLUMN_KERNELS='maybe': expected 0 or 1")) << bad_env.err;
}

// `check` refuses what `run` refuses before planning: a collective stated in a fusion with a mesh.
TEST_F(CliTest, Check_AStatedCollective_IsRefusedAsRunRefusesIt) {
  std::string file = write("stated_collective.fusion",
                           "fusion f(x: f32[8] @mesh[0, 1] shard(axis=0)) {\n  y = all_gather(x, axis=0)\n  return y\n}\n");
  CliResult r = alloy("check '" + file + "'");
  std::string output = r.out + r.err;
  EXPECT_EQ(r.code, 1) << output;
  EXPECT_NE(output.find("stated_collective.fusion:2:"), std::string::npos) << output;
  EXPECT_NE(output.find("all_gather is a resharding step that Alloy inserts itself"), std::string::npos) << output;
  EXPECT_NE(output.find("1 error in"), std::string::npos) << output;
}

TEST(CliCheck, PrintsEveryErrorOfEveryFusion) {
  std::string path = ::testing::TempDir() + "/several_errors.fusion";
  {
    std::ofstream out(path);
    out << "fusion f(x: f32[4, 8], w: f32[8]) {\n  a = exp(x)\n  b = addd(a, w)\n  d = sum(a, dims=[5])\n  return a\n}\n"
           "fusion g(x: f32[4]) {\n  y = neg(q)\n  return y\n}\n";
  }
  std::string cmd = std::string(ALLOY_CLI_PATH) + " check '" + path + "' 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
  int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(output.find(":3:7: unknown op 'addd'"), std::string::npos) << output;
  EXPECT_NE(output.find(":4:7: sum:"), std::string::npos) << output;
  EXPECT_NE(output.find(":8:11: undefined value 'q'"), std::string::npos) << output;
  EXPECT_NE(output.find("3 errors"), std::string::npos) << output;
}

}  // namespace
}  // namespace alloy

// ---- hostile and careless input (issue 16) ----------------------------------------------------

namespace alloy {
namespace {

TEST_F(CliTest, Run_SeedOutOfRangeOrNotANumber_IsAUsageErrorSayingTheRange) {
  for (const char* seed : {"-1", "99999999999999999999", "3x", "''"}) {
    CliResult r = alloy("run " + example("softmax.fusion") + " --device cpu --seed " + seed);
    EXPECT_EQ(r.code, 2) << seed << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "0 to 9223372036854775807")) << r.err;
  }
  CliResult ok = alloy("run " + example("softmax.fusion") + " --device cpu --seed 9223372036854775807");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST_F(CliTest, Run_SaveOutputsToAnEmptyName_IsAUsageError) {
  CliResult r = alloy("run " + example("softmax.fusion") + " --device cpu --save-outputs ''");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "--save-outputs")) << r.err;
}

TEST_F(CliTest, FilesThatAreNotRegular_AreRefusedWithoutReadingThem) {
  CliResult r = alloy("check /dev/zero");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "not a regular file")) << r.err;
  std::string fifo = path("pipe.fusion");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = alloy("run '" + fifo + "'");  // would block forever if opened
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "not a regular file")) << r.err;
  std::string file = write("f.fusion", "fusion f(x: f32[N]) {\n  y = neg(x)\n  return y\n}\n");
  r = alloy("run '" + file + "' --input x=/dev/zero");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "/dev/zero")) << r.err;
  // a .fusion file past 64 MiB is refused by its size, unread (a sparse file: no disk used)
  std::string huge = write("huge.fusion", "fusion f(x: f32[4]) {\n  return x\n}\n");
  fs::resize_file(huge, (uintmax_t(64) << 20) + 1);
  r = alloy("check '" + huge + "'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "is 67108865 bytes; at most 67108864 bytes are read")) << r.err;
}

TEST_F(CliTest, Run_EmptyNpyOfShape2x0_IsAValidInput) {
  std::string file = write("f.fusion", "fusion f(x: f32[2, N]) {\n  y = neg(x)\n  return y\n}\n");
  write_npy(path("x.npy"), Tensor::empty(DType::f32, {2, 0}));
  CliResult r = alloy("run '" + file + "' --device cpu --input x=" + path("x.npy") + " --save-outputs " + path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_npy(path("out/y.npy")).sizes(), (std::vector<int64_t>{2, 0}));
}

// ---- alloy run --trace ---------------------------------------------------------------------

constexpr int kHostTid = 1000;  // runtime/trace_file.h

TEST_F(CliTest, Run_Trace_WritesAChromeTraceWithASpanPerNodeOnItsStreamAndTheHosts) {
  CliResult r = alloy("run " + example("mlp.fusion") + " --bind B=1 --bind S=2 --device cpu --trace " + path("t.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "wrote " + path("t.json") + " (")) << r.out;
  std::map<std::pair<int, int>, std::string> threads;
  TraceEvents events = trace_events(path("t.json"), &threads);
  EXPECT_EQ(events[std::make_pair(0, 0)], (std::vector<std::string>{"linear h", "gelu g", "linear y"}));
  for (const char* name : {"run mlp", "linear h", "gelu g", "linear y"}) EXPECT_TRUE(has(events[std::make_pair(0, kHostTid)], name)) << name;
  EXPECT_EQ(events.size(), 2u);  // one rank: its stream and the host
  EXPECT_EQ(threads[std::make_pair(0, 0)], "stream 0 (run)");
  EXPECT_EQ(threads[std::make_pair(0, kHostTid)], "host");
}

TEST_F(CliTest, Run_TraceWithBench_TracesOneMoreRun_TheBenchLineStaysLast) {
  CliResult r = alloy("run " + example("softmax.fusion") + " --device cpu --bench 2 --trace " + path("t.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(last_line(r.out).starts_with("bench median_us=")) << r.out;
  EXPECT_TRUE(contains(r.out, "wrote " + path("t.json"))) << r.out;
  EXPECT_FALSE(contains(r.out, "overlap")) << "no communication, no share: " << r.out;
  EXPECT_FALSE(trace_events(path("t.json"))[std::make_pair(0, 0)].empty());
}

TEST_F(CliTest, Run_TraceToAnEmptyNameIsAUsageError_ToAMissingFolderAUserError) {
  CliResult empty = alloy("run " + example("softmax.fusion") + " --device cpu --trace ''");
  EXPECT_EQ(empty.code, 2) << empty.err;
  CliResult missing = alloy("run " + example("softmax.fusion") + " --device cpu --trace " + path("no/such/t.json"));
  EXPECT_EQ(missing.code, 1) << missing.err;
  EXPECT_TRUE(contains(missing.err, "--trace " + path("no/such/t.json") + ": cannot write the file")) << missing.err;
  EXPECT_FALSE(contains(missing.out, "probs:")) << missing.out;  // said before the run, not after it
  // --save-outputs into a path that is a file: the same, before the run
  std::string file = write("a_file.txt", "x");
  CliResult not_dir = alloy("run " + example("softmax.fusion") + " --device cpu --save-outputs " + file);
  EXPECT_EQ(not_dir.code, 1) << not_dir.err;
  EXPECT_TRUE(contains(not_dir.err, "--save-outputs " + file + ": cannot write into the directory")) << not_dir.err;
  EXPECT_FALSE(contains(not_dir.out, "probs:")) << not_dir.out;
}

TEST_F(CliTest, Run_SaveOutputs_ReplacesASymlinkRatherThanWritingThroughIt) {
  std::string outside = write("outside.txt", "keep me");
  fs::create_directories(path("out"));
  fs::create_symlink(outside, path("out/probs.npy"));
  CliResult r = alloy("run " + example("softmax.fusion") + " --device cpu --save-outputs " + path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(testing::read_file(outside), "keep me");
  EXPECT_FALSE(fs::is_symlink(path("out/probs.npy")));
  EXPECT_EQ(read_npy(path("out/probs.npy")).dim(), 4);
}

}  // namespace
}  // namespace alloy

// ---- alloy run under mpirun ------------------------------------------------------------------

namespace alloy {
namespace {

// `mpirun -n N alloy ARGS` (oversubscribed, allowed as root), or empty where mpirun is missing.
class CliMpiTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not found (scripts/setup-deps installs Open MPI)";
  }
  CliResult mpirun(int ranks, const std::string& args) const {
    std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n " + std::to_string(ranks) +
                          " --oversubscribe '" + ALLOY_CLI_PATH + "' " + args + " >'" + path("stdout") + "' 2>'" + path("stderr") + "'";
    int status = std::system(command.c_str());
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = testing::read_file(path("stdout"));
    r.err = testing::read_file(path("stderr"));
    return r;
  }
  // MPMD: `mpirun -n 1 alloy ARGS0 : -n 1 alloy ARGS1 ...`, one rank per entry, under a time bound
  // (a hang is exit 124, a failure instead of a stuck CI job).
  CliResult mpmd(const std::vector<std::string>& rank_args) const {
    std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 60 mpirun --oversubscribe";
    for (size_t r = 0; r < rank_args.size(); ++r)
      command += std::string(r ? " :" : "") + " -n 1 '" + ALLOY_CLI_PATH + "' " + rank_args[r];
    command += " >'" + path("stdout") + "' 2>'" + path("stderr") + "'";
    int status = std::system(command.c_str());
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = testing::read_file(path("stdout"));
    r.err = testing::read_file(path("stderr"));
    return r;
  }
  // The example with every annotation removed: the same fusion on one device.
  std::string unsharded(const std::string& name) const {
    std::string text = testing::read_file(testing::source_path("examples/" + name));
    std::regex annotation(R"( @mesh\[[0-9, ]*\] (replicated|shard\(axis=[0-9]+\)))");
    return write("plain_" + name, std::regex_replace(text, annotation, ""));
  }
};

TEST_F(CliMpiTest, TensorParallelMlp_TwoRanks_SaveTheGlobalOutputsOfTheUnshardedRun) {
  for (const char* name : {"tp_mlp.fusion", "tp_mlp_sequence_parallel.fusion", "tp_mlp_backward.fusion"}) {
    SCOPED_TRACE(name);
    CliResult plain = alloy("run '" + unsharded(name) + "' --bind T=8 --device cpu --save-outputs " + path("plain"));
    ASSERT_EQ(plain.code, 0) << plain.err;
    CliResult r = mpirun(2, "run " + example(name) + " --bind T=8 --device cpu --save-outputs " + path("sharded") + " --dump program");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "Communicate")) << r.out;  // the program names its collectives
    for (const auto& entry : fs::directory_iterator(path("plain"))) {
      std::string out = entry.path().stem().string();
      Tensor expected = read_npy(entry.path().string());
      Tensor global = read_npy(path("sharded/" + out + ".npy"));
      EXPECT_TRUE(testing::tensors_close(global, expected)) << out;
      // every rank keeps its own part; the parts of a split output put together are the global value
      Tensor part0 = read_npy(path("sharded/" + out + ".rank0.npy")), part1 = read_npy(path("sharded/" + out + ".rank1.npy"));
      EXPECT_LE(part0.numel(), expected.numel()) << out;
      EXPECT_EQ(part0.sizes(), part1.sizes()) << out;
    }
    fs::remove_all(path("plain"));
    fs::remove_all(path("sharded"));
  }
}

TEST_F(CliMpiTest, Pipeline_ChunkedAndRingProgramsArePrintedAndGiveTheSameOutputs_GarbageIsAUsageError) {
  CliResult off = mpirun(2, "run " + example("tp_mlp_sequence_parallel.fusion") + " --bind T=12 --device cpu --pipeline off --save-outputs " +
                                path("off"));
  ASSERT_EQ(off.code, 0) << off.err;
  CliResult on = mpirun(2, "run " + example("tp_mlp_sequence_parallel.fusion") +
                               " --bind T=12 --device cpu --pipeline chunks=4 --dump program --save-outputs " + path("on"));
  ASSERT_EQ(on.code, 0) << on.err;
  EXPECT_TRUE(contains(on.out, "For i in 0..4 (all_gather -> linear h: 4 chunks (--pipeline chunks=4))")) << on.out;
  EXPECT_TRUE(testing::tensors_close(read_npy(path("on/y.npy")), read_npy(path("off/y.npy"))));
  // the ring, on 2 and 4 ranks: the same outputs, its steps printed
  std::string four = testing::read_file(testing::source_path("examples/tp_mlp_sequence_parallel.fusion"));
  for (size_t at = four.find("@mesh[0, 1]"); at != std::string::npos; at = four.find("@mesh[0, 1]", at + 1)) four.replace(at, 11, "@mesh[0, 1, 2, 3]");
  std::ofstream(path("sp4.fusion")) << four;
  for (int ranks : {2, 4}) {
    std::string dir = "ring" + std::to_string(ranks);
    std::string file = ranks == 2 ? example("tp_mlp_sequence_parallel.fusion") : path("sp4.fusion");
    CliResult ring = mpirun(ranks, "run " + file + " --bind T=12 --device cpu --pipeline ring --dump program --save-outputs " + path(dir));
    ASSERT_EQ(ring.code, 0) << ring.err;
    EXPECT_TRUE(contains(ring.out, "Ring s in 0.." + std::to_string(ranks) + " over the team (all_gather -> linear h: ring, --pipeline ring)"))
        << ring.out;
    EXPECT_TRUE(contains(ring.out, "SendRecv x__gathered of step s to rank + 1")) << ring.out;
    EXPECT_TRUE(testing::tensors_close(read_npy(path(dir + "/y.npy")), read_npy(path("off/y.npy"))));
  }
  for (const char* bad : {"sometimes", "chunks=0", "chunks=x", "ring=2"}) {
    CliResult r = alloy("run " + example("tp_mlp_sequence_parallel.fusion") + " --bind T=12 --pipeline " + bad);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "--pipeline")) << r.err;
  }
}

// The sharding is decided at the bound sizes (issue 25), and the dumps show the plan the run
// uses: the sequence-parallel MLP (16 features, 64 hidden; only its output annotated) gathers the
// tokens and reduce-scatters the output at T = 8, gathers the weights at T = 1024; both equal
// the unsharded run.
TEST_F(CliMpiTest, SequenceParallelMlp_DumpsThePlanDecidedAtTheBoundSizes) {
  std::string file = write("sp.fusion", R"(fusion sp(x: f32[T, 16] @mesh[0, 1] shard(axis=0), w_fc: f32[64, 16] @mesh[0, 1] shard(axis=0),
          b_fc: f32[64] @mesh[0, 1] shard(axis=0), w_proj: f32[16, 64] @mesh[0, 1] shard(axis=1),
          b_proj: f32[16] @mesh[0, 1] replicated) {
  h = linear(x, w_fc, b_fc)
  g = gelu(h, approximate="tanh")
  y = linear(g, w_proj, b_proj) @mesh[0, 1] shard(axis=0)
  return y
})");
  std::regex annotation(R"( @mesh\[[0-9, ]*\] (replicated|shard\(axis=[0-9]+\)))");
  std::string plain = write("sp_plain.fusion", std::regex_replace(testing::read_file(file), annotation, ""));
  for (int t : {8, 1024}) {
    SCOPED_TRACE("T = " + std::to_string(t));
    std::string bind = " --bind T=" + std::to_string(t) + " --device cpu --save-outputs ";
    CliResult r = mpirun(2, "run " + file + bind + path("sharded") + " --dump sharding --dump program");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    bool tokens = t == 8;
    EXPECT_EQ(contains(r.out, "all_gather(axis=0) x: f32[T/2, 16] -> x__gathered"), tokens) << r.out;
    EXPECT_EQ(contains(r.out, "reduce_scatter(axis=0, reduce=\"sum\") y__computed"), tokens) << r.out;
    EXPECT_EQ(contains(r.out, "all_gather(axis=0) w_fc: f32[32, 16] -> w_fc__gathered"), !tokens) << r.out;
    EXPECT_EQ(contains(r.out, "h: f32[T, 64] @mesh[0, 1] shard(axis=1)  # propagated: column-parallel from w_fc"), tokens) << r.out;
    CliResult one = alloy("run '" + plain + "'" + bind + path("plain"));
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_TRUE(testing::tensors_close(read_npy(path("sharded/y.npy")), read_npy(path("plain/y.npy"))));
  }
}

// A sum or mean of f16 / bf16 over a sharded axis is the one-process value: the ranks' partials are
// combined in f32 and rounded once. (Rounded to f16 each, 40000 + 40000 and -36000 - 36000 were
// inf and -inf: NaN; bf16 parts of 256 + 1 + 0.5 + 0.5 gave 256 on 4 ranks.)
TEST_F(CliMpiTest, HalfSumsOverAShardedAxis_AreTheOneProcessSums) {
  Tensor x = Tensor::empty(DType::f16, {1, 4});
  const float values[] = {40000, 40000, -36000, -36000};
  for (int i = 0; i < 4; ++i) static_cast<uint16_t*>(x.data())[i] = float_to_f16_bits(values[i]);
  write_npy(path("x16.npy"), x);
  Tensor y = Tensor::empty(DType::bf16, {1, 8});
  const float more[] = {256, 0, 1, 0, 0.5f, 0, 0.5f, 0};  // rank r holds columns 2r and 2r + 1
  for (int i = 0; i < 8; ++i) static_cast<uint16_t*>(y.data())[i] = float_to_bf16_bits(more[i]);
  write_npy(path("x_bf16.npy"), y);
  const std::string f16 = write("f16.fusion", "fusion f(x: f16[T, 4] @mesh[0, 1] shard(axis=1)) {\n  s = sum(x, dims=[1])\n  return s\n}\n");
  CliResult r = mpirun(2, "run " + f16 + " --input x=" + path("x16.npy") + " --device cpu --save-outputs " + path("o16"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  Tensor s = read_npy(path("o16/s.npy"));
  ASSERT_EQ(s.dtype(), DType::f16);
  EXPECT_EQ(f16_bits_to_float(static_cast<const uint16_t*>(s.data())[0]), 8000.0f);
  const std::string bf16 = write("bf16.fusion",
                                 "fusion f(x: bf16[T, 8] @mesh[0, 1, 2, 3] shard(axis=1)) {\n  s = sum(x, dims=[1])\n  m = mean(x, dims=[1])\n"
                                 "  return s, m\n}\n");
  r = mpirun(4, "run " + bf16 + " --input x=" + path("x_bf16.npy") + " --device cpu --save-outputs " + path("ob") + " --dump program");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "all_reduce(reduce=\"sum\") s__partial: f32[T]")) << r.out;
  // (bf16 outputs are saved as f32 .npy: NumPy has no bf16)
  Tensor sb = read_npy(path("ob/s.npy")), mb = read_npy(path("ob/m.npy"));
  ASSERT_EQ(sb.dtype(), DType::f32);
  EXPECT_EQ(static_cast<const float*>(sb.data())[0], 258.0f);
  EXPECT_EQ(static_cast<const float*>(mb.data())[0], 32.25f);
}

// A row-parallel linear's bias (held-out check, bf16, x = [16, 16], w = [16, -16], b = 1): in
// the epilogue as 1/n shares it rounds with the cancelling partial sums (256.5 and -255.5 are 256
// and -256 in bf16: y = 0, the documented DTensor-like form); added after the linear, it is added
// once after the all-reduce, as Megatron does: y = 1, the one-process result.
TEST_F(CliMpiTest, ARowParallelBiasAddedAfterTheLinear_IsAddedOnceAfterTheAllReduce) {
  auto bf16_tensor = [](std::vector<int64_t> sizes, std::vector<float> v) {
    Tensor t = Tensor::empty(DType::bf16, sizes);
    for (size_t i = 0; i < v.size(); ++i) static_cast<uint16_t*>(t.data())[i] = float_to_bf16_bits(v[i]);
    return t;
  };
  write_npy(path("x.npy"), bf16_tensor({1, 2}, {16, 16}));
  write_npy(path("w.npy"), bf16_tensor({1, 2}, {16, -16}));
  write_npy(path("b.npy"), bf16_tensor({1}, {1}));
  const std::string head = "fusion f(x: bf16[1, 2] @mesh[0, 1] shard(axis=1), w: bf16[1, 2] @mesh[0, 1] shard(axis=1),\n"
                           "         b: bf16[1] @mesh[0, 1] replicated) {\n";
  const std::string after = write("after.fusion", head + "  p = linear(x, w)\n  y = add(p, b)\n  return y\n}\n");
  const std::string fused = write("fused.fusion", head + "  y = linear(x, w, b)\n  return y\n}\n");
  const std::string inputs = " --input x=" + path("x.npy") + " --input w=" + path("w.npy") + " --input b=" + path("b.npy");
  CliResult r = mpirun(2, "run " + after + inputs + " --device cpu --save-outputs " + path("after") + " --dump program");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "Communicate segment 1: all_reduce(reduce=\"sum\") p: bf16[1, 1]")) << r.out;
  EXPECT_EQ(static_cast<const float*>(read_npy(path("after/y.npy")).data())[0], 1.0f);
  r = mpirun(2, "run " + fused + inputs + " --device cpu --save-outputs " + path("fused"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(static_cast<const float*>(read_npy(path("fused/y.npy")).data())[0], 0.0f);
}

// A job of one process under mpirun ends as alone: exit 0 (held-out check: MPI was started and
// not finalized, and mpirun failed every `mpirun -n 1 alloy ...` with exit 1), and 1 on an error.
TEST_F(CliMpiTest, AJobOfOneProcess_ExitsAsTheRunDoes) {
  CliResult r = mpirun(1, "run " + example("softmax.fusion") + " --device cpu");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_FALSE(contains(r.err, "finalize")) << r.err;
  r = mpirun(1, "check " + example("softmax.fusion"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = mpirun(1, "run " + example("softmax.fusion") + " --input scores=" + path("missing.npy"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
}

// A max or min over a sharded axis is NaN where any rank's part holds a NaN, as one process's is
// (held-out check: MPI's max kept the number where rank 0's part held the NaN: [nan, 2] for
// [nan, nan]); infinities and numbers are untouched. Three ranks, a NaN in each part in turn.
TEST_F(CliMpiTest, MaxAndMinOverAShardedAxis_KeepTheNaNsOfAnyRank) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {nan, 1, 2, 3, 4, 5,     // rank 0's part
                                      1, 2, nan, 3, 4, 5,     // rank 1's
                                      1, 2, 3, 4, 5, nan,     // rank 2's
                                      -inf, 1, 2, 3, 4, inf,  // no NaN
                                      nan, nan, nan, nan, nan, nan};
  Tensor x = Tensor::empty(DType::f32, {5, 6});
  for (int i = 0; i < 30; ++i) store_double(x.data(), DType::f32, i, values[size_t(i)]);
  write_npy(path("x.npy"), x);
  const std::string text = "fusion f(x: f32[5, 6] @mesh[0, 1, 2] shard(axis=1)) {\n  mx = max(x, dims=[1])\n  mn = min(x, dims=[1])\n"
                           "  return mx, mn\n}\n";
  CliResult r = mpirun(3, "run " + write("nan.fusion", text) + " --input x=" + path("x.npy") + " --device cpu --save-outputs " + path("o"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  Tensor mx = read_npy(path("o/mx.npy")), mn = read_npy(path("o/mn.npy"));
  for (int row : {0, 1, 2, 4}) {
    EXPECT_TRUE(std::isnan(mx.data_as<float>()[row])) << row;
    EXPECT_TRUE(std::isnan(mn.data_as<float>()[row])) << row;
  }
  EXPECT_EQ(mx.data_as<float>()[3], INFINITY);
  EXPECT_EQ(mn.data_as<float>()[3], -INFINITY);
}

TEST_F(CliMpiTest, OnlyRankZeroPrintsTheSummary) {
  CliResult one = alloy("run '" + unsharded("tp_mlp.fusion") + "' --bind T=8 --device cpu");
  ASSERT_EQ(one.code, 0) << one.err;
  CliResult r = mpirun(4, "run " + example("tp_mlp.fusion") + " --bind T=8 --device cpu");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // the output lines of the four-rank run are those of the one-process run (same seeded inputs), once
  std::string y_line = one.out.substr(one.out.find("y: "));
  y_line = y_line.substr(0, y_line.find('\n'));
  size_t first = r.out.find(y_line);
  ASSERT_NE(first, std::string::npos) << r.out << "\nexpected the line: " << y_line;
  EXPECT_EQ(r.out.find(y_line, first + 1), std::string::npos) << r.out;
}

TEST_F(CliMpiTest, MeshLargerThanTheJob_IsOneUserErrorWithExit1) {
  CliResult r = mpirun(2, "run " + example("tp_mlp.fusion") + " --bind T=8 --device cpu");
  ASSERT_EQ(r.code, 0) << r.err;  // (a mesh of two in a job of two)
  std::string file = write("big.fusion",
                           "fusion f(x: f32[8, 4] @mesh[0, 1, 2, 3] shard(axis=0)) {\n  y = sum(x, dims=[0])\n  return y\n}\n");
  r = mpirun(2, "run '" + file + "' --device cpu");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "e.g. `mpirun -n 4 alloy run ...`, or `mpirun -n 4 python3 script.py` for a Python script")) << r.err;
  // reported once, not once per rank
  size_t at = r.err.find("the mesh has 4 devices");
  EXPECT_EQ(r.err.find("the mesh has 4 devices", at + 1), std::string::npos) << r.err;
}

TEST_F(CliMpiTest, IndivisibleSymbolicSize_IsOneUserErrorNamingValueAxisSizeAndMeshWithExit1) {
  CliResult r = mpirun(2, "run " + example("tp_mlp_sequence_parallel.fusion") + " --bind T=7 --device cpu");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  // names the value, the axis, the size and the mesh, once for the job
  for (const char* part : {"input 'x', axis 0", "size 7", "@mesh[0, 1]"}) EXPECT_TRUE(contains(r.err, part)) << r.err;
  size_t at = r.err.find("size 7");
  EXPECT_EQ(r.err.find("size 7", at + 1), std::string::npos) << r.err;
}

TEST_F(CliMpiTest, AWholeInputOfTheWrongSize_IsNamedInTheDeclaredSizesNotAParts) {
  std::string file = write("w.fusion", "fusion f(x: f32[6, 8] @mesh[0, 1] shard(axis=1)) {\n  y = sum(x, dims=[1])\n  return y\n}\n");
  write_npy(path("x10.npy"), f32_tensor({6, 10}, std::vector<float>(60, 1.0f)));
  CliResult r = mpirun(2, "run '" + file + "' --device cpu --input x=" + path("x10.npy"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "input 'x', axis 1: expected size 8 (declared f32[6, 8]), found 10")) << r.err;
}

TEST_F(CliMpiTest, BadInputFileOnOneRankOnly_FailsTheWholeJobWithoutAHang) {
  // every rank reads the same path; here the file is valid but of the wrong shape
  write_npy(path("x.npy"), f32_tensor({3, 2}, {1, 2, 3, 4, 5, 6}));
  CliResult r = mpirun(2, "run " + example("tp_mlp.fusion") + " --bind T=8 --device cpu --input x=" + path("x.npy"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "'x'")) << r.err;
}

// An out-of-range gather index in a sharded run, found by one rank (tokens sharded: rank 1 holds
// the bad target) or by every rank (the vocabulary sharded: the logits gathered first): every
// rank reaches the run's end, the job agrees on the failure there, and it is told once, exit 1,
// without an abort of the job; the input named as the user wrote it.
TEST_F(CliMpiTest, AnOutOfRangeGatherIndexInAShardedRun_IsOneMessageAndExit1) {
  Tensor target = Tensor::empty(DType::i64, {4});
  const int64_t values[] = {0, 5, 2, 6};  // 6 is past the 6 classes' last (rank 1's second row when tokens are sharded)
  for (int i = 0; i < 4; ++i) static_cast<int64_t*>(target.data())[i] = values[i];
  write_npy(path("target.npy"), target);
  // (the last without a mesh: every rank runs it whole and fails alike; it was told by each, and
  // the job aborted)
  for (const char* sharded : {"logits: f32[T, 6] @mesh[0, 1] shard(axis=0), target: i64[T] @mesh[0, 1] shard(axis=0)",
                              "logits: f32[T, 6] @mesh[0, 1] shard(axis=1), target: i64[T] @mesh[0, 1] replicated",
                              "logits: f32[T, 6], target: i64[T]"}) {
    SCOPED_TRACE(sharded);
    const std::string text = std::string("fusion f(") + sharded +
                             ") {\n  t = unsqueeze(target, dim=1)\n  picked = gather(logits, t, dim=1)\n  return picked\n}\n";
    CliResult r = mpirun(2, "run " + write("ce.fusion", text) + " --device cpu --input target=" + path("target.npy"));
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    const std::string said = "gather: index value 6 at index position";
    ASSERT_TRUE(contains(r.err, said)) << r.err;
    EXPECT_EQ(r.err.find(said), r.err.rfind(said)) << "told more than once:\n" << r.err;
    EXPECT_TRUE(contains(r.err, "of the input 'logits'")) << r.err;
    EXPECT_FALSE(contains(r.err, "MPI_ABORT")) << r.err;
  }
}

// ---- ranks given different things (issue 26): one message, exit 1 on every rank, no hang ------

TEST_F(CliMpiTest, RanksLaunchedDifferently_FailTogetherNamingTheFirstDifference) {
  std::string tp = example("tp_mlp.fusion"), sp = example("tp_mlp_sequence_parallel.fusion");
  std::string sum = write("sum.fusion", "fusion f(x: f32[8, 4] @mesh[0, 1] shard(axis=0)) {\n  y = sum(x, dims=[0])\n  return y\n}\n");
  std::string max = write("max.fusion", "fusion f(x: f32[8, 4] @mesh[0, 1] shard(axis=0)) {\n  y = max(x, dims=[0])\n  return y\n}\n");
  // a longer statement on line 3 moves every printed comment's column: line 2 is still the same
  std::string neg_sum = write("neg_sum.fusion", "fusion f(x: f32[8, 4] @mesh[0, 1] shard(axis=0)) {\n  r = neg(x)\n  y = sum(r, dims=[1])\n  return y\n}\n");
  std::string neg_mean = write("neg_mean.fusion", "fusion f(x: f32[8, 4] @mesh[0, 1] shard(axis=0)) {\n  r = neg(x)\n  y = mean(r, dims=[1])\n  return y\n}\n");
  struct Case {
    std::vector<std::string> ranks;
    std::vector<std::string> said;  // in the one message
  };
  std::vector<Case> cases = {
      {{"run " + tp + " --bind T=8 --device cpu", "run " + tp + " --bind T=16 --device cpu"}, {"bound sizes", "rank 1 has T=16, rank 0 T=8"}},
      {{"run " + tp + " --bind T=8 --device cpu", "run " + sp + " --bind T=8 --device cpu"}, {"disagree on the fusion", "rank 1"}},
      {{"run " + sp + " --bind T=12 --device cpu --pipeline ring", "run " + sp + " --bind T=12 --device cpu --pipeline off"},
       {"pipeline", "rank 1 has off, rank 0 ring"}},
      {{"run " + sp + " --bind T=12 --device cpu --pipeline chunks=2", "run " + sp + " --bind T=12 --device cpu --pipeline chunks=4"},
       {"pipeline", "chunks=4", "chunks=2"}},
      {{"run " + tp + " --bind T=8 --device cpu", "run " + tp + " --bind T=8 --device cpu --bench 3"}, {"bench runs", "rank 1 has 3"}},
      {{"check " + tp, "run " + tp + " --bind T=8 --device cpu"}, {"command", "rank 1 has run, rank 0 check"}},
      {{"run " + tp + " --bind T=8 --device cpu --seed 1", "run " + tp + " --bind T=8 --device cpu"}, {"seed", "rank 1 has 0, rank 0 1"}},
      {{"run '" + sum + "' --device cpu", "run '" + max + "' --device cpu"}, {"disagree on the fusion", "first different at line 2: rank 1 has `  y = max(x, dims=[0]"}},
      {{"run " + tp + " --bind T=8 --device cpu --dump program", "run " + tp + " --bind T=8 --device cpu"}, {"dumps", "program"}},
      {{"run '" + neg_sum + "' --device cpu", "run '" + neg_mean + "' --device cpu"}, {"first different at line 3: rank 1 has `  y = mean(r"}},
      // one rank reads a file, the other draws random values (same shape): different inputs
      {{"run '" + sum + "' --device cpu --input x=" + path("x84.npy"), "run '" + sum + "' --device cpu"}, {"values of input 'x'"}},
      {{"run '" + sum + "' --device cpu", "run '" + sum + "' --device cpu --save-outputs " + path("saved")}, {"saved outputs", "rank 1 has on"}},
  };
  write_npy(path("x84.npy"), f32_tensor({8, 4}, std::vector<float>(32, 0.5f)));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.ranks[0] + " : " + c.ranks[1]);
    auto start = std::chrono::steady_clock::now();
    CliResult r = mpmd(c.ranks);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_LT(seconds, 30.0);  // (10 s on an idle machine; mpirun's start-up on a loaded one is slow)
    for (const std::string& part : c.said) EXPECT_TRUE(contains(r.err, part)) << part << "\n" << r.err;
    // one message for the job, from rank 0
    size_t at = r.err.find("disagree");
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("disagree", at + 1), std::string::npos) << r.err;
  }
}

TEST_F(CliMpiTest, SizeErrorWithARankOutsideTheMesh_EndsEveryRankWithOneMessage) {
  std::string file = write("t.fusion", "fusion f(x: f32[T, 4] @mesh[0, 1] shard(axis=0)) {\n  y = sum(x, dims=[0])\n  return y\n}\n");
  CliResult r = mpmd({"run '" + file + "' --bind T=7 --device cpu", "run '" + file + "' --bind T=7 --device cpu",
                      "run '" + file + "' --bind T=7 --device cpu"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "size 7")) << r.err;
  size_t at = r.err.find("size 7");
  EXPECT_EQ(r.err.find("size 7", at + 1), std::string::npos) << r.err;
}

TEST_F(CliMpiTest, RankZeroOutsideTheMesh_TheMeshsFirstRankPrintsSavesAndBenches) {
  std::string file = write("r1.fusion", "fusion f(x: f32[8, 4] @mesh[1] replicated) {\n  y = sum(x, dims=[0])\n  return y\n}\n");
  std::string plain = write("plain.fusion", "fusion f(x: f32[8, 4]) {\n  y = sum(x, dims=[0])\n  return y\n}\n");
  CliResult one = alloy("run '" + plain + "' --device cpu --save-outputs " + path("one"));
  ASSERT_EQ(one.code, 0) << one.err;
  CliResult r = mpirun(2, "run '" + file + "' --device cpu --bench 2 --save-outputs " + path("two"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "y: f32[4]")) << r.out;
  EXPECT_TRUE(contains(r.out, "bench median_us=")) << r.out;
  EXPECT_TRUE(testing::tensors_close(read_npy(path("two/y.npy")), read_npy(path("one/y.npy"))));
}

TEST_F(CliMpiTest, MeshLargerThanTheJob_NamesBothCounts_AHugeIdDoesNotOverflow) {
  std::string big = write("big3.fusion", "fusion f(x: f32[8, 4] @mesh[0, 1, 2] shard(axis=0)) {\n  y = sum(x, dims=[0])\n  return y\n}\n");
  CliResult r = mpirun(2, "run '" + big + "' --device cpu");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "the mesh has 3 devices but the job has 2 processes")) << r.err;
  std::string huge = write("huge.fusion",
                           "fusion f(x: f32[8, 4] @mesh[9223372036854775807] replicated) {\n  y = sum(x, dims=[0])\n  return y\n}\n");
  r = mpirun(2, "run '" + huge + "' --device cpu");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "9223372036854775807")) << r.err;
  EXPECT_FALSE(contains(r.err, "-9223372036854775808")) << r.err;
}

// --help or --version on one rank of a job (printed there, exit 0) met no agreement, so the
// others waited for it forever: now a disagreement on the command, told once, exit 1; on every
// rank, each prints and the job ends 0.
TEST_F(CliMpiTest, HelpOrVersionOnOneRank_IsADisagreementOnTheCommand_OnEveryRankEndsTheJob) {
  std::string tp = example("tp_mlp.fusion");
  for (const char* other : {"run " , "--version", "--help"}) {
    SCOPED_TRACE(other);
    const std::string second = std::string(other) == "run " ? "run " + tp + " --bind T=8 --device cpu --help" : other;
    CliResult r = mpmd({"run " + tp + " --bind T=8 --device cpu", second});
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    const std::string told = "disagree on the command: rank 1 has " + std::string(second.find("--version") != std::string::npos ? "--version" : "--help");
    size_t at = r.err.find(told);
    EXPECT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(told, at + 1), std::string::npos) << "told once\n" << r.err;
  }
  CliResult all = mpirun(2, "--version");
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_TRUE(contains(all.out, "alloy 0.1.0")) << all.out;
}

// Fusions of different numbers of inputs on two ranks: the first fact that differs is the fusion,
// named by its first different line (the records' counts differed at the first slot, whose hash
// was the same: "a hash collision" was said instead).
TEST_F(CliMpiTest, FusionsOfDifferentInputCounts_NameTheFusionsFirstDifferentLine) {
  std::string two = write("two_inputs.fusion",
                          "fusion f(x: f32[8] @mesh[0, 1] shard(axis=0), y: f32[8] @mesh[0, 1] shard(axis=0)) {\n  z = add(x, y)\n  return z\n}\n");
  std::string one = write("one_input.fusion", "fusion f(x: f32[8] @mesh[0, 1] shard(axis=0)) {\n  z = add(x, x)\n  return z\n}\n");
  CliResult r = mpmd({"run '" + two + "' --device cpu", "run '" + one + "' --device cpu"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "disagree on the fusion")) << r.err;
  EXPECT_TRUE(contains(r.err, "first different at line 1")) << r.err;
  EXPECT_FALSE(contains(r.err, "collision")) << r.err;
}

// A usage error on one rank only ends the job, told once, exit 1: one found as the command line
// is read (--bind T=x) and one found as the run sets up (a malformed --input, the run's setup
// error at the job's first agreement: it hung the job, the failing rank agreeing a second time).
TEST_F(CliMpiTest, UsageErrorOnOneRank_EndsTheJob) {
  std::string tp = example("tp_mlp.fusion");
  for (const char* bad : {"--bind T=x", "--input x", "--input =in.npy"}) {
    SCOPED_TRACE(bad);
    CliResult r = mpmd({"run " + tp + " --bind T=8 --device cpu", "run " + tp + " --bind T=8 --device cpu " + bad});
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    const std::string told = std::string(bad).substr(0, bad[2] == 'b' ? 10 : 8);
    size_t at = r.err.find(told);
    EXPECT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(told, at + 1), std::string::npos) << "told once\n" << r.err;
    EXPECT_FALSE(contains(r.err, "MPI_ABORT")) << "the job agrees on it, it is not aborted\n" << r.err;
  }
}

// A usage error every rank makes (the same command line: a bad --pipeline, an unknown option, a
// malformed --input) is told once, exit 1 (a job's failure), the job not aborted.
TEST_F(CliMpiTest, UsageErrorOnEveryRank_IsToldOnceWithExit1) {
  std::string tp = example("tp_mlp.fusion");
  for (const char* bad : {"--pipeline chunks=-3", "--bogus", "--input x"}) {
    CliResult r = mpirun(3, "run " + tp + " --bind T=8 --device cpu " + bad);
    EXPECT_EQ(r.code, 1) << bad << "\n" << r.err;
    std::string first = bad[2] == 'p' ? "--pipeline: chunks must be a whole number" : bad[2] == 'b' ? "--bogus" : "--input x: expected NAME=PATH.npy";
    size_t at = r.err.find(first);
    EXPECT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(first, at + 1), std::string::npos) << "told once\n" << r.err;
    EXPECT_FALSE(contains(r.err, "MPI_ABORT")) << r.err;
  }
}

// A setting's bad value in every rank's environment is a usage error as through --set, and a file
// the run cannot write (a --trace that is a directory, a saved output's name taken by a directory)
// is found before the run: each told once, exit 1, the job not aborted (both were found on every
// rank outside the agreement: a message a rank and MPI_ABORT).
TEST_F(CliMpiTest, BadSettingsAndUnwritableFiles_AreToldOnceWithExit1) {
  std::string tp = example("tp_mlp.fusion");
  std::string dir = path("saved");
  std::filesystem::create_directories(dir + "/y.npy");
  std::vector<std::pair<std::string, std::string>> cases = {
      {"", "ALLOY_NO_SIDE_STREAM='7': expected 0 or 1"},
      {"--trace " + dir, "--trace " + dir + ": cannot write the file: it is a directory"},
      {"--save-outputs " + dir, "cannot write y.npy: it is a directory"}};
  for (const auto& [option, told] : cases) {
    SCOPED_TRACE(told);
    testing::ScopedEnv restored("ALLOY_NO_SIDE_STREAM", "0");         // the test process's own copy stays valid
    if (option.empty()) ::setenv("ALLOY_NO_SIDE_STREAM", "7", 1);  // mpirun's ranks inherit it
    CliResult r = mpirun(2, "run " + tp + " --bind T=8 --device cpu " + option);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    size_t at = r.err.find(told);
    EXPECT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(told, at + 1), std::string::npos) << "told once\n" << r.err;
    EXPECT_FALSE(contains(r.err, "MPI_ABORT")) << r.err;
  }
}

// Two ranks, the sequence-parallel MLP in two chunks: one file, a process per rank, each with the
// chunks' collectives on the communication stream and their GEMMs on the two compute streams; and
// --bench's share of communication under compute before the bench line. A rank outside the mesh
// is a process with no spans.
TEST_F(CliMpiTest, Trace_TwoRanks_OneFileWithAProcessPerRank_ChunksOnTheirStreams_AndTheOverlapShare) {
  CliResult r = mpirun(2, "run " + example("tp_mlp_sequence_parallel.fusion") + " --bind T=12 --device cpu --pipeline chunks=2 --bench 2 --trace " +
                              path("t.json"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(last_line(r.out).starts_with("bench median_us=")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\noverlap comm_under_compute=[0-9.]+ comm_us=[0-9.]+ under_compute_us=[0-9.]+ ranks=2\n")))
      << r.out;
  std::map<std::pair<int, int>, std::string> threads;
  std::set<int> processes;
  TraceEvents events = trace_events(path("t.json"), &threads, &processes);
  EXPECT_EQ(processes, (std::set<int>{0, 1}));
  for (int rank : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto& communication = events[std::make_pair(rank, 1)];
    for (const char* name : {"all_gather x chunk 0", "all_gather x chunk 1", "reduce_scatter y__computed chunk 0", "reduce_scatter y__computed chunk 1"})
      EXPECT_TRUE(has(communication, name)) << name;
    EXPECT_EQ(threads[std::make_pair(rank, 1)], "stream 1 (communication)");
    EXPECT_TRUE(has(events[std::make_pair(rank, 2)], "linear h chunk 0 block 0"));
    EXPECT_TRUE(has(events[std::make_pair(rank, 2)], "linear h chunk 0 block 1"));
    EXPECT_TRUE(has(events[std::make_pair(rank, 3)], "linear h chunk 1 block 1"));
    EXPECT_TRUE(has(events[std::make_pair(rank, 0)], "gelu g"));
    EXPECT_TRUE(has(events[std::make_pair(rank, kHostTid)], "run tp_mlp_sp"));
  }
  CliResult outside = mpirun(3, "run " + example("tp_mlp.fusion") + " --bind T=8 --device cpu --trace " + path("three.json"));
  ASSERT_EQ(outside.code, 0) << outside.out << outside.err;
  processes.clear();
  events = trace_events(path("three.json"), nullptr, &processes);
  EXPECT_EQ(processes, (std::set<int>{0, 1, 2}));
  EXPECT_TRUE(has(events[std::make_pair(1, 0)], "all_reduce y__partial")) << "rank 1's spans";
  for (auto& [where, names] : events) EXPECT_NE(where.first, 2) << "rank 2, outside the mesh, ran " << names.at(0);
}

// The same on the GPU (scripts/gpu-check): the chunks' collectives and GEMMs on streams of their
// own, timed by CUDA events, and the GEMMs taking device time.
TEST_F(CliMpiTest, TraceGpu_TwoRanks_ChunkedCollectivesAndGemmsOnSideStreams) {
  if (!testing::gpu_available()) ALLOY_SKIP_GPU_TEST("no CUDA GPU available: " << testing::gpu_unavailable_reason());
  CliResult r = mpirun(2, "run " + example("tp_mlp_sequence_parallel.fusion") + " --bind T=4096 --device cuda --pipeline chunks=2 --bench 5 --trace " +
                              path("t.json"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "\noverlap comm_under_compute=")) << r.out;
  nlohmann::json file = nlohmann::json::parse(testing::read_file(path("t.json")));
  for (int rank : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::set<int> communication, compute;
    int timed_gemms = 0;
    for (const auto& e : file.at("traceEvents")) {
      if (e.at("ph") != "X" || e.at("pid") != rank || e.at("tid") == kHostTid) continue;
      std::string name = e.at("name");
      if (name.starts_with("all_gather x chunk") || name.starts_with("reduce_scatter")) communication.insert(e.at("tid").get<int>());
      if (name.starts_with("linear h chunk") || name.starts_with("matmul h chunk")) {
        compute.insert(e.at("tid").get<int>());
        timed_gemms += e.at("dur").get<double>() > 0;
      }
    }
    ASSERT_EQ(communication.size(), 1u) << "the collectives on one stream";
    EXPECT_NE(*communication.begin(), 0) << "on a side stream";
    EXPECT_EQ(compute.size(), 2u) << "the chunks' GEMMs on the pool of two compute streams";
    EXPECT_FALSE(compute.count(*communication.begin()));
    EXPECT_GT(timed_gemms, 0);
  }
}

TEST_F(CliTest, PipelineChunksZero_PrintsItsPrefixOnce) {
  CliResult r = alloy("run " + example("tp_mlp_sequence_parallel.fusion") + " --bind T=12 --pipeline chunks=0");
  EXPECT_EQ(r.code, 2) << r.err;
  size_t at = r.err.find("--pipeline");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--pipeline:", at + 1), std::string::npos) << r.err;
}

}  // namespace
}  // namespace alloy
