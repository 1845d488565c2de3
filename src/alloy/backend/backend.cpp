#include "alloy/backend/backend.h"

#include "alloy/backend/cpu/cpu_executable.h"
#include "alloy/backend/cuda/cuda_backend.h"

namespace alloy::backend {

const host_ir::DeviceRuntime& device_runtime(DeviceKind kind) {
  return kind == DeviceKind::cpu ? cpu_runtime() : cuda::cuda_runtime();
}

std::unique_ptr<host_ir::SegmentExecutable> make_segment_executable(const Segment& segment, Target target) {
  ALLOY_CHECK(segment.scheduler != SchedulerKind::communication, "communication segments are made by multidevice/");
  return target == Target::cpu ? make_cpu_executable(segment) : cuda::make_cuda_executable(segment);
}

}  // namespace alloy::backend
