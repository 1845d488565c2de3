#include "alloy/runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include "alloy/backend/backend.h"
#include "alloy/common/settings.h"
#include "alloy/ir/printer.h"
#include "alloy/multidevice/agreement.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/passes/sharding/propagate_sharding.h"
#include "alloy/pipeline/pipeline.h"
#include "alloy/runtime/input_binding.h"
#include "alloy/runtime/trace_file.h"
#include "alloy/runtime/tune/machine_costs.h"

namespace alloy {

struct FusionExecutor::Impl {
  std::unique_ptr<Fusion> fusion;
  ExecutorOptions options;
  Device device;
  // Per output: the input it updates in place (`return y -> x`), or -1; found once, not per run
  // (an optimizer step over a model's parameters has hundreds).
  std::vector<int> alias_inputs;
  // A compiled plan and what it runs with. One plan serves every input signature of a fusion
  // without a mesh: what depends on sizes, strides and alignment (the generated kernels' variants)
  // is chosen and cached inside the segment executables. A fusion with a mesh and symbolic sizes
  // decides its sharding per binding (the cost rule counts the bound sizes): one plan per decision.
  struct Plan {
    CompiledFusion compiled;
    std::vector<std::pair<int, Tensor>> literal_values;  // value id -> 0-dim CPU tensor, made once
    std::string decision;  // pipeline's sharding_decision (empty without a mesh)
    Bindings sizes;        // the sizes it was first decided at (none for the first plan)
  };
  // plans[0] is decided where no size is bound: it gives the inputs' and outputs' layouts (the
  // same in every plan) and binds the first run; then one plan per new decision. A deque: a
  // plan's address stays.
  std::deque<Plan> plans;
  // Set once plans[0] is complete: runs after the first read it without taking plan_mutex.
  std::atomic<const Plan*> ready{nullptr};
  std::atomic<const Plan*> last_plan{nullptr};  // the plan of the last run (dumps without inputs)
  bool per_binding = false;                     // a mesh and symbolic sizes: decided per binding
  std::vector<std::string> input_symbols;       // the key of plan_of_sizes, in this order
  std::map<std::vector<int64_t>, const Plan*> plan_of_sizes;  // under plan_mutex
  std::mutex plan_mutex;  // building plans and joining the team
  std::mutex run_mutex;   // runs that take turns (see the header)
  // A fusion with a mesh: the team's communicators (made once, collectively); none on a rank
  // outside the mesh.
  std::shared_ptr<multidevice::Communicator> team, host_team;
  bool outside_mesh = false;
  // --pipeline auto's choices by pair shape (the machine's costs are fixed once measured or read,
  // so a cached run's Choose is a lookup, not the model and its text; under run_mutex)
  std::map<host_ir::PairShape, host_ir::PipelineChoice> pipeline_choices;

  Target target() const { return device.kind == DeviceKind::cpu ? Target::cpu : Target::cuda; }
  const Plan& first_plan();
  const Plan& plan_for(const Bindings& sizes);
  Plan& build_plan(const Bindings& sizes);  // under plan_mutex
  void join_team();
  // A run's sizes and the plan they decide (none on a rank outside the mesh).
  struct Bound {
    Bindings sizes;
    const Plan* plan = nullptr;
  };
  Bound bind(const std::vector<Tensor>& inputs, const RunOptions& run);
  Bound bind_checked(const std::vector<Tensor>& inputs);
  Bound agree_and_bind(const std::vector<Tensor>& inputs, const RunOptions& run, std::exception_ptr early_failure = nullptr);
  [[noreturn]] void fail_run(std::exception_ptr failure);
  // Index errors in a sharded run (RunState::defer_index_errors): a fusion with a gather, run by a
  // job of several processes, ends every run with one word from each rank of the job; where any
  // rank's end checks failed, the job agrees on it (the failing ranks rethrow, the others throw
  // PeerError), so the job reports it once and exits 1 instead of aborting.
  bool agrees_on_index_errors();
  std::optional<bool> has_gather;  // (set once, by a run of a fusion with a mesh: under run_mutex)
  void agree_on_index_errors(std::exception_ptr failure);
  std::string rank_name(int rank);  // "rank 1 of the mesh", "rank 3 of the job"
  // The record last agreed (ExecutorOptions::Agreement::on_change), declared below, and the
  // facts a run agrees on: the plan's fixed ones first (fixed_count of them, made once), then
  // each run's sizes and shapes, rewritten in place (runs of a fusion with a mesh take turns under
  // run_mutex), so a cached run copies none of the fixed ones (the fusion's printed text among them).
  std::vector<multidevice::JobFact> facts;
  size_t fixed_count = 0;
  std::optional<multidevice::AgreementRecord> last_agreed;
  void check_sizes(const Plan& plan, const Bindings& b);
  std::mutex sizes_mutex;
  std::optional<Bindings> sizes_checked;  // the last sizes check_sizes accepted
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const RunOptions& run);
  std::vector<Tensor> run_locked(const std::vector<Tensor>& inputs, const RunOptions& run);
  // A traced run's spans, gathered from every rank where the run's ranks agreed to trace it.
  void fill_trace(std::vector<host_ir::Span> spans, RunTrace& trace);
  std::string dump_stage(std::string_view stage, const Plan* plan, const Bindings& sizes);
};

