#include "alloy/runtime/dlpack.h"

#include <gtest/gtest.h>

#include "alloy/runtime/run_inputs.h"

namespace alloy::dlpack {
namespace {

TEST(DLPack, ExportThenImport_SharesMemoryWithStridesAndOffset) {
  Tensor base = random_tensor(DType::f32, {4, 6}, 3);
  Tensor view = base.as_strided({3, 2}, {1, 12}, 5);  // transposed, offset view
  DLManagedTensor* m = to_dlpack(view);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 32);
  EXPECT_EQ(m->dl_tensor.strides[1], 12);
  EXPECT_EQ(m->dl_tensor.data, view.data());
  Tensor back = from_dlpack(m);
  EXPECT_EQ(back.data(), view.data());
  EXPECT_EQ(back.sizes(), view.sizes());
  EXPECT_EQ(back.strides(), view.strides());
  EXPECT_EQ(back.data_as<float>()[1 * 12 + 2], base.data_as<float>()[5 + 12 + 2]);
}

struct Producer {
  float data[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  int deleted = 0;
  DLManagedTensor managed{};
};

TEST(DLPack, Import_TakesOwnershipAndCallsTheDeleterOnce) {
  Producer p;
  p.managed.dl_tensor = {p.data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, p.shape, nullptr, 4};  // compact, offset by one
  p.managed.manager_ctx = &p;
  p.managed.deleter = [](DLManagedTensor* self) { ++static_cast<Producer*>(self->manager_ctx)->deleted; };
  {
    Tensor t = from_dlpack(&p.managed);
    EXPECT_EQ(t.strides(), (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(t.data_as<float>()[0], 2.0f);  // byte_offset 4 = one f32
    Tensor copy = t;
    EXPECT_EQ(p.deleted, 0);
  }
  EXPECT_EQ(p.deleted, 1);
}

TEST(DLPack, UnsupportedDtypeIsAUserError) {
  Producer p;
  p.managed.dl_tensor = {p.data, {kDLCPU, 0}, 2, {kDLUInt, 16, 1}, p.shape, nullptr, 0};
  EXPECT_THROW(from_dlpack(&p.managed), UserError);
  p.managed.dl_tensor.dtype = {kDLFloat, 32, 4};
  EXPECT_THROW(from_dlpack(&p.managed), UserError);
  p.managed.dl_tensor.dtype = {kDLFloat, 32, 1};
  p.managed.dl_tensor.device = {7, 0};
  EXPECT_THROW(from_dlpack(&p.managed), UserError);
}

TEST(DLPack, EveryDtypeRoundTrips) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean}) {
    Tensor x = random_tensor(t, {5}, 1);
    Tensor y = from_dlpack(to_dlpack(x));
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(y.data(), x.data());
  }
}

}  // namespace
}  // namespace alloy::dlpack
