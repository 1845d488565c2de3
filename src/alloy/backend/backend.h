// What the backends offer the layers above them (the pipeline, the executor, the command line,
// the Python module, the benchmarks), in a header free of CUDA types: each device kind's runtime,
// the executables of the segments a backend owns, and ahead-of-time compilation. backend/cpu and
// backend/cuda define these; in a build without the CUDA toolkit, backend/none stands in for CUDA
// (its runtime is never available and the rest is a user error saying why).
#pragma once

#include <memory>
#include <string>

#include "alloy/host_ir/evaluator.h"

namespace alloy::backend {

// The runtime of a device kind: the CPU's always works; CUDA's says whether a GPU can be used
// (available(), never throwing) and, where none can, every call is a user error saying why.
const host_ir::DeviceRuntime& device_runtime(DeviceKind kind);

// The executable of a segment of a `target` segmentation that its backend owns (every scheduler
// but communication, whose segments multidevice/ makes). `segment` must outlive it.
std::unique_ptr<host_ir::SegmentExecutable> make_segment_executable(const Segment& segment, Target target);

// `alloy compile`: generates every kernel of a CUDA segmentation of `local` (the fusion one device
// runs) in representative variants (scalar and vectorized) and compiles each with NVRTC for
// `arch` ("sm_90", "sm_80", ...), with no GPU. Returns a report, or with `dump_source` the
// sources. With `sizes` (every symbol bound), instead the one variant a run would launch for
// contiguous inputs of those sizes, with its grid, block and ptxas' register count.
std::string compile_offline(const Fusion& local, const Segmentation& segmentation, const std::string& arch, bool dump_source,
                            const Bindings* sizes = nullptr);

}  // namespace alloy::backend
