#include "alloy/runtime/executor.h"

#include <chrono>
#include <unordered_map>

#include "alloy/backend/cpu/cpu_executable.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/gpu_plan.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/ir/printer.h"
#include "alloy/runtime/input_binding.h"
#include "alloy/segment/segmenter.h"

namespace alloy {

struct FusionExecutor::Impl {
  std::unique_ptr<Fusion> fusion;
  ExecutorOptions options;
  Device device;
  // One plan serves every input signature: what depends on sizes, strides and alignment (the
  // generated kernels' variants) is chosen and cached inside the segment executables.
  std::unique_ptr<host_ir::Executable> plan;
  std::unique_ptr<Fusion> lowered;  // the fusion the GPU plan runs: composites decomposed
  std::vector<std::pair<int, Tensor>> literal_values;  // value id -> 0-dim CPU tensor, made once

  const host_ir::Executable& plan_for(const std::vector<Tensor>& inputs);
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
};

namespace {

Tensor literal_tensor(const Value* v) {
  Tensor t = Tensor::empty(v->dtype(), {});
  const Literal& lit = *v->literal;
  if (lit.kind == Literal::Kind::real) store_double(t.data(), v->dtype(), 0, lit.f);
  else store_int(t.data(), v->dtype(), 0, lit.kind == Literal::Kind::integer ? lit.i : int64_t(lit.b));
  return t;
}

std::unique_ptr<host_ir::Executable> build_cpu_plan(const Fusion& fusion) {
  auto plan = std::make_unique<host_ir::Executable>();
  plan->program = host_ir::lower_to_program(segment_fusion(fusion, Target::cpu));
  for (const Segment& s : plan->program.segmentation.segments) plan->segments.push_back(make_cpu_executable(s));
  return plan;
}

}  // namespace

const host_ir::Executable& FusionExecutor::Impl::plan_for(const std::vector<Tensor>&) {
  if (plan) return *plan;
  if (device.kind == DeviceKind::cpu) {
    plan = build_cpu_plan(*fusion);
  } else {
    lowered = decompose_composites(*fusion);
    plan = build_gpu_plan(*lowered);
  }
  for (auto& v : (lowered ? *lowered : *fusion).values())
    if (v->literal) literal_values.emplace_back(v->id, literal_tensor(v.get()));
  return *plan;
}

std::vector<Tensor> FusionExecutor::Impl::run(const std::vector<Tensor>& inputs) {
  host_ir::RunState state;
  state.bindings = bind_inputs(*fusion, inputs);
  state.device = device;
  state.poison = options.poison_outputs;
  const host_ir::Executable& executable = plan_for(inputs);
  const Fusion& running = lowered ? *lowered : *fusion;
  state.values.resize(running.values().size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* declared = running.inputs()[i];
    Tensor t = inputs[i];
    // Scalars stay on the host (they are passed by value); CPU tensors are copied to the device.
    if (!declared->is_scalar() && t.device() != device) {
      if (t.device().kind != DeviceKind::cpu)
        user_error_at("input '" + declared->name + "'", "is on ", t.device().str(), "; expected a tensor on ", device.str(),
                      " or on the cpu");
      t = upload(t, device);
    }
    state.values[declared->id] = t;
  }
  for (auto& [id, tensor] : literal_values) state.values[id] = tensor;
  executable.run(state);
  std::vector<Tensor> outputs;
  for (Value* out : running.outputs()) outputs.push_back(state.at(out));
  return outputs;
}

FusionExecutor::FusionExecutor(std::unique_ptr<Fusion> fusion, ExecutorOptions options)
    : impl_(std::make_unique<Impl>()) {
  ALLOY_CHECK(fusion != nullptr, "null fusion");
  impl_->fusion = std::move(fusion);
  impl_->options = options;
  bool gpu = cuda::cuda_available();
  if (options.device == DeviceChoice::cuda && !gpu)
    user_error_at("--device cuda", "no GPU found (", cuda::cuda_unavailable_reason(), "); use --device cpu or auto");
  impl_->device = (gpu && options.device != DeviceChoice::cpu) ? Device{DeviceKind::cuda, 0} : Device{DeviceKind::cpu, 0};
}

FusionExecutor::~FusionExecutor() = default;
FusionExecutor::FusionExecutor(FusionExecutor&&) noexcept = default;
FusionExecutor& FusionExecutor::operator=(FusionExecutor&&) noexcept = default;

std::vector<Tensor> FusionExecutor::run(const std::vector<Tensor>& inputs) { return impl_->run(inputs); }

void FusionExecutor::synchronize() {
  if (impl_->device.kind == DeviceKind::cuda) synchronize_device(impl_->device);
}

const Fusion& FusionExecutor::fusion() const { return *impl_->fusion; }

Device FusionExecutor::device() const { return impl_->device; }

std::string FusionExecutor::dump(std::string_view stage, const std::vector<Tensor>* inputs) {
  if (stage == "ir") return print_fusion(*impl_->fusion);
  const host_ir::Executable& plan = impl_->plan_for(inputs ? *inputs : std::vector<Tensor>{});
  if (stage == "segments") return plan.program.segmentation.str();
  if (stage == "program") return plan.program.str();
  if (stage == "cuda") {
    std::string out;
    for (auto& s : plan.segments) out += s->source();
    return out.empty() ? "no generated CUDA code (the plan runs on " + impl_->device.str() + ")\n" : out;
  }
  user_error_at("--dump", "unknown stage '", stage, "'; expected ir, segments, program or cuda");
}

Tensor to_cpu(const Tensor& t) {
  if (t.device().kind == DeviceKind::cpu) return t;
  return download(t);
}

}  // namespace alloy
