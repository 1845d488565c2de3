// The CUDA backend's entry points (backend/cuda/cuda_backend.h, backend/backend.h) in a build
// without the CUDA toolkit: its runtime is never available, and everything that needs CUDA is a
// user error saying so.
#include "alloy/backend/backend.h"
#include "alloy/backend/cuda/cuda_backend.h"
#include "alloy/common/error.h"

namespace alloy {
namespace {

constexpr const char* kReason = "Alloy was built without the CUDA toolkit";

[[noreturn]] void unavailable(const char* what) { user_error_at(what, "CUDA unavailable: ", kReason); }

class UnavailableRuntime final : public host_ir::DeviceRuntime {
 public:
  DeviceKind kind() const override { return DeviceKind::cuda; }
  bool available() const override { return false; }
  std::string unavailable_reason() const override { return kReason; }
  int device_count() const override { return 0; }
  std::string device_name(int) const override { unavailable("cuda"); }
  int64_t memory_bytes(int) const override { unavailable("cuda"); }
  Tensor empty(DType, const std::vector<int64_t>&, int) const override { unavailable("cuda"); }
  void fill_poison(const Tensor&) const override { unavailable("cuda"); }
  void fill_zero(const Tensor&) const override { unavailable("cuda"); }
  Tensor contiguous(const Tensor&) const override { unavailable("cuda"); }
  void copy(const Tensor&, const Tensor&) const override { unavailable("cuda"); }
  void accumulate(const Tensor&, const std::vector<Tensor>&) const override { unavailable("cuda"); }
  Tensor to_device(const Tensor&, int) const override { unavailable("cuda"); }
  Tensor to_host(const Tensor&) const override { unavailable("cuda"); }
  void synchronize(int) const override {}
  std::unique_ptr<host_ir::RunStreams> open_streams(const host_ir::Program&, host_ir::RunState&) const override { unavailable("cuda"); }
  std::unique_ptr<host_ir::Scope> use_stream(int, uintptr_t) const override { unavailable("stream"); }
  uintptr_t current_stream(int) const override { unavailable("cuda"); }
  std::unique_ptr<host_ir::DeviceTimer> timer(int) const override { unavailable("cuda"); }
  std::unique_ptr<host_ir::TraceClock> trace_clock(int) const override { unavailable("cuda"); }
};

}  // namespace

const host_ir::DeviceRuntime& cuda::cuda_runtime() {
  static const UnavailableRuntime runtime;
  return runtime;
}

std::unique_ptr<host_ir::SegmentExecutable> cuda::make_cuda_executable(const Segment&) { unavailable("cuda"); }

std::string backend::compile_offline(const Fusion&, const Segmentation&, const std::string& arch, bool, const Bindings*) {
  user_error_at("alloy compile --arch " + arch, "this build of Alloy has no CUDA backend (the CUDA toolkit was not found)");
}

}  // namespace alloy
