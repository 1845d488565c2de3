// The CPU backend: its device runtime (the host), and segment executables that run each op of the
// segment through its reference kernel.
#pragma once

#include <functional>
#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy {

std::unique_ptr<host_ir::SegmentExecutable> make_cpu_executable(const Segment& segment);

const host_ir::DeviceRuntime& cpu_runtime();

// Runs `ops` one by one through the reference kernels, reading and writing `state`. A GPU
// segment that falls back passes `to_host` for its inputs and `from_host` for its results.
using TensorMove = std::function<Tensor(const Tensor&)>;
void run_reference_ops(const std::vector<const Op*>& ops, host_ir::RunState& state, const TensorMove& to_host = {},
                       const TensorMove& from_host = {});

}  // namespace alloy
