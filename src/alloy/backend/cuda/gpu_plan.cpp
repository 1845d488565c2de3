#include "alloy/backend/gpu_plan.h"

#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/cuda_plan.h"

namespace alloy {

std::unique_ptr<host_ir::Executable> build_gpu_plan(const Fusion& fusion) { return cuda::build_cuda_plan(fusion); }

Tensor upload(const Tensor& cpu, Device device) { return cuda::to_device(cpu, cuda::Stream::current(device.index)); }

Tensor download(const Tensor& device_tensor) {
  return cuda::to_host(device_tensor, cuda::Stream::current(device_tensor.device().index));
}

void synchronize_device(Device device) { cuda::Stream::current(device.index).synchronize(); }

}  // namespace alloy
