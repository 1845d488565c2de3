// Every fusion here (and each of kernel_cases.h) runs on the GPU and on the CPU reference with the
// same fresh random inputs (GPU outputs poisoned first) and must agree at the dtype's tolerance.
// Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "alloy/backend/backend.h"
#include "alloy/backend/cuda/kernel_tuning.h"
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "backend/cuda/kernel_cases.h"
#include "test_util.h"

namespace alloy {
namespace {

using testing::expect_gpu_matches_cpu;

// The generated-kernel cases of kernel_cases.h, one test each (the CPU emulation runs them too).
class GpuKernelCase : public ::testing::TestWithParam<testing::KernelCase> {};

TEST_P(GpuKernelCase, MatchesTheCpu) {
  const testing::KernelCase& c = GetParam();
  std::string text = c.file.empty() ? c.text : testing::read_file(testing::source_path(c.file));
  expect_gpu_matches_cpu(text, c.sizes);
}

INSTANTIATE_TEST_SUITE_P(GpuEndToEnd, GpuKernelCase, ::testing::ValuesIn(testing::kernel_cases()),
                         [](const ::testing::TestParamInfo<testing::KernelCase>& info) { return info.param.name; });

TEST(GpuEndToEnd, CatAndScalarInputs) {
  expect_gpu_matches_cpu(R"(fusion f(x: f32[5, 3], y: f32[2, 3], alpha: f32, z: f32[]) {
  c = cat(x, y, dim=0)
  s = mul(c, alpha)
  t = add(s, z)
  return t
})", {});
}

// Ten runs of one executor and a run of a fresh one on the same inputs, each compared byte for byte
// with the first (kernels whose blocks combine partials in a fixed order); the first ran a kernel
// whose variant names `variant_mark` ("_g_", "_io_") and, where `check_values`, matches the CPU
// reference.
void expect_the_same_bits_every_run(const std::string& text, const Bindings& sizes, const std::string& variant_mark, bool check_values) {
  auto fusion = parse_fusion(text, "bits.fusion", std::nullopt);
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes, 7);
  auto run_on_gpu = [&](FusionExecutor& gpu) {
    std::vector<Tensor> out;
    for (const Tensor& t : gpu.run(inputs)) out.push_back(to_cpu(t));
    gpu.synchronize();
    return out;
  };
  FusionExecutor gpu(parse_fusion(text, "bits.fusion", std::nullopt), {DeviceChoice::cuda});
  std::vector<Tensor> first = run_on_gpu(gpu);
  EXPECT_NE(gpu.dump("cuda").find(variant_mark), std::string::npos) << "no " << variant_mark << " kernel:\n" << gpu.dump("segments");
  if (check_values) {
    FusionExecutor cpu(parse_fusion(text, "bits.fusion", std::nullopt), {DeviceChoice::cpu});
    std::vector<Tensor> expected = cpu.run(inputs);
    ASSERT_EQ(first.size(), expected.size());
    for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(testing::tensors_close(first[i], expected[i])) << "output " << i;
  }
  auto expect_same_bits = [&](const std::vector<Tensor>& again, const std::string& which) {
    ASSERT_EQ(again.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i)
      EXPECT_EQ(std::memcmp(again[i].data(), first[i].data(), size_t(first[i].numel()) * dtype_size(first[i].dtype())), 0)
          << "output " << i << " of " << which << " differs from the first run's";
  };
  for (int r = 0; r < 10; ++r) expect_same_bits(run_on_gpu(gpu), "run " + std::to_string(r + 2));
  FusionExecutor fresh(parse_fusion(text, "bits.fusion", std::nullopt), {DeviceChoice::cuda});
  expect_same_bits(run_on_gpu(fresh), "a fresh executor's run");
}

