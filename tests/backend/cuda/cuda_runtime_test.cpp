// Device discovery, streams, events and device memory. Availability and the "CUDA unavailable"
// errors are checked everywhere (CI has no GPU); the rest skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/common/error.h"
#include "test_util.h"

namespace alloy::cuda {
namespace {

Tensor random_cpu(DType dtype, std::vector<int64_t> sizes, uint32_t seed) {
  Tensor t = Tensor::empty(dtype, std::move(sizes));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-4.0, 4.0);
  for (int64_t i = 0; i < t.numel(); ++i) store_double(t.data(), dtype, i, is_floating(dtype) ? dist(rng) : std::round(dist(rng) * 100));
  return t;
}

TEST(CudaRuntime, CudaAvailable_NeverThrowsAndIsStable) {
  bool first = false;
  EXPECT_NO_THROW(first = cuda_available());
  EXPECT_EQ(cuda_available(), first);
  if (first) {
    EXPECT_GT(device_count(), 0);
    EXPECT_EQ(cuda_unavailable_reason(), "");
  } else {
    EXPECT_EQ(device_count(), 0);
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  }
}

TEST(CudaRuntime, WithoutAGpu_DeviceWorkIsAUserErrorSayingCudaUnavailable) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  try {
    Stream::current(0);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA unavailable"), std::string::npos) << e.what();
  }
  EXPECT_THROW(device_props(0), UserError);
}

TEST(CudaRuntime, DeviceProps_DescribeARealGpu) {
  ALLOY_REQUIRE_GPU();
  const DeviceProps& p = device_props(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.sm_major, 7);
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.l2_bytes, 0);
  EXPECT_GE(p.shared_per_block_optin, 48 * 1024);
  EXPECT_EQ(p.warp_size, 32);
  EXPECT_EQ(&device_props(0), &p);  // cached
  EXPECT_THROW(device_props(device_count()), UserError);
}

TEST(CudaRuntime, ToDeviceThenToHost_IsExactForEveryDtype) {
  ALLOY_REQUIRE_GPU();
  Stream stream = Stream::current(0);
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32, DType::boolean}) {
    Tensor cpu = random_cpu(t, {3, 17, 5}, 11);
    Tensor dev = to_device(cpu, stream);
    EXPECT_EQ(dev.device(), (Device{DeviceKind::cuda, 0}));
    EXPECT_TRUE(dev.is_contiguous());
    Tensor back = to_host(dev, stream);
    EXPECT_EQ(back.device().kind, DeviceKind::cpu);
    EXPECT_EQ(std::memcmp(back.data(), cpu.data(), cpu.numel() * dtype_size(t)), 0) << dtype_name(t);
  }
}

TEST(CudaRuntime, ToDevice_MakesANonContiguousCpuTensorContiguous) {
  ALLOY_REQUIRE_GPU();
  Stream stream = Stream::current(0);
  Tensor cpu = random_cpu(DType::f32, {4, 6, 5}, 3);
  Tensor permuted = cpu.permute({2, 0, 1});  // [5, 4, 6]
  Tensor back = to_host(to_device(permuted, stream), stream);
  ASSERT_EQ(back.sizes(), (std::vector<int64_t>{5, 4, 6}));
  for (int64_t a = 0; a < 5; ++a)
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t c = 0; c < 6; ++c)
        EXPECT_EQ(back.data_as<float>()[(a * 4 + b) * 6 + c], cpu.data_as<float>()[(b * 6 + c) * 5 + a]);
}

TEST(CudaRuntime, ToHost_GathersAStridedDeviceView) {
  ALLOY_REQUIRE_GPU();
  Stream stream = Stream::current(0);
  Tensor cpu = random_cpu(DType::bf16, {8, 10}, 5);
  Tensor dev = to_device(cpu, stream);
  // rows 1, 3, 5 and columns 2..8 step 3, transposed: sizes [3 cols, 3 rows]
  Tensor view = dev.as_strided({3, 3}, {3, 20}, 1 * 10 + 2);
  Tensor back = to_host(view, stream);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(back.data_as<uint16_t>()[i * 3 + j], cpu.data_as<uint16_t>()[(1 + 2 * j) * 10 + 2 + 3 * i]);
}

