#include "alloy/backend/cpu/cpu_executable.h"

#include <cstring>

#include "alloy/backend/cpu/reference_ops.h"
#include "alloy/multidevice/communication_segment.h"
#include "alloy/segment/segmenter.h"

namespace alloy {
namespace {

class CpuSegment final : public host_ir::SegmentExecutable {
 public:
  explicit CpuSegment(const Segment& segment) : ops_(segment.ops) {}

  void run(host_ir::RunState& state) override { run_reference_ops(ops_, state); }

 private:
  std::vector<const Op*> ops_;
};

}  // namespace

void run_reference_ops(const std::vector<const Op*>& ops, host_ir::RunState& state, const TensorMove& to_host,
                       const TensorMove& from_host) {
  for (const Op* op : ops) {
    std::vector<Tensor> inputs;
    inputs.reserve(op->inputs.size());
    for (Value* in : op->inputs) {
      const Tensor& t = state.at(in);
      inputs.push_back(to_host && t.device().kind != DeviceKind::cpu ? to_host(t) : t);
    }
    std::vector<std::vector<int64_t>> sizes;
    for (Value* out : op->outputs) sizes.push_back(state.concrete_shape(out));
    std::vector<Tensor> outputs = run_reference_op(*op, inputs, sizes);
    ALLOY_CHECK(outputs.size() == op->outputs.size(), "reference kernel returned the wrong number of outputs");
    for (size_t i = 0; i < outputs.size(); ++i)
      state.values[op->outputs[i]->id] = from_host ? from_host(outputs[i]) : std::move(outputs[i]);
  }
}

std::unique_ptr<host_ir::SegmentExecutable> make_cpu_executable(const Segment& segment) {
  return std::make_unique<CpuSegment>(segment);
}

// dst = src for CPU tensors of one dtype and shape, dst at any strides (a loop's chunk views).
void copy_into_cpu(const Tensor& dst, const Tensor& src, host_ir::RunState&) {
  ALLOY_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "copy of ", src.str(), " into ", dst.str());
  Tensor packed = packed_cpu(src);
  size_t width = size_t(dtype_size(dst.dtype()));
  std::vector<int64_t> index(size_t(dst.dim()), 0);
  auto* to = static_cast<char*>(dst.data());
  const auto* from = static_cast<const char*>(packed.data());
  for (int64_t i = 0; i < dst.numel(); ++i) {
    int64_t at = 0;
    for (int a = 0; a < dst.dim(); ++a) at += index[size_t(a)] * dst.stride(a);
    std::memcpy(to + at * int64_t(width), from + size_t(i) * width, width);
    for (int a = dst.dim() - 1; a >= 0 && ++index[size_t(a)] == dst.size(a); --a) index[size_t(a)] = 0;
  }
}

// into += sum for CPU tensors of one dtype and shape, `into` at any strides (a ring's block).
void accumulate_cpu(const Tensor& into, const Tensor& sum, host_ir::RunState&) {
  ALLOY_CHECK(into.sizes() == sum.sizes() && into.dtype() == sum.dtype(), "accumulate of ", sum.str(), " into ", into.str());
  Tensor packed = packed_cpu(sum);
  std::vector<int64_t> index(size_t(into.dim()), 0);
  for (int64_t i = 0; i < into.numel(); ++i) {
    int64_t at = 0;
    for (int a = 0; a < into.dim(); ++a) at += index[size_t(a)] * into.stride(a);
    void* base = into.data();
    store_double(base, into.dtype(), at, load_as_double(base, into.dtype(), at) + load_as_double(packed.data(), packed.dtype(), i));
    for (int a = into.dim() - 1; a >= 0 && ++index[size_t(a)] == into.size(a); --a) index[size_t(a)] = 0;
  }
}

std::unique_ptr<host_ir::Executable> build_cpu_plan(const Fusion& fusion) {
  auto plan = std::make_unique<host_ir::Executable>();
  plan->program = host_ir::lower_to_program(segment_fusion(fusion, Target::cpu));
  plan->allocate = [](DType dtype, const std::vector<int64_t>& sizes, host_ir::RunState&) { return Tensor::empty(dtype, sizes); };
  plan->copy = copy_into_cpu;
  plan->accumulate = accumulate_cpu;
  plan->ring = multidevice::ring_exchange();
  for (const Segment& s : plan->program.segmentation.segments)
    plan->segments.push_back(s.scheduler == "communication"
                                 ? multidevice::make_communication_segment(s, multidevice::host_memory())
                                 : make_cpu_executable(s));
  return plan;
}

}  // namespace alloy