// Grid reductions (few long rows split over blocks, the last block of a row combining every
// partial in a fixed order) give the same bits on every run of the same inputs: ten runs of one
// executor and a run of a fresh one, each compared byte for byte with the first; and the first
// matches the CPU reference. The shapes of issue 27: a gradient norm of 10^8 + 3 bf16 (the bench
// case's shape, an odd length), var_mean, sum and max of [4, 25M] rows near 1000.
TEST(GpuEndToEnd, GridReductionsAreBitIdenticalAcrossRuns) {
  ALLOY_REQUIRE_GPU();
  const std::vector<std::pair<std::string, Bindings>> cases = {
      {R"(fusion gn(x: bf16[N]) {
  x32 = cast(x, dtype=f32)
  sq = mul(x32, x32)
  ss = sum(sq)
  norm = sqrt(ss)
  return ss, norm
})", {{"N", 100000003}}},
      {R"(fusion rows(x: bf16[R, N]) {
  x32 = cast(x, dtype=f32)
  y = add(x32, 1000.0)
  v, mu = var_mean(y, dims=[1], correction=1)
  s = sum(y, dims=[1])
  m = max(x, dims=[1])
  return v, mu, s, m
})", {{"R", 4}, {"N", 25000000}}}};
  for (const auto& [text, sizes] : cases) {
    SCOPED_TRACE(text);
    expect_the_same_bits_every_run(text, sizes, "_g_", true);
  }
  // each step's vectors loaded a step ahead (grid_loads_ahead, off by default)
  testing::TuningFile file("\"grid_loads_ahead\": true");
  testing::ScopedEnv tuning("ALLOY_KERNEL_TUNING", file.path.c_str());
  for (const auto& [text, sizes] : cases) {
    SCOPED_TRACE("loads ahead\n" + text);
    expect_the_same_bits_every_run(text, sizes, "_g_la_", true);
  }
}

using testing::TuningFile;

// Inner-outer kernels (row and column reductions of the same values in one persistent kernel): the
// layer norm and RMSNorm backward, bf16 and f32, from one row to 16k rows (more rows than any grid
// has blocks), widths 768 to 16384 (the layer norm's at [8192, 4096] bf16 and [8192, 1600] f32 with its
// column partials in shared memory, two blocks an SM; 8192 bf16: the block of two vectors a thread that the rows loaded
// ahead fall back to) and odd ones (1000, 4099), one inner_outer segment each,
// matching the CPU reference; each block's next row loaded ahead (the default), and at four
// smaller sizes not (inner_outer_prefetch off in a tuning file), and with the other combine and
// rows ahead (a tree of three levels and one row ahead; the combine over the grid, a cooperative
// launch, and two rows ahead; where a grid has more than two blocks an SM, 768 columns, a tree), in
// row groups, and with the rows ahead copied through shared memory (staged rows, also in row
// groups). (The CPU references of 64k rows made the test minutes long; the
// bit-identity test below runs 64k rows.)
TEST(GpuEndToEnd, InnerOuterNormalizationBackwards_AreOneKernelAndMatchTheCpu) {
  ALLOY_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 768}, {3, 1000}, {1000, 4099}, {8192, 4096}, {8192, 1600}, {16384, 768}, {600, 8192}, {512, 16384}, {300, 12290}};
  // ahead: whether each block's next row is loaded ahead (nullopt: the plan's choice, not checked;
  // row groups share a block's registers, so the plan loads ahead only where they leave room)
  auto expect_one_kernel = [](const std::vector<std::pair<int64_t, int64_t>>& sizes, std::optional<bool> ahead) {
    for (const std::string& T : {"bf16", "f32"})
      for (const std::string& text : {testing::layer_norm_backward(T), testing::rms_norm_backward(T)})
        for (auto [n, d] : sizes) {
          SCOPED_TRACE(T + " N=" + std::to_string(n) + " D=" + std::to_string(d) + (ahead.value_or(true) ? "" : ", no row loaded ahead") + "\n" + text);
          testing::GpuRun ran;
          expect_gpu_matches_cpu(text, {{"N", n}, {"D", d}}, 7, 1.0, &ran);
          EXPECT_NE(ran.segments.find("segment 0 [inner_outer]"), std::string::npos) << ran.segments;
          EXPECT_EQ(ran.segments.find("segment 1"), std::string::npos) << ran.segments;
          // (rows of 16384, and of 8192 f32, are not loaded ahead: a block of 1024 threads has no
          // registers for a second row)
          // (rows of 16384: the column partials in shared memory)
          if (ahead && d == 16384) EXPECT_NE(ran.launched.find("_sp_"), std::string::npos) << ran.launched.substr(0, 200);
          // (the layer norm's at [8192, 4096] bf16 and [8192, 1600] f32: in shared memory, for a
          // second block an SM, combined over the grid)
          if (ahead && n == 8192 && text.find("mean") != std::string::npos && (d == 4096 ? T == "bf16" : d == 1600 && T == "f32"))
            EXPECT_NE(ran.launched.find("_b2_io_pf_l0_sp_"), std::string::npos) << ran.launched.substr(0, 200);
          if (ahead && (d < 8192 || (d == 8192 && T == "bf16")))
            EXPECT_EQ(ran.launched.find("_io_pf") != std::string::npos, *ahead) << ran.launched.substr(0, 200);
        }
  };
  expect_one_kernel(sizes, true);
  const std::vector<std::pair<int64_t, int64_t>> some = {{3, 1000}, {1000, 4099}, {600, 4096}, {2000, 768}};
  for (const char* keys : {"\"inner_outer_prefetch\": false", "\"inner_outer_combine_levels\": 3, \"inner_outer_rows_ahead\": 1",
                           "\"inner_outer_combine_levels\": 0, \"inner_outer_rows_ahead\": 2", "\"inner_outer_row_groups\": 3",
                           "\"inner_outer_row_groups\": 7, \"inner_outer_combine_levels\": 0", "\"inner_outer_staged_rows\": 2",
                           "\"inner_outer_staged_rows\": 3, \"inner_outer_row_groups\": 2"}) {
    SCOPED_TRACE(keys);
    TuningFile file(keys);
    testing::ScopedEnv tuning("ALLOY_KERNEL_TUNING", file.path.c_str());
    const std::string k = keys;
    expect_one_kernel(some, k.find("row_groups") != std::string::npos ? std::nullopt : std::optional<bool>(k.find("false") == std::string::npos));
  }
}

