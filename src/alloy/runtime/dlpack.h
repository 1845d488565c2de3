// DLPack import and export of runtime tensors, so PyTorch, NumPy and CuPy tensors cross without a
// copy. The structs follow the DLPack ABI (v0.8: DLManagedTensor, DLTensor, DLDevice, DLDataType),
// declared here so Alloy needs no dlpack header.
#pragma once

#include <cstdint>

#include "alloy/runtime/tensor.h"

namespace alloy::dlpack {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum DataTypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr means compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// A DLManagedTensor viewing `t` (no copy); it keeps t's buffer alive until its deleter runs.
DLManagedTensor* to_dlpack(const Tensor& t);

// A Tensor viewing the DLPack tensor's memory (no copy). Alloy takes ownership: the managed
// tensor's deleter runs when the last view of the returned Tensor goes away. Unsupported dtypes,
// vector lanes or devices are a UserError (and then the caller still owns `managed`).
Tensor from_dlpack(DLManagedTensor* managed);

}  // namespace alloy::dlpack
