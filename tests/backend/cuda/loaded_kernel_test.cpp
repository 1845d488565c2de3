// Kernels compiled by NVRTC, loaded through the driver entry points and launched; results are
// checked against the same arithmetic on the host. Skips without a GPU.
#include <gtest/gtest.h>

#include "test_util.h"

#if !ALLOY_HAVE_CUDA
TEST(LoadedKernel, NeedsTheCudaToolkit) { ALLOY_SKIP_WITHOUT_CUDA_TOOLKIT(); }
#else

#include <cmath>

#include "alloy/backend/cuda/loaded_kernel.h"
#include "alloy/common/error.h"

namespace alloy::cuda {
namespace {

// y = a * bf16(x) + y, with the bf16 widening done on raw bits (no cuda_bf16.h).
constexpr const char* kAxpySource = R"(
extern "C" __global__ void axpy_bf16(const unsigned short* x, float* y, float a, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * __uint_as_float(((unsigned int)x[i]) << 16) + y[i];
}
)";

std::shared_ptr<const CompiledModule> compile_for_device0(const std::string& source, const std::string& name) {
  const DeviceProps& p = device_props(0);
  return compile_cuda(source, name, p.sm_major, p.sm_minor);
}

TEST(LoadedKernel, LaunchComputesWhatTheHostComputes) {
  ALLOY_REQUIRE_GPU();
  const int64_t n = 10007;
  Tensor x = Tensor::empty(DType::bf16, {n}), y = Tensor::empty(DType::f32, {n}), expected = Tensor::empty(DType::f32, {n});
  for (int64_t i = 0; i < n; ++i) {
    store_double(x.data(), DType::bf16, i, std::sin(double(i)) * 3);
    y.data_as<float>()[i] = float(i % 13) - 6.0f;
    expected.data_as<float>()[i] = 2.5f * bf16_bits_to_float(x.data_as<uint16_t>()[i]) + y.data_as<float>()[i];
  }
  Stream stream = Stream::create(0);
  Tensor dx = to_device(x, stream), dy = to_device(y, stream);
  const LoadedKernel& kernel = LoadedKernel::get(*compile_for_device0(kAxpySource, "axpy_bf16"), 0);
  const void* xp = dx.data();
  void* yp = dy.data();
  float a = 2.5f;
  long long count = n;
  void* args[] = {&xp, &yp, &a, &count};
  kernel.launch(Dim3{unsigned((n + 255) / 256)}, Dim3{256}, 0, stream, args);
  EXPECT_TRUE(testing::tensors_close(to_host(dy, stream), expected));
}

TEST(LoadedKernel, SameModule_LoadsOnce) {
  ALLOY_REQUIRE_GPU();
  auto module = compile_for_device0(kAxpySource, "axpy_bf16");
  EXPECT_EQ(&LoadedKernel::get(*module, 0), &LoadedKernel::get(*module, 0));
  EXPECT_GT(LoadedKernel::get(*module, 0).num_registers(), 0);
  EXPECT_GE(LoadedKernel::get(*module, 0).max_threads_per_block(), 256);
}

TEST(LoadedKernel, LargeDynamicSharedMemory_IsOptedInto) {
  ALLOY_REQUIRE_GPU();
  const DeviceProps& p = device_props(0);
  size_t shared = size_t(p.shared_per_block_optin);  // above the default 48 KiB on sm_70+
  ASSERT_GT(shared, size_t(48 * 1024));
  std::string source = R"(
extern "C" __global__ void reverse_through_shared(const float* in, float* out, int n) {
  extern __shared__ float buffer[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buffer[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buffer[n - 1 - i];
}
)";
  int n = int(shared / sizeof(float));
  Tensor in = Tensor::empty(DType::f32, {n}), expected = Tensor::empty(DType::f32, {n});
  for (int i = 0; i < n; ++i) in.data_as<float>()[i] = float(i) * 0.5f;
  for (int i = 0; i < n; ++i) expected.data_as<float>()[i] = float(n - 1 - i) * 0.5f;
  Stream stream = Stream::current(0);
  Tensor din = to_device(in, stream), dout = cuda_empty(DType::f32, {n}, stream);
  fill_poison(dout, stream);
  const LoadedKernel& kernel = LoadedKernel::get(*compile_for_device0(source, "reverse_through_shared"), 0);
  const void* ip = din.data();
  void* op = dout.data();
  void* args[] = {&ip, &op, &n};
  kernel.launch(Dim3{1}, Dim3{512}, shared, stream, args);
  EXPECT_TRUE(testing::tensors_close(to_host(dout, stream), expected));
  EXPECT_GE(kernel.max_active_blocks_per_sm(512, shared), 1);
}

TEST(LoadedKernel, ModuleForAnotherGpuGeneration_IsRefusedBeforeLoading) {
  ALLOY_REQUIRE_GPU();
  const DeviceProps& p = device_props(0);
  int other_major = p.sm_major == 8 ? 9 : 8;
  auto module = compile_cuda(kAxpySource, "axpy_bf16", other_major, 0);
  EXPECT_THROW(LoadedKernel::get(*module, 0), InternalError);
}

TEST(LoadedKernel, LaunchOnAnotherDevicesStream_IsABug) {
  ALLOY_REQUIRE_GPU();
  if (device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const LoadedKernel& kernel = LoadedKernel::get(*compile_for_device0(kAxpySource, "axpy_bf16"), 0);
  void* args[] = {nullptr};
  EXPECT_THROW(kernel.launch(Dim3{1}, Dim3{1}, 0, Stream::current(1), args), InternalError);
}

}  // namespace
}  // namespace alloy::cuda

#endif  // ALLOY_HAVE_CUDA