// An inner-outer kernel's column sums give the same bits on every run (the blocks' partials are
// combined in a fixed order whichever blocks arrive last): ten runs of one executor and a fresh
// one's, byte for byte, at the bench case's [8192, 4096] bf16 and at 64k rows of 768 f32, each
// block's rows loaded ahead (the default), with the default combine and with the other one (a tree
// of three levels, or over the grid: inner_outer_combine_levels 0).
TEST(GpuEndToEnd, InnerOuterIsBitIdenticalAcrossRuns) {
  ALLOY_REQUIRE_GPU();
  const std::vector<std::pair<std::string, Bindings>> cases = {{testing::layer_norm_backward("bf16"), {{"N", 8192}, {"D", 4096}}},
                                                               {testing::rms_norm_backward("f32"), {{"N", 65536}, {"D", 768}}}};
  const int other = cuda::builtin_kernel_tuning().at(90).inner_outer_combine_levels == 0 ? 3 : 0;
  for (int levels : {-1, other}) {
    std::optional<TuningFile> file;
    std::optional<testing::ScopedEnv> tuning;
    if (levels >= 0) {
      file.emplace("\"inner_outer_combine_levels\": " + std::to_string(levels));
      tuning.emplace("ALLOY_KERNEL_TUNING", file->path.c_str());
    }
    for (const auto& [text, sizes] : cases) {
      SCOPED_TRACE(text + (levels >= 0 ? " combine levels " + std::to_string(levels) : ""));
      expect_the_same_bits_every_run(text, sizes, levels >= 0 ? "_l" + std::to_string(levels) + "_" : "_io_pf", false);
    }
  }
}