namespace {

Tensor literal_tensor(const Value* v) {
  Tensor t = Tensor::empty(v->dtype(), {});
  const Literal& lit = *v->literal;
  if (lit.kind == Literal::Kind::real) store_double(t.data(), v->dtype(), 0, lit.f);
  else store_int(t.data(), v->dtype(), 0, lit.kind == Literal::Kind::integer ? lit.i : int64_t(lit.b));
  return t;
}

// An in-place update (`return y -> x`): writes the run's `result` into the caller's input tensor
// `target` after everything the run enqueued (the same stream), and returns `target`.
Tensor write_in_place(const Tensor& result, const Tensor& target, const Value& output, const Value& input) {
  std::string place = "output '" + output.name + "' -> input '" + input.name + "'";
  if (result.sizes() != target.sizes())
    user_error_at(place, "the output is ", result.str(), " but the input is ", target.str(), "; expected the same shape");
  if (result.buffer() == target.buffer() && result.data() == target.data() && result.strides() == target.strides()) return target;
  if (target.device().kind == DeviceKind::cpu) {
    Tensor source = packed_cpu(to_cpu(result));
    if (source.buffer() == target.buffer()) source = cpu_copy(source);  // a view of the input itself: read it all before writing
    backend::device_runtime(DeviceKind::cpu).copy(target, source);
    return target;
  }
  if (!target.is_contiguous())
    user_error_at(place, "an input updated in place on ", target.device().str(), " must be contiguous; found strides of ", target.str());
  const host_ir::DeviceRuntime& device = backend::device_runtime(target.device().kind);
  Tensor source = result;
  if (!source.is_contiguous() || source.buffer() == target.buffer() || source.device() != target.device())
    source = device.to_device(to_cpu(result), target.device().index);  // rare: a view, or an output of another device
  device.copy(target, source);
  return target;
}

// The bytes a strided view can touch, [first, last): from its lowest to its highest element (an
// empty view touches none). Two views overlap when their spans meet on one device: conservative
// for interleaved views (x[0::2] and x[1::2] share no element but their spans meet).
struct ByteSpan {
  Device device;
  uintptr_t first = 0, last = 0;
  bool meets(const ByteSpan& o) const { return device == o.device && first < o.last && o.first < last; }
};

ByteSpan span_of(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !t.data()) return {t.device()};
  int64_t low = 0, high = 0;
  for (int axis = 0; axis < t.dim(); ++axis) {
    int64_t reach = t.strides()[size_t(axis)] * (t.sizes()[size_t(axis)] - 1);
    (reach < 0 ? low : high) += reach;
  }
  int64_t item = dtype_size(t.dtype());
  auto base = reinterpret_cast<uintptr_t>(t.data());
  return {t.device(), base + uintptr_t(low * item), base + uintptr_t((high + 1) * item)};
}

// The aliasing rule of in-place outputs: a target (an input that `return y -> x` writes) shares no
// byte with any other input, target or not, and no two of its elements share an address (a zero
// stride on an axis of size > 1). Otherwise the result would depend on the order of the writes,
// or an input read for one output would change under another. A target on a GPU is contiguous.
// Checked when the inputs are bound, before the run: a kernel may write a target in place
// (segment/in_place.h), and in a job of several processes every rank learns of a failure.
// Whether some target's bytes meet another input's, in O(n log n) for the hundreds of targets of an
// optimizer step over a model's parameters (a pair by pair check took milliseconds a run): the
// spans sorted by their first byte, a span meets an earlier one exactly where it starts before the
// furthest end so far, of any span where it is a target and of a target where it is not.
bool any_target_overlaps(const std::vector<ByteSpan>& spans, const std::vector<bool>& is_target) {
  std::vector<size_t> order;
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i].last > spans[i].first) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const ByteSpan &x = spans[a], &y = spans[b];
    if (!(x.device == y.device))
      return std::make_pair(int(x.device.kind), x.device.index) < std::make_pair(int(y.device.kind), y.device.index);
    return x.first < y.first;
  });
  uintptr_t any_end = 0, target_end = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const ByteSpan& s = spans[order[k]];
    if (k > 0 && !(spans[order[k - 1]].device == s.device)) any_end = target_end = 0;
    if (s.first < (is_target[order[k]] ? any_end : target_end)) return true;
    any_end = std::max(any_end, s.last);
    if (is_target[order[k]]) target_end = std::max(target_end, s.last);
  }
  return false;
}

