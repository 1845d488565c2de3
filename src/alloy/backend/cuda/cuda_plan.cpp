#include "alloy/backend/cuda/cuda_plan.h"

#include "alloy/backend/cpu/cpu_executable.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/generated_kernel.h"
#include "alloy/backend/cuda/matmul_segment.h"
#include "alloy/backend/cuda/strided_copy.h"
#include "alloy/runtime/views.h"
#include "alloy/segment/schedulers/cuda_segmenter.h"

namespace alloy::cuda {
namespace {

// Views made on the host: no kernel at all. A reshape that cannot be a view copies.
class NoopSegment final : public host_ir::SegmentExecutable {
 public:
  explicit NoopSegment(const Segment& s) : ops_(s.ops) {}
  void run(host_ir::RunState& state) override {
    for (const Op* op : ops_) {
      const Tensor& in = state.at(op->inputs[0]);
      std::vector<int64_t> sizes = state.concrete_shape(op->outputs[0]);
      Tensor t = apply_view(*op, in, sizes);
      if (!t.defined()) {
        t = contiguous(in, Stream::current(state.device.index)).view(sizes);
      }
      state.values[op->outputs[0]->id] = t;
    }
  }

 private:
  std::vector<const Op*> ops_;
};

// Ops no GPU scheduler takes: through the host and the reference kernels, then back.
class CpuFallbackSegment final : public host_ir::SegmentExecutable {
 public:
  explicit CpuFallbackSegment(const Segment& s) : ops_(s.ops) {}
  void run(host_ir::RunState& state) override {
    Stream stream = Stream::current(state.device.index);
    run_reference_ops(ops_, state, [&](const Tensor& t) { return to_host(t, stream); },
                      [&](const Tensor& t) { return to_device(t, stream); });
  }

 private:
  std::vector<const Op*> ops_;
};

Tensor allocate_on_device(DType dtype, const std::vector<int64_t>& sizes, host_ir::RunState& state) {
  Stream stream = Stream::current(state.device.index);
  Tensor t = cuda_empty(dtype, sizes, stream);
  if (state.poison) fill_poison(t, stream);
  return t;
}

}  // namespace

std::unique_ptr<host_ir::Executable> build_cuda_plan(const Fusion& fusion) {
  auto plan = std::make_unique<host_ir::Executable>();
  plan->program = host_ir::lower_to_program(segment_for_cuda(fusion));
  plan->allocate = allocate_on_device;
  for (const Segment& s : plan->program.segmentation.segments) {
    if (s.scheduler == "noop") {
      plan->segments.push_back(std::make_unique<NoopSegment>(s));
    } else if (s.scheduler == "matmul") {
      plan->segments.push_back(make_matmul_segment(s));
    } else if (s.scheduler == "cpu_fallback") {
      plan->segments.push_back(std::make_unique<CpuFallbackSegment>(s));
    } else {
      auto analysis = analyze_kernel(s.ops, s.inputs, s.outputs);
      ALLOY_CHECK(std::holds_alternative<KernelAnalysis>(analysis), "segment ", s.id, " was accepted but no longer analyzes");
      plan->segments.push_back(make_generated_kernel(s, std::get<KernelAnalysis>(std::move(analysis))));
    }
  }
  return plan;
}

}  // namespace alloy::cuda