// How many times `what` occurs in `text`.
int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Three AdamW steps of `text` (multi_adam_fusion over `tensors` parameters) on `device` (the GPU's
// copies of `host`, some possibly strided) against the CPU reference run on `host`: each output
// is its input's device memory and close to the reference; one multi_tensor segment writing all
// 3 * tensors outputs in place (its description naming `note`, where given), no Copy, one launch
// of the 148-member kernel.
void expect_multi_adam_steps_in_place(const std::string& text, std::unique_ptr<Fusion> fusion, std::vector<Tensor> host,
                                      const std::vector<Tensor>& device, size_t tensors, const std::string& note) {
  FusionExecutor cpu(parse_fusion(text, "multi_adam.fusion", std::nullopt), {DeviceChoice::cpu});
  ExecutorOptions options{DeviceChoice::cuda};
  options.poison_outputs = true;
  FusionExecutor gpu(std::move(fusion), options);
  const std::vector<Value*>& targets = gpu.fusion().output_aliases();
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> expected = cpu.run(host);  // updates host's p, m and v
    std::vector<Tensor> actual = gpu.run(device);
    gpu.synchronize();
    ASSERT_EQ(actual.size(), 3 * tensors);
    for (size_t o = 0; o < actual.size(); ++o) {
      const Value* target = targets[o];
      size_t input = size_t(std::find(gpu.fusion().inputs().begin(), gpu.fusion().inputs().end(), target) - gpu.fusion().inputs().begin());
      EXPECT_EQ(actual[o].data(), device[input].data()) << "output " << o << " is not its input's memory";
      EXPECT_TRUE(testing::tensors_close(to_cpu(actual[o]), expected[o])) << "output " << gpu.fusion().outputs()[o]->name << ", step " << step;
    }
  }
  std::string segments = gpu.dump("segments"), program = gpu.dump("program"), launched = gpu.dump("cuda");
  EXPECT_EQ(count(segments, "[multi_tensor]"), 1) << segments.substr(0, 2000);
  if (!note.empty()) EXPECT_EQ(count(segments, note), 1) << segments.substr(0, 2000);
  EXPECT_EQ(count(segments, "written in place by segment 0"), int(3 * tensors));
  EXPECT_EQ(program.find("Copy"), std::string::npos) << program.substr(0, 2000);
  EXPECT_EQ(count(launched, ", variant mt148_"), 1) << launched.substr(0, 2000);
}

// examples/adam_step.fusion's inputs on the host: N random elements of p, g, m and v (v made
// non-negative, a second moment) and the scalars.
std::vector<Tensor> adam_step_inputs(const Fusion& fusion, int64_t n, uint64_t seed) {
  std::vector<Tensor> host = complete_inputs(fusion, std::vector<Tensor>(fusion.inputs().size()), {{"N", n}}, seed);
  Tensor& v = host[3];
  for (int64_t i = 0; i < v.numel(); ++i) store_double(v.data(), DType::f32, i, std::fabs(load_as_double(v.data(), DType::f32, i)));
  return host;
}

// The AdamW step on tensors already on the GPU (issue 27): one kernel reads p, g, m and v once and
// writes p, m and v in place (`--dump segments` says so; each output is its input's device
// memory), and the results equal the CPU reference run on copies, three steps in a row.
TEST(GpuEndToEnd, AdamStepOnDeviceTensors_WritesThemInPlace) {
  ALLOY_REQUIRE_GPU();
  const std::string text = testing::read_file(testing::source_path("examples/adam_step.fusion"));
  auto fusion = parse_fusion(text, "adam_step.fusion", std::nullopt);
  std::vector<Tensor> host = adam_step_inputs(*fusion, 1000003, 7);
  const host_ir::DeviceRuntime& cuda = backend::device_runtime(DeviceKind::cuda);
  std::vector<Tensor> device = host;
  for (size_t i = 0; i < 4; ++i) device[i] = cuda.to_device(host[i], 0);
  FusionExecutor cpu(parse_fusion(text, "adam_step.fusion", std::nullopt), {DeviceChoice::cpu});
  ExecutorOptions options{DeviceChoice::cuda};
  options.poison_outputs = true;
  FusionExecutor gpu(std::move(fusion), options);
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> expected = cpu.run(host);  // updates host's p, m and v
    std::vector<Tensor> actual = gpu.run(device);
    gpu.synchronize();
    // the outputs p2 -> p, m2 -> m, v2 -> v are the inputs 0, 2 and 3 (g is input 1)
    const size_t target[3] = {0, 2, 3};
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(actual[i].data(), device[target[i]].data()) << "output " << i << " is not its input's memory";
      EXPECT_TRUE(testing::tensors_close(to_cpu(actual[i]), expected[i])) << "output " << i << ", step " << step;
    }
  }
  std::string segments = gpu.dump("segments"), program = gpu.dump("program");
  EXPECT_EQ(count(segments, "written in place by segment 0"), 3) << segments;
  EXPECT_EQ(program.find("Copy"), std::string::npos) << program;
}

