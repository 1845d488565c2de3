// The CPU device runtime's accumulate (a ring's step, a reduce-scatter's finish, the parts a
// pipelined reduce-scatter's own GEMM adds): every addend summed in one pass, wide, and stored
// once, into a strided destination.
#include <gtest/gtest.h>

#include "alloy/backend/cpu/cpu_executable.h"
#include "test_util.h"

namespace alloy {
namespace {

TEST(CpuRuntime, AccumulateAddsEveryAddendOnceIntoAStridedDestination) {
  const host_ir::DeviceRuntime& cpu = cpu_runtime();
  // bf16: 256 + 1 + 1 rounded after each add stays 256 (its spacing there is 2); summed once, 258
  Tensor into = Tensor::empty(DType::bf16, {2, 4});
  std::vector<Tensor> ones = {Tensor::empty(DType::bf16, {2}), Tensor::empty(DType::bf16, {2})};
  for (int64_t i = 0; i < 8; ++i) store_double(into.data(), DType::bf16, i, i % 4 == 0 ? 256 : -1);
  for (Tensor& t : ones)
    for (int64_t i = 0; i < 2; ++i) store_double(t.data(), DType::bf16, i, 1);
  Tensor column = into.as_strided({2}, {4}, 0);  // elements 0 and 4
  cpu.accumulate(column, ones);
  EXPECT_EQ(load_as_double(into.data(), DType::bf16, 0), 258);
  EXPECT_EQ(load_as_double(into.data(), DType::bf16, 4), 258);
  EXPECT_EQ(load_as_double(into.data(), DType::bf16, 1), -1);  // not in the view: untouched

  // i64 exactly (past double's 53 bits), i32 wrapping, bools or
  Tensor big = Tensor::empty(DType::i64, {1}), step = Tensor::empty(DType::i64, {1});
  big.data_as<int64_t>()[0] = (int64_t(1) << 60) + 1;
  step.data_as<int64_t>()[0] = 2;
  cpu.accumulate(big, {step, step});
  EXPECT_EQ(big.data_as<int64_t>()[0], (int64_t(1) << 60) + 5);
  Tensor i32 = Tensor::empty(DType::i32, {1}), one = Tensor::empty(DType::i32, {1});
  i32.data_as<int32_t>()[0] = 2147483647;
  one.data_as<int32_t>()[0] = 1;
  cpu.accumulate(i32, {one});
  EXPECT_EQ(i32.data_as<int32_t>()[0], -2147483647 - 1);
  Tensor flags = Tensor::empty(DType::boolean, {3}), a = Tensor::empty(DType::boolean, {3}), b = Tensor::empty(DType::boolean, {3});
  const uint8_t fv[] = {0, 0, 1}, av[] = {0, 1, 1}, bv[] = {0, 1, 0};
  for (int i = 0; i < 3; ++i) flags.data_as<uint8_t>()[i] = fv[i], a.data_as<uint8_t>()[i] = av[i], b.data_as<uint8_t>()[i] = bv[i];
  cpu.accumulate(flags, {a, b});
  EXPECT_EQ(flags.data_as<uint8_t>()[0], 0);
  EXPECT_EQ(flags.data_as<uint8_t>()[1], 1);
  EXPECT_EQ(flags.data_as<uint8_t>()[2], 1);
}

}  // namespace
}  // namespace alloy
