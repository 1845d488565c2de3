#include "alloy/backend/cuda/generated_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>

#include "alloy/backend/cuda/codegen/kernel_codegen.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/gather_fault.h"
#include "alloy/backend/cuda/kernel_cache.h"
#include "alloy/backend/cuda/launch_plan.h"
#include "alloy/backend/cuda/strided_copy.h"
#include "alloy/backend/cuda/host_views.h"
#include "alloy/segment/schedulers/stage_split.h"

namespace alloy::cuda {
namespace {

class GeneratedKernel final : public host_ir::SegmentExecutable {
 public:
  GeneratedKernel(const Segment& segment, KernelAnalysis analysis)
      : a_(std::move(analysis)), id_(segment.id), ops_(segment.ops), inputs_(segment.inputs) {}

  void run(host_ir::RunState& state) override {
    for (const Op* view : a_.host_views) make_host_view(*view, state);
    std::deque<Tensor> positions;
    std::vector<const Tensor*> tensors = launch_tensors(
        a_, [&](const Value* v) -> const Tensor& { return state.at(v); }, [&](const Value* v) { return state.concrete_shape(v); },
        positions);
    Stream stream = Stream::current(state.device.index);
    std::vector<int64_t> domain;
    for (const Extent& e : a_.domain) domain.push_back(*e.evaluate(state.bindings));
    std::vector<uint64_t> scalars = scalar_words(a_, [&](const Value* v) -> const Tensor& { return state.at(v); });
    if (target_.sm_count == 0 || target_device_ != state.device.index) {
      const DeviceProps& props = device_props(state.device.index);
      target_ = LaunchTarget::from_environment(props.sm_major, props.sm_minor, props.sm_count, props.shared_per_sm);
      target_device_ = state.device.index;
    }
    LaunchPlan plan = plan_launch(a_, domain, tensors, scalars, target_);
    if (!plan.launch) return;
    if (plan.split_stages && run_split(state, stream)) return;
    const LoadedKernel* kernel = kernel_for(plan.variant, state.device.index);
    if (plan.column_max_splits > 1) fit_column_grid(plan, last_blocks_per_sm_, target_);
    if (plan.cooperative && !fit_cooperative_grid(plan, last_blocks_per_sm_, target_))
      internal_error("segment ", id_, ": no block of kernel ", plan.variant.key(), " fits on an SM of device ", state.device.index);
    if (plan.workspace_word >= 0) {
      plan.words[plan.workspace_word] = uint64_t(reinterpret_cast<uintptr_t>(stream.scratch(plan.workspace_bytes)));
      plan.words[plan.counters_word] = uint64_t(reinterpret_cast<uintptr_t>(stream.zeroed_scratch(plan.counter_bytes)));
    }
    if (plan.error_word >= 0) plan.words[plan.error_word] = gather_flag_.word(a_, state);
    void* args[] = {plan.words.data()};
    if (plan.cooperative) kernel->launch_cooperative(Dim3{plan.grid_x, plan.grid_y}, Dim3{plan.block}, plan.dynamic_shared, stream, args);
    else kernel->launch(Dim3{plan.grid_x, plan.grid_y}, Dim3{plan.block}, plan.dynamic_shared, stream, args);
  }

  std::string source() const override {
    std::string out;
    for (auto& [key, entry] : variants_) out += "// segment " + std::to_string(id_) + ", variant " + key + "\n" + entry.source + "\n";
    for (size_t k = 0; k < passes_.size(); ++k) {
      std::string pass = passes_[k]->source();
      if (!pass.empty()) out += "// segment " + std::to_string(id_) + ", pass " + std::to_string(k + 1) + " of " +
                                std::to_string(passes_.size()) + " (split_stages)\n" + pass;
    }
    return out;
  }

 private:
  struct Variant {
    std::string source;
    const LoadedKernel* kernel = nullptr;
  };

  // The kernel a pass (stage_split.h), made the first time a run asks for it; false where the
  // analysis does not split (the caller launches the one kernel).
  bool run_split(host_ir::RunState& state, const Stream& stream) {
    if (!split_tried_) {
      split_tried_ = true;
      if (auto split = split_by_stage(a_, ops_, inputs_)) {
        intermediates_ = std::move(split->intermediates);
        Segment pass;
        pass.id = id_;
        for (KernelAnalysis& k : split->kernels) passes_.push_back(std::make_unique<GeneratedKernel>(pass, std::move(k)));
      }
    }
    if (passes_.empty()) return false;
    for (const Value* v : intermediates_) {  // row statistics, for this run's sizes (a chunk's inside a loop)
      Tensor& t = state.values[v->id];
      std::vector<int64_t> sizes = state.concrete_shape(v);
      if (!t.defined() || t.sizes() != sizes) t = cuda_empty(v->dtype(), std::move(sizes), stream);
    }
    for (auto& pass : passes_) pass->run(state);
    return true;
  }

  const LoadedKernel* kernel_for(const KernelVariant& v, int device) {
    // the cached run path: the same variant as last time costs one comparison
    if (last_kernel_ && v == last_variant_ && device == last_device_) return last_kernel_;
    last_variant_ = v;
    last_device_ = device;
    last_kernel_ = lookup_or_compile(v, device);
    // blocks an SM holds: column kernels size their grid by it (fit_column_grid), cooperative
    // launches cut theirs to it (fit_cooperative_grid); a block of row groups is threads * groups
    const bool cooperative = v.inner_outer && v.combine_levels == 0;
    last_blocks_per_sm_ = v.tile_x > 0 || cooperative
                              ? last_kernel_->max_active_blocks_per_sm(v.threads * v.row_groups, inner_outer_shared_partial_bytes(a_, v))
                              : 0;
    return last_kernel_;
  }

  const LoadedKernel* lookup_or_compile(const KernelVariant& v, int device) {
    std::string key = v.key() + "@" + std::to_string(device);
    auto it = variants_.find(key);
    if (it != variants_.end()) return it->second.kernel;
    Variant entry;
    std::string name = "alloy_segment" + std::to_string(id_);
    entry.source = generate_kernel(a_, v, name);
    entry.kernel = &compile_and_load(entry.source, name, device);
    return variants_.emplace(key, std::move(entry)).first->second.kernel;
  }

  KernelAnalysis a_;
  GatherFlag gather_flag_;  // kernels with gathers: out-of-range indices, checked at the run's end
  int id_;
  LaunchTarget target_;  // of target_device_, read once
  int target_device_ = -1;
  std::map<std::string, Variant> variants_;
  KernelVariant last_variant_;
  int last_device_ = -1;
  const LoadedKernel* last_kernel_ = nullptr;
  int last_blocks_per_sm_ = 0;
  // split_stages: the segment's ops and inputs, and once split, a kernel a pass
  std::vector<const Op*> ops_;
  std::vector<Value*> inputs_;
  bool split_tried_ = false;
  std::vector<std::unique_ptr<GeneratedKernel>> passes_;
  std::vector<Value*> intermediates_;
};

}  // namespace

std::unique_ptr<host_ir::SegmentExecutable> make_generated_kernel(const Segment& segment, KernelAnalysis analysis) {
  return std::make_unique<GeneratedKernel>(segment, std::move(analysis));
}

}  // namespace alloy::cuda