// Each member's second moment v (input 4 i + 3 of a multi_adam_fusion) made non-negative, as it is.
void second_moments_non_negative(std::vector<Tensor>& host, size_t members) {
  for (size_t i = 3; i < 4 * members; i += 4)
    for (int64_t k = 0; k < host[i].numel(); ++k)
      store_double(host[i].data(), DType::f32, k, std::fabs(load_as_double(host[i].data(), DType::f32, k)));
}

// Issue 27, many tensors in one launch: the AdamW step over every parameter of a GPT-2-like model
// (GPT-2 small's list at a quarter of its width and an eighth of its vocabulary, 6.6M elements, so
// the CPU reference takes a second)
// is one multi-tensor launch (segment/schedulers/multi_tensor.h) writing every p, m and v in place,
// equal to the CPU reference three steps in a row; parameter 5's p and m start 4 bytes off a
// vector boundary (read element by element in the same launch) and parameter 7's gradient is a
// strided view (its chain runs as its own pointwise kernel).
TEST(GpuEndToEnd, MultiTensorAdamStepOverGpt2LikeParameters_IsOneLaunchInPlace) {
  ALLOY_REQUIRE_GPU();
  const std::vector<std::vector<int64_t>> shapes = testing::gpt2_shapes(192, 6283, 256);
  const std::string text = testing::multi_adam_fusion(shapes);
  auto fusion = parse_fusion(text, "multi_adam.fusion", std::nullopt);
  std::vector<Tensor> host = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), {}, 7);
  const host_ir::DeviceRuntime& cuda = backend::device_runtime(DeviceKind::cuda);
  second_moments_non_negative(host, shapes.size());
  std::vector<Tensor> device = host;
  for (size_t i = 0; i < 4 * shapes.size(); ++i) {
    Tensor& t = host[i];
    const int64_t n = t.numel();
    if (i == 4 * 5 || i == 4 * 5 + 2) {  // parameter 5's p and m: one element in
      Tensor padded = Tensor::empty(DType::f32, {n + 1});
      std::memcpy(static_cast<float*>(padded.data()) + 1, t.data(), size_t(n) * 4);
      device[i] = cuda.to_device(padded, 0).as_strided(t.sizes(), t.strides(), 1);
    } else if (i == 4 * 7 + 1) {  // parameter 7's gradient: every other element
      Tensor spread = Tensor::empty(DType::f32, {2 * n});
      for (int64_t k = 0; k < n; ++k) store_double(spread.data(), DType::f32, 2 * k, load_as_double(t.data(), DType::f32, k));
      device[i] = cuda.to_device(spread, 0).as_strided(t.sizes(), {2}, 0);
    } else {
      device[i] = cuda.to_device(t, 0);
    }
  }
  expect_multi_adam_steps_in_place(text, std::move(fusion), host, device, shapes.size(), {});
}

