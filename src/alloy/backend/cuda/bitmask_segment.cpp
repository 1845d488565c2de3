#include "alloy/backend/cuda/bitmask_segment.h"

#include "alloy/backend/cuda/codegen/bitmask_kernel.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/kernel_cache.h"
#include "alloy/backend/cuda/strided_copy.h"
#include "alloy/ir/op_table.h"

namespace alloy::cuda {
namespace {

// t as [rows, last axis]; a packed copy where its strides do not allow the view.
Tensor as_rows(const Tensor& t, const Stream& stream) {
  int64_t last = t.size(t.dim() - 1), rows = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  Tensor v = t.view({rows, last});
  return v.defined() ? v : contiguous(t, stream).view({rows, last});
}

class BitmaskOp final : public host_ir::SegmentExecutable {
 public:
  BitmaskOp(const Op& op, int id) : op_(op), id_(id), name_("alloy_segment" + std::to_string(id)) {}

  void run(host_ir::RunState& state) override {
    Stream stream = Stream::current(state.device.index);
    Tensor& out = state.values[op_.outputs[0]->id];
    if (!out.defined()) out = cuda_empty(op_.outputs[0]->dtype(), state.concrete_shape(op_.outputs[0]), stream);
    std::vector<Tensor> views;
    for (Value* in : op_.inputs) views.push_back(as_rows(state.at(in), stream));
    Tensor out_rows = out.view({views[op_.kind == OpKind::relu_mask ? 0 : 1].size(0), out.size(out.dim() - 1)});
    ALLOY_CHECK(out_rows.defined(), op_name(op_.kind), ": its output buffer is not a row-major matrix");
    views.push_back(out_rows);
    std::vector<const Tensor*> tensors;
    for (const Tensor& t : views) tensors.push_back(&t);
    if (sm_count_ == 0 || device_ != state.device.index) {
      sm_count_ = device_props(state.device.index).sm_count;
      device_ = state.device.index;
      kernel_ = nullptr;
    }
    BitmaskLaunch plan = plan_bitmask_launch(op_.kind, tensors, sm_count_);
    if (!plan.launch) return;
    if (!kernel_) {
      source_ = generate_bitmask_kernel(op_.kind, op_.inputs[0]->dtype(), name_);
      kernel_ = &compile_and_load(source_, name_, state.device.index);
    }
    void* args[] = {plan.words.data()};
    kernel_->launch(Dim3{plan.grid}, Dim3{plan.block}, 0, stream, args);
  }

  std::string source() const override {
    return source_.empty() ? std::string() : "// segment " + std::to_string(id_) + " [bitmask]\n" + source_ + "\n";
  }

 private:
  const Op& op_;
  int id_;
  std::string name_, source_;
  int sm_count_ = 0, device_ = -1;
  const LoadedKernel* kernel_ = nullptr;
};

}  // namespace

std::unique_ptr<host_ir::SegmentExecutable> make_bitmask_segment(const Segment& segment) {
  ALLOY_CHECK(segment.ops.size() == 1, "a bitmask segment has one op, found ", segment.ops.size());
  return std::make_unique<BitmaskOp>(*segment.ops[0], segment.id);
}

std::unique_ptr<host_ir::SegmentExecutable> make_bitmask_op(const Op& op, int segment_id) {
  return std::make_unique<BitmaskOp>(op, segment_id);
}

}  // namespace alloy::cuda
