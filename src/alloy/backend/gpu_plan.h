// What the executor needs from the GPU backend, in a header free of CUDA types: building a
// plan, moving tensors between host and device, and waiting for the device. In builds without
// the CUDA toolkit, gpu_plan_disabled.cpp defines these to report that CUDA is unavailable.
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy {

std::unique_ptr<host_ir::Executable> build_gpu_plan(const Fusion& fusion);
Tensor upload(const Tensor& cpu, Device device);  // on the device's current stream
Tensor download(const Tensor& device_tensor);     // waits for the stream
void synchronize_device(Device device);

}  // namespace alloy

namespace alloy {

// Ahead-of-time compilation without a GPU (`alloy compile`): generates every kernel of the
// fusion's CUDA plan in representative variants (scalar and vectorized) and compiles each with
// NVRTC for `arch` ("sm_90", "sm_80", ...). Returns a report, or with `dump_source` the sources.
// With `sizes` (every symbol bound), instead the one variant the runtime would launch for
// contiguous inputs of those sizes, with its grid, block and ptxas' register count.
std::string compile_offline(const Fusion& fusion, const std::string& arch, bool dump_source, const Bindings* sizes = nullptr);

}  // namespace alloy