// Per output of `fusion`: the index of the input it updates in place, or -1.
std::vector<int> alias_input_indices(const Fusion& fusion) {
  std::unordered_map<const Value*, int> index;
  for (size_t i = 0; i < fusion.inputs().size(); ++i) index[fusion.inputs()[i]] = int(i);
  std::vector<int> out(fusion.outputs().size(), -1);
  for (size_t i = 0; i < out.size() && i < fusion.output_aliases().size(); ++i)
    if (const Value* target = fusion.output_aliases()[i]) out[i] = index.at(target);
  return out;
}

void check_in_place_targets(const Fusion& fusion, const std::vector<int>& alias_inputs, const std::vector<Tensor>& inputs) {
  const std::vector<Value*>& params = fusion.inputs();
  std::vector<ByteSpan> spans(params.size());
  std::vector<bool> is_target(params.size(), false);
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i]->is_scalar()) spans[i] = span_of(inputs.at(i));
  for (int t : alias_inputs)
    if (t >= 0) is_target[size_t(t)] = true;
  const bool overlaps = any_target_overlaps(spans, is_target);  // which ones, and the message, below
  for (size_t i = 0; i < fusion.outputs().size(); ++i) {
    if (alias_inputs[i] < 0) continue;
    const Value* target = fusion.output_aliases()[i];
    size_t t = size_t(alias_inputs[i]);
    const Tensor& written = inputs.at(t);
    std::string place = "input '" + target->name + "'";
    std::string update = "updated in place (`return " + fusion.outputs()[i]->name + " -> " + target->name + "`)";
    if (written.numel() == 0) continue;  // nothing is written (NumPy gives an empty array zero strides)
    for (int axis = 0; axis < written.dim(); ++axis)
      if (written.strides()[size_t(axis)] == 0 && written.sizes()[size_t(axis)] > 1)
        user_error_at(place, "is ", update, " but has stride 0 on axis ", axis, " of size ", written.sizes()[size_t(axis)],
                      " (a broadcast or expanded view, ", written.str(), "): several elements would be written to one "
                      "address; pass a tensor of its own memory (a copy)");
    if (written.device().kind != DeviceKind::cpu && !written.is_contiguous())
      user_error_at(place, "an input updated in place on ", written.device().str(), " must be contiguous; found strides of ", written.str());
    if (!overlaps) continue;
    ByteSpan span = spans[t];
    for (size_t other = 0; other < params.size(); ++other) {
      if (other == t || params[other]->is_scalar() || !span.meets(spans[other])) continue;
      bool also_written = std::find(fusion.output_aliases().begin(), fusion.output_aliases().end(), params[other]) !=
                          fusion.output_aliases().end();
      user_error_at(place, "is ", update, " but its memory overlaps input '", params[other]->name, "'",
                    also_written ? ", which is also updated in place" : "",
                    " (two views of one array): an in-place target must share no memory with another input; "
                    "pass a copy of one of them");
    }
  }
}

// A copy of `t` in memory of its own, on t's device (a device tensor goes through the host: this
// is for the rare output that views an input about to be overwritten).
Tensor own_copy(const Tensor& t) {
  if (t.device().kind != DeviceKind::cpu) return backend::device_runtime(t.device().kind).to_device(to_cpu(t), t.device().index);
  return cpu_copy(t);
}

}  // namespace

FusionExecutor::Impl::Plan& FusionExecutor::Impl::build_plan(const Bindings& sizes) {
  CompileOptions compile_options;
  compile_options.program = parse_pipeline_option(options.pipeline);
  compile_options.sizes = sizes;
  Plan plan{compile_fusion(*fusion, target(), compile_options), {}, {}, sizes};
  for (auto& v : plan.compiled.local->values())
    if (v->literal) plan.literal_values.emplace_back(v->id, literal_tensor(v.get()));
  if (plan.compiled.global) plan.decision = sharding_report(*plan.compiled.global);
  plans.push_back(std::move(plan));
  return plans.back();
}

