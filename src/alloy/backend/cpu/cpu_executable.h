// Segment executables for the CPU: each op of the segment runs through its reference kernel.
#pragma once

#include <memory>

#include "alloy/host_ir/evaluator.h"

namespace alloy {

std::unique_ptr<host_ir::SegmentExecutable> make_cpu_executable(const Segment& segment);

}  // namespace alloy
