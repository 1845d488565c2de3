// Stand-ins for the GPU backend in builds without the CUDA toolkit.
#include "alloy/backend/gpu_plan.h"

namespace alloy {

std::unique_ptr<host_ir::Executable> build_gpu_plan(const Fusion&) {
  user_error_at("cuda", "this build of Alloy has no CUDA backend");
}
Tensor upload(const Tensor&, Device) { user_error_at("cuda", "this build of Alloy has no CUDA backend"); }
Tensor download(const Tensor&) { user_error_at("cuda", "this build of Alloy has no CUDA backend"); }
void synchronize_device(Device) {}

}  // namespace alloy

namespace alloy {

std::string compile_offline(const Fusion&, const std::string& arch, bool, const Bindings*) {
  user_error_at("alloy compile --arch " + arch, "this build of Alloy has no CUDA backend (the CUDA toolkit was not found)");
}

}  // namespace alloy