const FusionExecutor::Impl::Plan& FusionExecutor::Impl::first_plan() {
  if (const Plan* plan = ready.load(std::memory_order_acquire)) return *plan;
  std::lock_guard<std::mutex> lock(plan_mutex);
  if (!plans.empty()) return plans.front();  // another thread built it while this one waited
  const Plan& plan = build_plan({});
  input_symbols = plan.compiled.local->input_symbols();
  per_binding = plan.compiled.mesh && !input_symbols.empty();
  // the hash of the fusion as parsed and printed stands for its text (the same on every rank
  // that parsed the same file, whatever its spacing and comments)
  std::string text = print_fusion(*fusion);
  facts = {{"fusion", "'" + fusion->name() + "' (printed text hash " + std::to_string(std::hash<std::string>{}(text)) + ")", false, text},
                 {"device kind", device.kind == DeviceKind::cpu ? "cpu" : "cuda"},
                 {"pipeline", options.pipeline},
                 {"poison_outputs", options.poison_outputs ? "on" : "off"}};
  for (auto& [name, value] : options.job_facts) facts.push_back({name, value});
  fixed_count = facts.size();
  ready.store(&plan, std::memory_order_release);
  return plan;
}

// The plan for a run's sizes: the one its sharding decision names (the cost rule at these sizes),
// compiled at the first sizes that decide so. Sizes seen before are a map look-up; the decision
// itself runs the sharding passes alone (no compilation) once per new set of sizes.
const FusionExecutor::Impl::Plan& FusionExecutor::Impl::plan_for(const Bindings& sizes) {
  const Plan& first = first_plan();
  if (!per_binding) return first;
  std::vector<int64_t> key;
  key.reserve(input_symbols.size());
  for (const std::string& symbol : input_symbols) {
    auto it = sizes.find(symbol);
    key.push_back(it == sizes.end() ? -1 : it->second);
  }
  std::lock_guard<std::mutex> lock(plan_mutex);
  if (auto it = plan_of_sizes.find(key); it != plan_of_sizes.end()) return *it->second;
  std::string decision = sharding_decision(*fusion, target(), sizes);
  const Plan* plan = nullptr;
  for (const Plan& p : plans)
    if (p.decision == decision) plan = &p;
  if (!plan) plan = &build_plan(sizes);
  if (plan_of_sizes.size() >= 4096) plan_of_sizes.clear();  // sizes that change at every run: a bounded map
  plan_of_sizes.emplace(std::move(key), plan);
  return *plan;
}

// Every rank of the job makes the mesh's communicators together, once (a deterministic point:
// each rank reaches it with the same fusion, so none waits alone).
void FusionExecutor::Impl::join_team() {
  const auto& mesh = *first_plan().compiled.mesh;
  std::lock_guard<std::mutex> lock(plan_mutex);
  if (team || outside_mesh) return;
  if (auto misfit = multidevice::mesh_misfit(mesh)) user_error_at("fusion '" + fusion->name() + "'", *misfit);
  host_team = multidevice::communicator_for(mesh, Device{});
  team = device.kind == DeviceKind::cpu ? host_team : multidevice::communicator_for(mesh, device, &backend::device_runtime(device.kind));
  outside_mesh = team == nullptr;
}

// Every value's size for these bindings can run (checked once per new set of sizes: the cached
// path of repeated sizes stays a map comparison).
void FusionExecutor::Impl::check_sizes(const Plan& plan, const Bindings& b) {
  {
    std::lock_guard<std::mutex> lock(sizes_mutex);
    if (sizes_checked && *sizes_checked == b) return;
  }
  int64_t memory = backend::device_runtime(device.kind).memory_bytes(device.index);
  check_run_sizes(*plan.compiled.local, b, memory, device.str(), device.kind == DeviceKind::cpu);
  std::lock_guard<std::mutex> lock(sizes_mutex);
  sizes_checked = b;
}

// Every plan declares the same inputs (their layouts do not depend on the sizes), so the last
// run's plan binds them; a plan of another decision binds again (its derived sizes).
FusionExecutor::Impl::Bound FusionExecutor::Impl::bind_checked(const std::vector<Tensor>& inputs) {
  const Plan* last = last_plan.load(std::memory_order_acquire);
  const Plan& guess = last ? *last : first_plan();
  Bindings b = bind_inputs(*guess.compiled.local, inputs);
  check_in_place_targets(*fusion, alias_inputs, inputs);
  const Plan& plan = plan_for(b);
  if (&plan != &guess) b = bind_inputs(*plan.compiled.local, inputs);
  if (plan.compiled.global) check_shardable(*plan.compiled.global, &b);
  check_sizes(plan, b);
  return {std::move(b), &plan};
}

