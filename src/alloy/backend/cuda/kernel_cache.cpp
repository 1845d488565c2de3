// Generated kernels behind one call: compile_cuda for the device's exact architecture (memory and
// disk caches), then LoadedKernel::get on that device.
#include "alloy/backend/cuda/kernel_cache.h"

#include "alloy/backend/cuda/nvrtc_compiler.h"

namespace alloy::cuda {

const LoadedKernel& compile_and_load(const std::string& source, const std::string& name, int device) {
  const DeviceProps& props = device_props(device);
  std::shared_ptr<const CompiledModule> module = compile_cuda(source, name, props.sm_major, props.sm_minor);
  return LoadedKernel::get(*module, device);
}

}  // namespace alloy::cuda
