#include "alloy/backend/cuda/multi_tensor_segment.h"

#include <map>
#include <string>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/generated_kernel.h"
#include "alloy/backend/cuda/kernel_cache.h"
#include "alloy/backend/cuda/multi_tensor_plan.h"
#include "alloy/segment/schedulers/multi_tensor.h"

namespace alloy::cuda {
namespace {

class MultiTensorSegment final : public host_ir::SegmentExecutable {
 public:
  explicit MultiTensorSegment(const Segment& segment) : group_(segment.group), id_(segment.id) {
    ALLOY_CHECK(group_ != nullptr, "segment ", segment.id, " [multi_tensor] has no group");
    apart_.resize(group_->members.size());
  }

  void run(host_ir::RunState& state) override {
    const KernelAnalysis& kernel = group_->kernel();
    auto value_of = [&](const Value* v) -> const Tensor& { return state.at(v); };
    std::vector<std::vector<const Tensor*>>& tensors = tensors_;
    tensors.resize(group_->tensors.size());
    for (size_t i = 0; i < group_->tensors.size(); ++i) {
      tensors[i].clear();
      for (const Value* v : group_->tensors[i]) tensors[i].push_back(&value_of(v));
    }
    if (target_.sm_count == 0 || target_device_ != state.device.index) {
      const DeviceProps& props = device_props(state.device.index);
      target_ = LaunchTarget::from_environment(props.sm_major, props.sm_minor, props.sm_count, props.shared_per_sm);
      target_device_ = state.device.index;
    }
    MultiTensorLaunch plan = plan_multi_tensor_launch(kernel, group_->per_member, int(tensors.size()), tensors,
                                                      multi_tensor_scalar_words(*group_, value_of), target_);
    for (size_t i : plan.apart) {  // strided tensors: the chain's own pointwise kernel
      const Segment& member = group_->members[i];
      if (!apart_[i]) apart_[i] = make_generated_kernel(member, *member.analysis);
      apart_[i]->run(state);
    }
    if (!plan.launch) return;
    const LoadedKernel* loaded = kernel_for(plan.variant, state.device.index);
    void* args[] = {plan.words.data()};
    loaded->launch(Dim3{plan.grid}, Dim3{plan.block}, 0, Stream::current(state.device.index), args);
  }

  std::string source() const override {
    std::string out;
    for (auto& [key, entry] : variants_) out += "// segment " + std::to_string(id_) + ", variant " + key + "\n" + entry.source + "\n";
    for (const auto& member : apart_)
      if (member) out += member->source();
    return out;
  }

 private:
  struct Variant {
    std::string source;
    const LoadedKernel* kernel = nullptr;
  };

  const LoadedKernel* kernel_for(const KernelVariant& v, int device) {
    if (last_kernel_ && device == last_device_) return last_kernel_;  // the variant depends on the dtypes alone
    std::string key = "mt" + std::to_string(group_->members.size()) + "_" + v.key() + "@" + std::to_string(device);
    auto it = variants_.find(key);
    if (it == variants_.end()) {
      Variant entry;
      std::string name = "alloy_segment" + std::to_string(id_);
      entry.source = generate_multi_tensor_kernel(group_->kernel(), group_->per_member, v, int(group_->members.size()), name);
      entry.kernel = &compile_and_load(entry.source, name, device);
      it = variants_.emplace(key, std::move(entry)).first;
    }
    last_device_ = device;
    return last_kernel_ = it->second.kernel;
  }

  std::shared_ptr<const MultiTensorGroup> group_;
  int id_;
  std::vector<std::unique_ptr<host_ir::SegmentExecutable>> apart_;
  std::vector<std::vector<const Tensor*>> tensors_;
  LaunchTarget target_;
  int target_device_ = -1;
  std::map<std::string, Variant> variants_;
  int last_device_ = -1;
  const LoadedKernel* last_kernel_ = nullptr;
};

}  // namespace

std::unique_ptr<host_ir::SegmentExecutable> make_multi_tensor_segment(const Segment& segment) {
  return std::make_unique<MultiTensorSegment>(segment);
}

}  // namespace alloy::cuda
