// Generated kernels ready to launch: NVRTC compilation for the device's architecture (cached in
// memory and on disk by nvrtc_compiler) and loading on the device, behind one call.
#pragma once

#include <string>

#include "alloy/backend/cuda/loaded_kernel.h"

namespace alloy::cuda {

// Compiles `source` for `device`'s architecture (or finds it compiled) and loads kernel `name` on
// the device; the loaded kernel lives until the process exits, so callers
// keep the reference and a cached launch does no lookup at all.
const LoadedKernel& compile_and_load(const std::string& source, const std::string& name, int device);

}  // namespace alloy::cuda