// The same step with PyTorch's usual two parameter groups (issue 27): the matrices decay with their
// own lr_d and wd_d, the biases and norm weights read lr_n and wd_n = 0. Still one launch (each
// member's table entry holds its own lr and wd), every p, m and v written in place, equal to the
// CPU reference three steps in a row.
TEST(GpuEndToEnd, MultiTensorAdamStepOverTwoParameterGroups_IsOneLaunchInPlace) {
  ALLOY_REQUIRE_GPU();
  const std::vector<std::vector<int64_t>> shapes = testing::gpt2_shapes(192, 6283, 256);
  const std::string text = testing::multi_adam_fusion(shapes, "f32", true);
  auto fusion = parse_fusion(text, "multi_adam.fusion", std::nullopt);
  std::vector<Tensor> host = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), {}, 7);
  const double scalars[] = {0.01, 0.1, 0.03, 0.0, 0.9, 0.99};  // lr_d, wd_d, lr_n, wd_n, bc1, bc2
  for (size_t k = 0; k < 6; ++k) store_double(host[4 * shapes.size() + k].data(), DType::f32, 0, scalars[k]);
  const host_ir::DeviceRuntime& cuda = backend::device_runtime(DeviceKind::cuda);
  second_moments_non_negative(host, shapes.size());
  std::vector<Tensor> device = host;
  for (size_t i = 0; i < 4 * shapes.size(); ++i) device[i] = cuda.to_device(host[i], 0);
  expect_multi_adam_steps_in_place(text, std::move(fusion), host, device, shapes.size(), "scalars per member: lr_d|lr_n, wd_d|wd_n");
}

// Scalar inputs given as device tensors (a learning rate kept on the GPU, as PyTorch's fused
// optimizers keep it) are read on the host: the same results as host scalars, no crash.
TEST(GpuEndToEnd, ScalarInputsOnTheDevice_AreReadOnTheHost) {
  ALLOY_REQUIRE_GPU();
  const std::string text = testing::read_file(testing::source_path("examples/adam_step.fusion"));
  auto fusion = parse_fusion(text, "adam_step.fusion", std::nullopt);
  std::vector<Tensor> host = adam_step_inputs(*fusion, 4099, 3);
  const host_ir::DeviceRuntime& cuda = backend::device_runtime(DeviceKind::cuda);
  std::vector<Tensor> device;
  for (const Tensor& t : host) device.push_back(cuda.to_device(t, 0));  // the four scalars too
  FusionExecutor cpu(parse_fusion(text, "adam_step.fusion", std::nullopt), {DeviceChoice::cpu});
  FusionExecutor gpu(std::move(fusion), {DeviceChoice::cuda});
  std::vector<Tensor> expected = cpu.run(host);
  std::vector<Tensor> actual = gpu.run(device);
  gpu.synchronize();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(testing::tensors_close(to_cpu(actual[i]), expected[i])) << "output " << i;
}

// Steps that go through a copy on the GPU: the old parameters returned beside the new ones, the
// momentum also read by a reduction.
TEST(GpuEndToEnd, AnInPlaceStepThroughACopy_MatchesTheCpu) {
  ALLOY_REQUIRE_GPU();
  testing::GpuRun ran;
  expect_gpu_matches_cpu(R"(fusion step(p: f32[N], g: f32[N], buf: f32[N]) {
  kept = mul(buf, 0.9)
  buf2 = add(kept, g)
  s = mul(buf2, 0.1)
  p2 = sub(p, s)
  sq = mul(buf, buf)
  norm = sum(sq, dims=[0])
  return p2 -> p, p, buf2 -> buf, norm
})", {{"N", 100003}}, 7, 1.0, &ran);
  EXPECT_NE(ran.segments.find("p2 -> p: through a copy after the run: 'p' is also returned"), std::string::npos) << ran.segments;
  EXPECT_NE(ran.segments.find("buf2 -> buf: through a copy after the run: 'buf2' is computed by segment 0 [normalization]"),
            std::string::npos) << ran.segments;
}

// Every matmul segment the plan holds (`--dump segments`: "segment N [matmul]") launched on
// cuBLASLt: its run record in `--dump cuda` (backend/cuda/matmul_segment.cpp's source(),
// "// segment N [matmul]: cuBLASLt, epilogue NAME" or "...: cuBLASLt refused epilogue ...").
// Returns how many matmul segments there are.
int expect_every_matmul_launched(const testing::GpuRun& ran) {
  int matmuls = count(ran.segments, " [matmul]"), launched = count(ran.launched, " [matmul]: cuBLASLt");
  EXPECT_EQ(launched, matmuls) << ran.segments << ran.launched;
  return matmuls;
}

