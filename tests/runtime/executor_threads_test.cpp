// What a library embedding the executor needs: several threads running one executor (the first
// runs racing to build the plan), an explicit device index, and runs on a caller's CUDA stream.
// The CPU tests run everywhere; the CUDA ones skip without a GPU.
#include <gtest/gtest.h>

#include <thread>

#include "alloy/backend/backend.h"
#if ALLOY_HAVE_CUDA
#include "alloy/backend/cuda/cuda_api.h"
#endif
#include "alloy/ir/parser.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

using testing::tensors_close;

constexpr const char* kLayerNorm = R"(
fusion ln(x: f32[N, 64], w: f32[64], b: f32[64]) {
  m = mean(x, dims=[1], keepdim=true)
  c = sub(x, m)
  c2 = mul(c, c)
  v = mean(c2, dims=[1], keepdim=true)
  ve = add(v, 1e-5)
  r = rsqrt(ve)
  n = mul(c, r)
  nw = mul(n, w)
  y = add(nw, b)
  return y
}
)";

std::vector<Tensor> inputs_for(int64_t rows, uint64_t seed) {
  return {random_tensor(DType::f32, {rows, 64}, seed), random_tensor(DType::f32, {64}, seed + 1),
          random_tensor(DType::f32, {64}, seed + 2)};
}

// Each thread runs its own inputs (sizes differ between threads) many times on one executor and
// checks every result against a run of a separate executor on one thread.
void run_from_threads(FusionExecutor& shared, DeviceChoice reference_device) {
  constexpr int kThreads = 2, kRuns = 40;
  std::vector<std::vector<Tensor>> inputs, expected;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(inputs_for(3 + 5 * t, 11 * uint64_t(t)));
    FusionExecutor alone(parse_fusion(kLayerNorm, "ln.fusion"), {reference_device});
    expected.push_back({to_cpu(alone.run(inputs.back())[0])});
  }
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int r = 0; r < kRuns; ++r) {
          Tensor y = to_cpu(shared.run(inputs[size_t(t)])[0]);
          if (auto ok = tensors_close(y, expected[size_t(t)][0]); !ok) {
            failures[size_t(t)] = "run " + std::to_string(r) + ": " + ok.message();
            return;
          }
        }
      } catch (const std::exception& e) {
        failures[size_t(t)] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[size_t(t)], "") << "thread " << t;
  EXPECT_EQ(shared.plans_built(), 1);
}

TEST(ExecutorThreads, TwoThreadsRunOneCpuExecutor_EachGetsItsOwnResults) {
  FusionExecutor shared(parse_fusion(kLayerNorm, "ln.fusion"), {DeviceChoice::cpu});
  EXPECT_EQ(shared.plans_built(), 0);
  run_from_threads(shared, DeviceChoice::cpu);
}

TEST(ExecutorThreads, PlanIsBuiltOnceForManySignatures) {
  FusionExecutor executor(parse_fusion(kLayerNorm, "ln.fusion"), {DeviceChoice::cpu});
  for (int64_t rows : {1, 2, 7, 2}) executor.run(inputs_for(rows, uint64_t(rows)));
  EXPECT_EQ(executor.plans_built(), 1);
}

TEST(ExecutorThreads, RunOptionsOnTheCpu_AreIgnored) {
  FusionExecutor executor(parse_fusion(kLayerNorm, "ln.fusion"), {DeviceChoice::cpu});
  std::vector<Tensor> in = inputs_for(4, 3);
  RunOptions on_stream;
  on_stream.stream = 0;
  EXPECT_TRUE(tensors_close(executor.run(in, on_stream)[0], executor.run(in)[0]));
}

TEST(ExecutorThreads, DeviceIndexOnTheCpu_IsIgnored) {
  ExecutorOptions options;
  options.device = DeviceChoice::cpu;
  options.device_index = 3;
  FusionExecutor executor(parse_fusion(kLayerNorm, "ln.fusion"), options);
  EXPECT_EQ(executor.device(), (Device{DeviceKind::cpu, 0}));
}

TEST(ExecutorThreads, TwoThreadsRunOneCudaExecutor_EachGetsItsOwnResults) {
  ALLOY_REQUIRE_GPU();
  FusionExecutor shared(parse_fusion(kLayerNorm, "ln.fusion"), {DeviceChoice::cuda});
  run_from_threads(shared, DeviceChoice::cpu);
}

TEST(ExecutorThreads, DeviceIndexOutOfRange_IsAUserErrorNamingTheDevice) {
  ALLOY_REQUIRE_GPU();
  ExecutorOptions options;
  options.device = DeviceChoice::cuda;
  options.device_index = backend::device_runtime(DeviceKind::cuda).device_count();
  try {
    FusionExecutor executor(parse_fusion(kLayerNorm, "ln.fusion"), options);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(backend::device_runtime(DeviceKind::cuda).device_count())), std::string::npos) << e.what();
  }
}

TEST(ExecutorThreads, LastDeviceIndex_RunsThere) {
  ALLOY_REQUIRE_GPU();
  ExecutorOptions options;
  options.device = DeviceChoice::cuda;
  options.device_index = backend::device_runtime(DeviceKind::cuda).device_count() - 1;
  FusionExecutor executor(parse_fusion(kLayerNorm, "ln.fusion"), options);
  std::vector<Tensor> in = inputs_for(5, 1);
  std::vector<Tensor> out = executor.run(in);
  EXPECT_EQ(out[0].device(), (Device{DeviceKind::cuda, options.device_index}));
  FusionExecutor cpu(parse_fusion(kLayerNorm, "ln.fusion"), {DeviceChoice::cpu});
  EXPECT_TRUE(tensors_close(out[0], cpu.run(in)[0]));
}

#if ALLOY_HAVE_CUDA  // the CUDA backend's own streams
TEST(ExecutorThreads, RunOnACallersStream_EnqueuesThereWithoutWaiting) {
  ALLOY_REQUIRE_GPU();
  FusionExecutor executor(parse_fusion(kLayerNorm, "ln.fusion"), {DeviceChoice::cuda});
  cuda::Stream mine = cuda::Stream::create(0);
  std::vector<Tensor> in = inputs_for(6, 2);
  std::vector<Tensor> on_device;
  for (const Tensor& t : in) on_device.push_back(cuda::to_device(t, mine));
  RunOptions options;
  options.stream = reinterpret_cast<uintptr_t>(mine.handle());
  for (int r = 0; r < 3; ++r) {
    std::vector<Tensor> out = executor.run(on_device, options);
    Tensor host = cuda::to_host(out[0], mine);  // ordered after the run on the same stream
    FusionExecutor cpu(parse_fusion(kLayerNorm, "ln.fusion"), {DeviceChoice::cpu});
    EXPECT_TRUE(tensors_close(host, cpu.run(in)[0]));
  }
  // the legacy default stream (torch's default stream) is a stream like any other
  options.stream = 0;
  std::vector<Tensor> out = executor.run(on_device, options);
  mine.synchronize();
  EXPECT_TRUE(tensors_close(cuda::to_host(out[0], cuda::Stream::wrap(0, nullptr)), executor.run(on_device)[0]));
  // a wrapped stream is the same Stream run after run (its scratch buffers and side streams are kept)
  EXPECT_EQ(cuda::Stream::wrap(0, mine.handle()).id(), cuda::Stream::wrap(0, mine.handle()).id());
  EXPECT_FALSE(cuda::Stream::wrap(0, mine.handle()).is_per_thread_default());
}
#endif

}  // namespace
}  // namespace alloy