FusionExecutor::Impl::Bound FusionExecutor::Impl::bind(const std::vector<Tensor>& inputs, const RunOptions& run) {
  bool mesh = first_plan().compiled.mesh.has_value();
  if (mesh && multidevice::process().size > 1) return agree_and_bind(inputs, run);
  if (mesh) join_team();
  return bind_checked(inputs);
}

namespace {

std::string shape_fact(const Tensor& t) {
  if (!t.defined()) return "none";
  std::string out(dtype_name(t.dtype()));
  out += '[';
  for (size_t i = 0; i < t.sizes().size(); ++i) out += (i ? ", " : "") + std::to_string(t.sizes()[i]);
  return out + (t.is_contiguous() ? "] contiguous" : "] strided");
}

}  // namespace

// The job agreement (multidevice/agreement.h) of a run in a job of several processes, before any
// collective, on every rank of the job (outside the mesh too, which binds nothing and returns no
// outputs): this rank binds and checks its inputs, then every rank learns whether any failed and
// whether all were given the same fusion, options, sizes and local shapes. Uneven parts (ranks
// given parts of different sizes) are such a difference, so every collective's byte count is the
// same on every rank of the team.
// `early_failure`: the caller's own check of this run's inputs failed (fail_run): the run agrees
// as failed, so its peers end with a PeerError instead of waiting for it.
FusionExecutor::Impl::Bound FusionExecutor::Impl::agree_and_bind(const std::vector<Tensor>& inputs, const RunOptions& run,
                                                                 std::exception_ptr early_failure) {
  const CompiledFusion& plan = first_plan().compiled;  // (every plan declares the same inputs)
  const std::vector<int64_t>& mesh = *plan.mesh;
  bool in_mesh = std::find(mesh.begin(), mesh.end(), int64_t(multidevice::process().rank)) != mesh.end();
  Bound bound;
  const Bindings& b = bound.sizes;
  std::exception_ptr failure = early_failure;
  if (early_failure) {
    // nothing bound: the facts below are not read (a failure is told before any fact)
  } else if (in_mesh) {
    try {
      bound = bind_checked(inputs);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  facts.resize(fixed_count);
  // a traced run ends with a gather of every rank's spans: every rank of the job traces it, or none
  facts.push_back({"trace", run.trace ? "on" : "off"});
  facts.push_back({"call", run.purpose});
  std::string sizes;
  if (in_mesh && !failure)
    for (const std::string& symbol : plan.local->input_symbols())
      if (auto it = b.find(symbol); it != b.end()) sizes += (sizes.empty() ? "" : " ") + symbol + "=" + std::to_string(it->second);
  facts.push_back({"bound sizes", sizes, true});
  const auto& declared = plan.local->inputs();
  for (size_t i = 0; i < declared.size(); ++i)
    facts.push_back({"local shape of input '" + declared[i]->name + "'",
                     in_mesh && !failure && i < inputs.size() ? shape_fact(inputs[i]) : "", true});
  multidevice::AgreementRecord record = multidevice::make_record(facts, in_mesh);
  // on_change: skipped where no rank's record changed and none failed, which the ranks learn
  // together from one gather of the record (a rank agreeing alone would wait for the others
  // forever; a rank of every_run, or one that left, sends the same record there)
  const std::string what = "fusion '" + fusion->name() + "'";
  auto name = [&](int rank) { return rank_name(rank); };
  bool skip = options.agreement == ExecutorOptions::Agreement::on_change &&
              !multidevice::agree_on_change(record, !(last_agreed == record), failure, what, name);
  if (!skip) {
    multidevice::agree_with_job(facts, in_mesh, failure, what, name);
    last_agreed = record;
  }
  join_team();  // (collective on the first run only; every rank reaches it after agreeing)
  return bound;
}

std::string FusionExecutor::Impl::rank_name(int rank) {
  const std::vector<int64_t>& mesh = *first_plan().compiled.mesh;
  bool of_mesh = std::find(mesh.begin(), mesh.end(), int64_t(rank)) != mesh.end();
  return "rank " + std::to_string(rank) + (of_mesh ? " of the mesh" : " of the job");
}

bool FusionExecutor::Impl::agrees_on_index_errors() {
  if (multidevice::process().size == 1 || !first_plan().compiled.mesh) return false;
  if (!has_gather)
    has_gather = std::any_of(fusion->ops().begin(), fusion->ops().end(), [](const auto& op) { return op->kind == OpKind::gather; });
  return *has_gather;
}

void FusionExecutor::Impl::agree_on_index_errors(std::exception_ptr failure) {
  if (!multidevice::any_rank(failure != nullptr)) return;
  multidevice::agree_with_job({}, !outside_mesh, failure, "fusion '" + fusion->name() + "'", [&](int rank) { return rank_name(rank); });
  internal_error("agree_on_index_errors: the agreement did not report the failure");
}

void FusionExecutor::Impl::fail_run(std::exception_ptr failure) {
  if (multidevice::process().size == 1 || !first_plan().compiled.mesh) std::rethrow_exception(failure);
  std::lock_guard<std::mutex> lock(run_mutex);
  agree_and_bind({}, RunOptions{}, failure);  // rethrows `failure` once the others learnt of it
  internal_error("fail_run: the agreement did not report the failure");
}

std::vector<Tensor> FusionExecutor::Impl::run(const std::vector<Tensor>& inputs, const RunOptions& run) {
  // a mesh this job cannot hold, said before the passes check sizes against it (inspecting the
  // shardings of such a fusion stays possible: only running it is an error)
  if (!ready.load(std::memory_order_acquire))
    if (auto mesh = fusion_mesh(*fusion))
      if (auto misfit = multidevice::mesh_misfit(*mesh)) user_error_at("fusion '" + fusion->name() + "'", *misfit);
  if (first_plan().compiled.mesh || device.kind == DeviceKind::cuda) {
    std::lock_guard<std::mutex> lock(run_mutex);
    return run_locked(inputs, run);
  }
  return run_locked(inputs, run);
}

void FusionExecutor::Impl::fill_trace(std::vector<host_ir::Span> spans, RunTrace& trace) {
  if (first_plan().compiled.mesh && multidevice::process().size > 1) trace.ranks = gather_job_spans(spans);
  else trace.ranks = {{multidevice::process().rank, std::move(spans)}};
}

std::vector<Tensor> FusionExecutor::Impl::run_locked(const std::vector<Tensor>& inputs, const RunOptions& run) {
  RunTrace* trace = run.trace;
  host_ir::RunState state;
  Bound bound = bind(inputs, run);
  const bool agree_on_errors = agrees_on_index_errors();
  if (outside_mesh) {
    if (trace) fill_trace({}, *trace);  // (the gather's other side: this rank ran nothing)
    if (agree_on_errors) agree_on_index_errors(nullptr);
    return {};
  }
  const Plan& chosen = *bound.plan;
  last_plan.store(&chosen, std::memory_order_release);
  const CompiledFusion& plan = chosen.compiled;
  state.bindings = std::move(bound.sizes);
  state.device = device;
  state.poison = options.poison_outputs;
  state.team = team.get();
  if (team) {
    // --pipeline auto (Choose nodes): every rank reaches a Choose at the same point of the same
    // program, measures (or reads) the same numbers there, and so picks the same variant
    state.choose = [this](const host_ir::PairShape& shape) -> const host_ir::PipelineChoice& {
      auto it = pipeline_choices.find(shape);
      if (it == pipeline_choices.end())
        it = pipeline_choices.emplace(shape, host_ir::choose_pipeline(machine_costs(*team, *host_team, device), shape)).first;
      return it->second;
    };
  }
  const Fusion& running = *plan.local;
  state.values.resize(running.values().size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* declared = running.inputs()[i];
    Tensor t = inputs[i];
    // Scalars are read on the host (kernels take them by value): one given on a device (a CUDA
    // 0-dim tensor for a learning rate) is copied to the host, which waits for its stream. CPU
    // tensors are copied to the device.
    if (declared->is_scalar() && t.device().kind != DeviceKind::cpu) {
      t = backend::device_runtime(t.device().kind).to_host(t);
    } else if (!declared->is_scalar() && t.device() != device) {
      if (t.device().kind != DeviceKind::cpu)
        user_error_at("input '" + declared->name + "'", "is on ", t.device().str(), "; expected a tensor on ", device.str(),
                      " or on the cpu");
      t = backend::device_runtime(device.kind).to_device(t, device.index);
    }
    state.values[declared->id] = t;
  }
  for (auto& [id, tensor] : chosen.literal_values) state.values[id] = tensor;
  std::optional<host_ir::TraceRecorder> recorder;
  if (trace) {
    recorder.emplace(backend::device_runtime(device.kind).trace_clock(device.index), fusion->name());
    state.trace = &*recorder;
  }
  state.defer_index_errors = agree_on_errors;
  if (agree_on_errors) {
    std::exception_ptr failure;
    try {
      plan.executable->run(state);
    } catch (const UserError& e) {
      if (!state.in_end_checks) throw;  // (before the run's end: a rank may wait for this one)
      // (positions and sizes are of the part of the values this rank holds)
      failure = std::make_exception_ptr(
          UserError(std::string(e.what()) + " (on " + rank_name(multidevice::process().rank) + ", in the part of the values it holds)"));
    }
    agree_on_index_errors(failure);
  } else {
    plan.executable->run(state);
  }
  if (trace) fill_trace(recorder->finish(), *trace);
  std::vector<Tensor> outputs;
  for (Value* out : running.outputs()) outputs.push_back(state.at(out));
  const std::vector<Value*>& aliases = fusion->output_aliases();
  if (std::none_of(aliases.begin(), aliases.end(), [](const Value* v) { return v != nullptr; })) return outputs;
  auto target_of = [&](size_t i) -> const Tensor* { return alias_inputs[i] < 0 ? nullptr : &inputs.at(size_t(alias_inputs[i])); };
  std::vector<ByteSpan> target_spans;
  for (size_t j = 0; j < outputs.size(); ++j)
    if (const Tensor* target = target_of(j)) target_spans.push_back(span_of(*target));
  // (the aliasing rule was checked when the inputs were bound)
  // Every output is its value before any in-place write: one that shares memory with an input
  // about to be overwritten (`permute(x)` or `x` itself beside `return y -> x`, or the other
  // half of a swap) is copied first. An in-place result that is its target already writes nothing:
  // its kernel wrote the target (segment/in_place.h, which also keeps every output that views a
  // target off that path). Memory is compared by address, not by buffer, so the rule holds
  // however the memory came.
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor* own = target_of(i);
    if (own && outputs[i].data() == own->data() && outputs[i].strides() == own->strides() && outputs[i].device() == own->device())
      continue;
    ByteSpan span = span_of(outputs[i]);
    if (std::any_of(target_spans.begin(), target_spans.end(), [&](const ByteSpan& target) { return span.meets(target); }))
      outputs[i] = own_copy(outputs[i]);
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (const Tensor* target = target_of(i)) outputs[i] = write_in_place(outputs[i], *target, *fusion->outputs()[i], *aliases[i]);
  return outputs;
}

FusionExecutor::FusionExecutor(std::unique_ptr<Fusion> fusion, ExecutorOptions options)
    : impl_(std::make_unique<Impl>()) {
  ALLOY_CHECK(fusion != nullptr, "null fusion");
  impl_->fusion = std::move(fusion);
  impl_->alias_inputs = alias_input_indices(*impl_->fusion);
  impl_->options = options;
  const host_ir::DeviceRuntime& cuda = backend::device_runtime(DeviceKind::cuda);
  bool gpu = cuda.available();
  if (options.device == DeviceChoice::cuda && !gpu)
    user_error_at("--device cuda", "no GPU found (", cuda.unavailable_reason(), "); use --device cpu or auto");
  // one process per device: in a job of several processes, rank K of a host uses its GPU K
  // (ranks share GPUs round-robin where there are fewer)
  int index = 0;
  if (gpu && multidevice::process().size > 1) index = multidevice::process().local_rank % std::max(1, cuda.device_count());
  if (options.device_index >= 0 && gpu && options.device != DeviceChoice::cpu) {
    if (options.device_index >= cuda.device_count())
      user_error_at("device cuda:" + std::to_string(options.device_index), "does not exist; this machine has ",
                    cuda.device_count(), " CUDA device(s)");
    index = options.device_index;
  }
  impl_->device = (gpu && options.device != DeviceChoice::cpu) ? Device{DeviceKind::cuda, index} : Device{DeviceKind::cpu, 0};
}

FusionExecutor::~FusionExecutor() = default;
FusionExecutor::FusionExecutor(FusionExecutor&&) noexcept = default;
FusionExecutor& FusionExecutor::operator=(FusionExecutor&&) noexcept = default;

std::vector<Tensor> FusionExecutor::run(const std::vector<Tensor>& inputs) { return impl_->run(inputs, RunOptions{}); }

void FusionExecutor::fail_run(std::exception_ptr failure) { impl_->fail_run(failure); }

std::vector<Tensor> FusionExecutor::run(const std::vector<Tensor>& inputs, const RunOptions& run_options) {
  if (!run_options.stream || impl_->device.kind != DeviceKind::cuda) return impl_->run(inputs, run_options);
  // Every stage of the run asks for the thread's current stream: make it the caller's.
  auto scope = backend::device_runtime(impl_->device.kind).use_stream(impl_->device.index, *run_options.stream);
  return impl_->run(inputs, run_options);
}

int FusionExecutor::plans_built() const {
  std::lock_guard<std::mutex> lock(impl_->plan_mutex);
  return int(impl_->plans.size());
}

void FusionExecutor::synchronize() {
  backend::device_runtime(impl_->device.kind).synchronize(impl_->device.index);
}

const Fusion& FusionExecutor::fusion() const { return *impl_->fusion; }

static std::vector<std::optional<Sharding>> shardings_of(const std::vector<Value*>& values) {
  std::vector<std::optional<Sharding>> out;
  for (const Value* v : values) out.push_back(v->sharding);
  return out;
}

std::vector<std::optional<Sharding>> FusionExecutor::input_shardings() {
  const CompiledFusion& plan = impl_->first_plan().compiled;
  return plan.global ? shardings_of(plan.global->inputs()) : std::vector<std::optional<Sharding>>{};
}

// (the plan where no size is bound: every plan lays the outputs out so, propagate_sharding's pins)
std::vector<std::optional<Sharding>> FusionExecutor::output_shardings() {
  const CompiledFusion& plan = impl_->first_plan().compiled;
  return plan.global ? shardings_of(plan.global->outputs()) : std::vector<std::optional<Sharding>>{};
}

Device FusionExecutor::device() const { return impl_->device; }

std::string FusionExecutor::dump(std::string_view stage, const std::vector<Tensor>* inputs) {
  if (stage == "ir") return settings::dump_note() + print_fusion(*impl_->fusion);
  // inputs given: the plan is for their sizes, and they are checked as a run checks them (no
  // collective); otherwise the last run's plan, or before any the plan where no size is bound
  const Impl::Plan* plan = impl_->last_plan.load(std::memory_order_acquire);
  Bindings sizes = plan ? plan->sizes : Bindings{};
  if (inputs) {
    sizes = bind_inputs(*impl_->first_plan().compiled.local, *inputs);
    plan = &impl_->plan_for(sizes);
  }
  return settings::dump_note() + impl_->dump_stage(stage, plan, sizes);
}

// `plan` null: the first plan, built only where the stage shows a plan (a fusion pass's result is
// compiled again on its own, at `sizes`).
std::string FusionExecutor::Impl::dump_stage(std::string_view stage, const Plan* chosen, const Bindings& sizes) {
  if (stage.starts_with("after=")) {
    std::string_view pass = stage.substr(6);
    const auto& names = pass_names();
    if (std::find(names.begin(), names.end(), pass) == names.end()) {
      std::string known;
      for (auto n : names) known += (known.empty() ? "" : ", ") + std::string(n);
      user_error_at("--dump", "unknown pass '", pass, "'; expected one of: ", known);
    }
    if (is_lowered_step(pass)) {
      for (auto& [name, text] : (chosen ? *chosen : first_plan()).compiled.after)
        if (name == pass) return text;
    }
    std::string out;
    CompileOptions compile_options;
    compile_options.stop_after_lowering = true;
    compile_options.sizes = sizes;
    compile_options.observe = [&](std::string_view name, const Fusion* result) {
      if (name != pass) return;
      if (!result) {
        out = "(skipped: " + std::string(name) + " does not apply)\n";
        return;
      }
      // (the passes drop the in-place returns, which the segmenter reads from the fusion as
      // declared: shown as declared, `return y -> x`, so the dump means what the fusion does)
      auto shown = result->clone();
      shown->take_output_aliases_from(*fusion);
      out = print_fusion(*shown);
    };
    compile_fusion(*fusion, target(), compile_options);
    return out;
  }
  const CompiledFusion& plan = (chosen ? *chosen : first_plan()).compiled;
  std::lock_guard<std::mutex> lock(run_mutex);  // the segments' sources change as runs compile variants
  if (stage == "sharding") return plan.global ? sharding_report(*plan.global) : "no mesh: the fusion runs on one device\n";
  if (stage == "local") return print_fusion(*plan.local);
  if (stage == "segments") return plan.executable->program.segmentation.str();
  if (stage == "program") return plan.executable->program.str();
  if (stage == "steps") return plan.steps_report();
  if (stage == "cuda") {
    std::string out;
    for (auto& s : plan.executable->segments) out += s->source();
    if (!out.empty()) return out;
    if (device.kind != DeviceKind::cuda) return "no generated CUDA code (the plan runs on " + device.str() + ")\n";
    return "no generated CUDA code: none compiled yet (kernels are compiled at the first run for its sizes), or the plan has none\n";
  }
  user_error_at("--dump", "unknown stage '", stage, "'; expected ir, after=PASS, sharding, local, segments, program, steps or cuda");
}

Tensor to_cpu(const Tensor& t) {
  if (t.device().kind == DeviceKind::cpu) return t;
  return backend::device_runtime(t.device().kind).to_host(t);
}

}  // namespace alloy