TEST(CudaRuntime, FillPoison_MakesEveryFloatNaN) {
  ALLOY_REQUIRE_GPU();
  Stream stream = Stream::current(0);
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Tensor dev = cuda_empty(t, {33, 7}, stream);
    fill_poison(dev, stream);
    Tensor host = to_host(dev, stream);
    for (int64_t i = 0; i < host.numel(); ++i) ASSERT_TRUE(std::isnan(load_as_double(host.data(), t, i))) << dtype_name(t);
  }
}

TEST(CudaRuntime, CopyD2D_CopiesBetweenDeviceTensors) {
  ALLOY_REQUIRE_GPU();
  Stream stream = Stream::create(0);
  Tensor cpu = random_cpu(DType::f32, {1000}, 9);
  Tensor src = to_device(cpu, stream);
  Tensor dst = cuda_empty(DType::f32, {10, 100}, stream);
  fill_poison(dst, stream);
  copy_d2d(dst, src, stream);
  EXPECT_TRUE(testing::tensors_close(to_host(dst, stream).view({1000}), cpu));
}

TEST(CudaRuntime, CudaEmpty_OfZeroElements_IsUsable) {
  ALLOY_REQUIRE_GPU();
  Stream stream = Stream::current(0);
  Tensor empty = cuda_empty(DType::f32, {0, 4}, stream);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(to_host(empty, stream).numel(), 0);
  EXPECT_EQ(to_device(Tensor::empty(DType::f32, {0}), stream).numel(), 0);
}

TEST(CudaRuntime, TensorsOutliveTheStreamObjectTheyWereAllocatedOn) {
  ALLOY_REQUIRE_GPU();
  Tensor cpu = random_cpu(DType::f32, {256}, 1);
  Tensor dev;
  {
    Stream temporary = Stream::create(0);
    dev = to_device(cpu, temporary);
    temporary.synchronize();
  }
  Stream stream = Stream::current(0);
  EXPECT_TRUE(testing::tensors_close(to_host(dev, stream), cpu));
  dev = Tensor();  // frees on the (still alive) temporary stream
  stream.synchronize();
}

TEST(CudaRuntime, StreamGuard_SetsAndRestoresTheCurrentStream) {
  ALLOY_REQUIRE_GPU();
  Stream original = Stream::current(0);
  EXPECT_TRUE(original.is_per_thread_default());
  Stream mine = Stream::create(0);
  EXPECT_FALSE(mine.is_per_thread_default());
  EXPECT_NE(mine.id(), original.id());
  {
    StreamGuard guard(mine);
    EXPECT_EQ(Stream::current(0), mine);
  }
  EXPECT_EQ(Stream::current(0), original);
}

TEST(CudaRuntime, Scratch_IsKeptAndGrown) {
  ALLOY_REQUIRE_GPU();
  Stream stream = Stream::create(0);
  void* small = stream.scratch(1000);
  EXPECT_NE(small, nullptr);
  EXPECT_EQ(stream.scratch(500), small);
  void* big = stream.scratch(size_t(64) << 20);
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(stream.scratch(1000), big);
  stream.synchronize();
}

TEST(CudaRuntime, Events_OrderStreamsAndTime) {
  ALLOY_REQUIRE_GPU();
  Stream producer = Stream::create(0), consumer = Stream::create(0);
  Tensor cpu = random_cpu(DType::f32, {1 << 20}, 2);
  Event start(0, true), done(0, true);
  start.record(producer);
  Tensor dev = to_device(cpu, producer);
  done.record(producer);
  consumer.wait(done);
  Tensor copy = cuda_empty(DType::f32, {1 << 20}, consumer);
  copy_d2d(copy, dev, consumer);
  EXPECT_TRUE(testing::tensors_close(to_host(copy, consumer), cpu));
  done.synchronize();
  EXPECT_TRUE(done.query());
  // 4 MiB to the device takes microseconds at least, and not seconds
  float ms = start.elapsed_ms(done);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 5000.0f);
}

}  // namespace
}  // namespace alloy::cuda
