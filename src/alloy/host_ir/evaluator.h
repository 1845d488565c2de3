// Runs a host program: holds the concrete tensor of every value, the bound sizes, and one
// executable per segment (made by the backend that owns the segment's scheduler).
#pragma once

#include <memory>
#include <vector>

#include "alloy/host_ir/program.h"
#include "alloy/runtime/tensor.h"

namespace alloy::host_ir {

// The state of one run: a tensor per Value id, and the bound symbolic sizes.
struct RunState {
  Bindings bindings;
  std::vector<Tensor> values;
  Device device;
  bool poison = false;     // fill allocated buffers with 0xFF bytes (tests)

  const Tensor& at(const Value* v) const;
  std::vector<int64_t> concrete_shape(const Value* v) const;  // evaluates the value's extents
};

class SegmentExecutable {
 public:
  virtual ~SegmentExecutable() = default;
  // Reads the segment's inputs from `state` and stores its outputs there.
  virtual void run(RunState& state) = 0;
  // The generated source, for `--dump cuda`; empty where there is none.
  virtual std::string source() const { return {}; }
};

// Allocates a device buffer for `Allocate` nodes (CUDA); unused on the CPU.
using Allocator = Tensor (*)(DType dtype, const std::vector<int64_t>& sizes, RunState& state);

struct Executable {
  Program program;
  std::vector<std::unique_ptr<SegmentExecutable>> segments;  // by segment id
  Allocator allocate = nullptr;

  void run(RunState& state) const;
};

}  // namespace alloy::host_ir