// The matmuls of every shape (a batch folded into M, a linear with its bias, a vector, a batch
// broadcast on both sides) each ran as one matmul segment on cuBLASLt, without a refusal, and
// nothing went to the CPU fallback.
TEST(GpuEndToEnd, MatmulAndLinearShapes) {
  ALLOY_REQUIRE_GPU();
  testing::GpuRun three, broadcast;
  expect_gpu_matches_cpu(R"(fusion f(a: bf16[3, 40, 64], b: bf16[64, 24], w: bf16[24, 64], bias: bf16[24], v: bf16[64]) {
  m = matmul(a, b)
  l = linear(a, w, bias)
  mv = matmul(a, v)
  return m, l, mv
})", {}, 7, 1.0, &three);
  EXPECT_EQ(expect_every_matmul_launched(three), 3) << three.segments;
  EXPECT_EQ(count(three.launched, " [matmul]: cuBLASLt, epilogue none\n"), 2) << three.launched;  // m, mv
  EXPECT_EQ(count(three.launched, " [matmul]: cuBLASLt, epilogue bias\n"), 1) << three.launched;  // l's bias in the GEMM
  EXPECT_EQ(three.segments.find("[cpu_fallback]"), std::string::npos) << three.segments;
  expect_gpu_matches_cpu(R"(fusion g(a: f32[2, 1, 16, 32], b: f32[5, 32, 8]) {
  m = matmul(a, b)
  return m
})", {}, 7, 1.0, &broadcast);
  EXPECT_EQ(expect_every_matmul_launched(broadcast), 1) << broadcast.segments;
  EXPECT_EQ(count(broadcast.launched, " [matmul]: cuBLASLt, epilogue none\n"), 1) << broadcast.launched;
  EXPECT_EQ(broadcast.segments.find("[cpu_fallback]"), std::string::npos) << broadcast.segments;
}

// Cross-entropy (the target logit gathered once a row, iota + eq for the one-hot rows) is one
// generated kernel, nothing on the CPU fallback, and matches the CPU reference: a vocabulary past
// one row-kernel block, GPT-2's (50257: edge elements), and the smallest the random targets allow.
TEST(GpuEndToEnd, CrossEntropyIsOneKernelAndMatchesTheCpu) {
  ALLOY_REQUIRE_GPU();
  std::string text = testing::read_file(testing::source_path("examples/cross_entropy.fusion"));
  for (Bindings sizes : {Bindings{{"T", 64}, {"V", 1000}}, Bindings{{"T", 37}, {"V", 50257}}, Bindings{{"T", 3}, {"V", 10}}}) {
    testing::GpuRun ran;
    expect_gpu_matches_cpu(text, sizes, 7, 1.0, &ran);
    EXPECT_EQ(ran.segments.find("[cpu_fallback]"), std::string::npos) << ran.segments;
    EXPECT_NE(ran.segments.find("segments (cuda): 1\n"), std::string::npos) << "one segment\n" << ran.segments;
    EXPECT_NE(ran.segments.find("[normalization]"), std::string::npos) << ran.segments;
  }
}

// Softmax over rows of vocabulary widths, each way a row kernel takes them: held in registers
// (32000 bf16), held in shared memory or streamed and read again (50257, 65536, 100000 bf16;
// 40000, 50257 f32 by KernelTuning::row_shared_bytes), streamed (f32 128256).
TEST(GpuEndToEnd, SoftmaxOverVocabularyWideRows_MatchesTheCpu) {
  ALLOY_REQUIRE_GPU();
  for (const char* dtype : {"bf16", "f32"})
    for (int64_t width : {32000, 40000, 50257, 65536, 100000, 128256}) {
      SCOPED_TRACE(std::string(dtype) + " " + std::to_string(width));
      const std::string text = std::string("fusion f(x: ") + dtype + "[R, V]) {\n  y = softmax(x, dim=1)\n  return y\n}\n";
      expect_gpu_matches_cpu(text, {{"R", 5}, {"V", width}}, 7, 1.0);
    }
}

