#include "alloy/runtime/dlpack.h"

#include <vector>

#include "alloy/common/error.h"

namespace alloy::dlpack {
namespace {

DLDataType to_dl(DType t) {
  switch (t) {
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i64: return {kDLInt, 64, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::boolean: return {kDLBool, 8, 1};
  }
  internal_error("bad dtype");
}

DType from_dl(DLDataType t) {
  if (t.lanes != 1) user_error_at("DLPack tensor", "vector dtypes (lanes = ", t.lanes, ") are not supported; expected lanes = 1");
  if (t.code == kDLFloat && t.bits == 64) return DType::f64;
  if (t.code == kDLFloat && t.bits == 32) return DType::f32;
  if (t.code == kDLFloat && t.bits == 16) return DType::f16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
  if (t.code == kDLInt && t.bits == 64) return DType::i64;
  if (t.code == kDLInt && t.bits == 32) return DType::i32;
  if (t.code == kDLBool && t.bits == 8) return DType::boolean;
  user_error_at("DLPack tensor", "dtype code ", int(t.code), " with ", int(t.bits),
                " bits is not supported; expected f64 f32 f16 bf16 i64 i32 or bool");
}

// What an exported tensor owns: the view (keeping the buffer alive) and its shape arrays.
struct Exported {
  DLManagedTensor managed{};
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

void delete_exported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  ALLOY_CHECK(t.defined(), "to_dlpack of an undefined tensor");
  auto* e = new Exported;
  e->tensor = t;
  e->shape = t.sizes();
  e->strides = t.strides();
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data();  // element 0 itself; byte_offset 0 suits every consumer
  d.device = {t.device().kind == DeviceKind::cuda ? kDLCUDA : kDLCPU, t.device().index};
  d.ndim = t.dim();
  d.dtype = to_dl(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_exported;
  return &e->managed;
}

Tensor from_dlpack(DLManagedTensor* managed) {
  ALLOY_CHECK(managed != nullptr, "from_dlpack of a null pointer");
  const DLTensor& d = managed->dl_tensor;
  DType dtype = from_dl(d.dtype);
  Device device;
  if (d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost) device = {DeviceKind::cpu, 0};
  else if (d.device.device_type == kDLCUDA || d.device.device_type == kDLCUDAManaged) device = {DeviceKind::cuda, d.device.device_id};
  else user_error_at("DLPack tensor", "device type ", d.device.device_type, " is not supported; expected CPU or CUDA");
  if (d.ndim < 0) user_error_at("DLPack tensor", "negative ndim ", d.ndim);
  std::vector<int64_t> sizes(d.shape, d.shape + d.ndim);
  std::vector<int64_t> strides = d.strides ? std::vector<int64_t>(d.strides, d.strides + d.ndim) : contiguous_strides(sizes);
  int size = dtype_size(dtype);
  if (d.byte_offset % size != 0)
    user_error_at("DLPack tensor", "byte_offset ", d.byte_offset, " is not a multiple of the element size ", size);
  auto buffer = std::make_shared<Buffer>();
  buffer->device = device;
  buffer->data = d.data;
  // the deleter is the producer's; it runs once, when Alloy's last view goes
  buffer->deleter = [managed](void*) {
    if (managed->deleter) managed->deleter(managed);
  };
  return Tensor(std::move(buffer), dtype, std::move(sizes), std::move(strides), int64_t(d.byte_offset) / size);
}

}  // namespace alloy::dlpack
