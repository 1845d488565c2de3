#include "alloy/runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/gpu_plan.h"
#include "alloy/ir/printer.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/passes/propagate_sharding.h"
#include "alloy/pipeline/pipeline.h"
#include "alloy/runtime/input_binding.h"

namespace alloy {

struct FusionExecutor::Impl {
  std::unique_ptr<Fusion> fusion;
  ExecutorOptions options;
  Device device;
  // One plan serves every input signature: what depends on sizes, strides and alignment (the
  // generated kernels' variants) is chosen and cached inside the segment executables.
  std::optional<CompiledFusion> compiled;
  std::vector<std::pair<int, Tensor>> literal_values;  // value id -> 0-dim CPU tensor, made once
  // A fusion with a mesh: the team's communicators (made once, collectively); none on a rank
  // outside the mesh.
  std::shared_ptr<multidevice::Communicator> team, host_team;
  bool outside_mesh = false;

  const CompiledFusion& plan_for();
  void join_team();
  Bindings bind(const std::vector<Tensor>& inputs);
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

}  // namespace

const CompiledFusion& FusionExecutor::Impl::plan_for() {
  if (compiled) return *compiled;
  compiled = compile_fusion(*fusion, device.kind == DeviceKind::cpu ? Target::cpu : Target::cuda, {},
                            parse_pipeline_option(options.pipeline));
  for (auto& v : compiled->local->values())
    if (v->literal) literal_values.emplace_back(v->id, literal_tensor(v.get()));
  return *compiled;
}

// Every rank of the job makes the mesh's communicators together, once (a deterministic point:
// each rank reaches it with the same fusion, so none waits alone).
void FusionExecutor::Impl::join_team() {
  const auto& mesh = *plan_for().mesh;
  if (team || outside_mesh) return;
  if (auto misfit = multidevice::mesh_misfit(mesh)) user_error_at("fusion '" + fusion->name() + "'", *misfit);
  host_team = multidevice::communicator_for(mesh, Device{});
  team = device.kind == DeviceKind::cpu ? host_team : multidevice::communicator_for(mesh, device);
  outside_mesh = team == nullptr;
}

// Binds and checks the inputs. In a team, the ranks agree before any collective: a rank whose
// inputs are wrong fails, and every other rank fails with it instead of waiting for it.
Bindings FusionExecutor::Impl::bind(const std::vector<Tensor>& inputs) {
  const CompiledFusion& plan = plan_for();
  if (!team || team->size() == 1) {
    Bindings b = bind_inputs(*plan.local, inputs);
    if (plan.global) check_shardable(*plan.global, &b);
    return b;
  }
  Bindings b;
  std::exception_ptr failure;
  try {
    b = bind_inputs(*plan.local, inputs);
    check_shardable(*plan.global, &b);
  } catch (const UserError&) {
    failure = std::current_exception();
  }
  int32_t mine = failure ? team->rank() : team->size(), lowest = 0;
  host_team->all_reduce(Tensor::borrow(&mine, Device{}, DType::i32, {1}, {1}), Tensor::borrow(&lowest, Device{}, DType::i32, {1}, {1}),
                        PartialReduce::min);
  if (failure) std::rethrow_exception(failure);
  if (lowest < team->size())
    throw PeerError("rank " + std::to_string(fusion_mesh(*fusion)->at(size_t(lowest))) + " of the mesh failed before communicating");
  return b;
}

std::vector<Tensor> FusionExecutor::Impl::run(const std::vector<Tensor>& inputs) {
  const CompiledFusion& plan = plan_for();
  if (plan.mesh) {
    join_team();
    if (outside_mesh) return {};
  }
  host_ir::RunState state;
  state.bindings = bind(inputs);
  state.device = device;
  state.poison = options.poison_outputs;
  state.communicator = team.get();
  const Fusion& running = *plan.local;
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
  plan.executable->run(state);
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
  // one process per device: in a job of several processes, rank K of a host uses its GPU K
  // (ranks share GPUs round-robin where there are fewer)
  int index = 0;
  if (gpu && multidevice::process().size > 1) index = multidevice::process().local_rank % std::max(1, cuda::device_count());
  impl_->device = (gpu && options.device != DeviceChoice::cpu) ? Device{DeviceKind::cuda, index} : Device{DeviceKind::cpu, 0};
}

FusionExecutor::~FusionExecutor() = default;
FusionExecutor::FusionExecutor(FusionExecutor&&) noexcept = default;
FusionExecutor& FusionExecutor::operator=(FusionExecutor&&) noexcept = default;

std::vector<Tensor> FusionExecutor::run(const std::vector<Tensor>& inputs) { return impl_->run(inputs); }

void FusionExecutor::synchronize() {
  if (impl_->device.kind == DeviceKind::cuda) synchronize_device(impl_->device);
}

const Fusion& FusionExecutor::fusion() const { return *impl_->fusion; }

static std::vector<std::optional<Sharding>> shardings_of(const std::vector<Value*>& values) {
  std::vector<std::optional<Sharding>> out;
  for (const Value* v : values) out.push_back(v->sharding);
  return out;
}

std::vector<std::optional<Sharding>> FusionExecutor::input_shardings() {
  const CompiledFusion& plan = impl_->plan_for();
  return plan.global ? shardings_of(plan.global->inputs()) : std::vector<std::optional<Sharding>>{};
}

std::vector<std::optional<Sharding>> FusionExecutor::output_shardings() {
  const CompiledFusion& plan = impl_->plan_for();
  return plan.global ? shardings_of(plan.global->outputs()) : std::vector<std::optional<Sharding>>{};
}

Device FusionExecutor::device() const { return impl_->device; }

std::string FusionExecutor::dump(std::string_view stage, const std::vector<Tensor>*) {
  if (stage == "ir") return print_fusion(*impl_->fusion);
  if (stage.starts_with("after=")) {
    std::string_view pass = stage.substr(6);
    const auto& names = pass_names();
    if (std::find(names.begin(), names.end(), pass) == names.end()) {
      std::string known;
      for (auto n : names) known += (known.empty() ? "" : ", ") + std::string(n);
      user_error_at("--dump", "unknown pass '", pass, "'; expected one of: ", known);
    }
    if (is_program_pass(pass)) {
      for (auto& [name, text] : impl_->plan_for().program_after)
        if (name == pass) return text;
    }
    std::string out;
    compile_fusion(*impl_->fusion, impl_->device.kind == DeviceKind::cpu ? Target::cpu : Target::cuda,
                   [&](std::string_view name, const Fusion* result) {
                     if (name == pass) out = result ? print_fusion(*result) : "(skipped: " + std::string(name) + " does not apply)\n";
                   });
    return out;
  }
  const CompiledFusion& plan = impl_->plan_for();
  if (stage == "sharding") return plan.global ? sharding_report(*plan.global) : "no mesh: the fusion runs on one device\n";
  if (stage == "local") return print_fusion(*plan.local);
  if (stage == "segments") return plan.executable->program.segmentation.str();
  if (stage == "program") return plan.executable->program.str();
  if (stage == "cuda") {
    std::string out;
    for (auto& s : plan.executable->segments) out += s->source();
    return out.empty() ? "no generated CUDA code (the plan runs on " + impl_->device.str() + ")\n" : out;
  }
  user_error_at("--dump", "unknown stage '", stage, "'; expected ir, after=PASS, sharding, local, segments, program or cuda");
}

Tensor to_cpu(const Tensor& t) {
  if (t.device().kind == DeviceKind::cpu) return t;
  return download(t);
}

}  // namespace alloy