// A target past the vocabulary: the kernel reads nothing there, and the run ends in the CPU
// reference's user error (the flag read back at the run's end), naming the gather's input, the
// value, its position and the range; the next run of the same executor, with good targets, is clean.
TEST(GpuEndToEnd, CrossEntropyTargetOutOfRange_IsAUserError) {
  ALLOY_REQUIRE_GPU();
  std::string text = testing::read_file(testing::source_path("examples/cross_entropy.fusion"));
  auto fusion = parse_fusion(text, "test.fusion", std::nullopt);
  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(2), {{"T", 16}, {"V", 50257}}, 7);
  std::vector<Tensor> bad = inputs;
  bad[1] = cpu_copy(inputs[1]);
  store_int(bad[1].data(), DType::i64, 5, 50300);
  auto error_of = [](FusionExecutor& executor, const std::vector<Tensor>& in) -> std::string {
    try {
      executor.run(in);
      executor.synchronize();
    } catch (const UserError& e) {
      return e.what();
    }
    return "no error";
  };
  FusionExecutor cpu(parse_fusion(text, "test.fusion", std::nullopt), {DeviceChoice::cpu});
  FusionExecutor gpu(parse_fusion(text, "test.fusion", std::nullopt), {DeviceChoice::cuda});
  std::string expected = error_of(cpu, bad);
  EXPECT_NE(expected.find("test.fusion:12:8: gather: index value 50300 at index position [5, 0] is out of range for axis 1 of the "
                          "input 'x' [16, 50257]; expected 0 to 50256"),
            std::string::npos)
      << expected;
  EXPECT_EQ(error_of(gpu, bad), expected);
  EXPECT_EQ(error_of(gpu, inputs), "no error") << "the flag is cleared for the next run";
  std::vector<Tensor> expected_out = cpu.run(inputs), actual = gpu.run(inputs);
  gpu.synchronize();
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_TRUE(testing::tensors_close(actual[i], expected_out[i])) << "output " << i;
}

// Every example but the sharded ones (alloy_mpi_tests runs those on the GPU), twice: every size
// 3, and each size symbol a different odd size (3, 5, 7, ...), so an axis mixed up with another
// of the same size cannot hide.
TEST(GpuEndToEnd, EveryExampleMatchesTheCpu) {
  ALLOY_REQUIRE_GPU();
  int ran = 0, sharded = 0, files = 0, matmuls = 0;
  for (auto& entry : std::filesystem::directory_iterator(testing::source_path("examples"))) {
    if (entry.path().extension() != ".fusion") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    auto text = testing::read_file(entry.path().string());
    auto fusion = parse_fusion(text, entry.path().string(), std::nullopt);
    if (auto mesh = fusion_mesh(*fusion); mesh && mesh->size() > 1) {
      ++sharded;
      continue;
    }
    // random integer inputs are 0..9 (run_inputs.h): a fusion that gathers with them needs axes of 10
    bool gathers = std::any_of(fusion->ops().begin(), fusion->ops().end(), [](auto& op) { return op->kind == OpKind::gather; });
    Bindings equal, distinct;
    int64_t next = gathers ? 11 : 3;
    for (auto& sym : fusion->input_symbols()) {
      equal[sym] = gathers ? 10 : 3;
      distinct[sym] = next;
      next += 2;
    }
    // every matmul segment of the plan launched on cuBLASLt (its call, or a refusal and the
    // fallback it names), none on the CPU fallback
    for (const Bindings* sizes : {&equal, &distinct}) {
      testing::GpuRun path;
      expect_gpu_matches_cpu(text, *sizes, 7, 1.0, &path);
      matmuls += expect_every_matmul_launched(path);
      // nothing on the CPU fallback (gather and iota included: generated kernels)
      EXPECT_EQ(path.segments.find("[cpu_fallback]"), std::string::npos) << path.segments;
    }
    ++ran;
  }
  EXPECT_EQ(ran + sharded, files);
  EXPECT_GE(ran, 7);  // mlp, mlp_backward, layer_norm, softmax, rms_norm, masked_mean, rope
  EXPECT_GE(matmuls, 2 * 6);  // mlp's 2 GEMMs and mlp_backward's 4, at least, in each of the two runs
}

}  // namespace
}  // namespace alloy
