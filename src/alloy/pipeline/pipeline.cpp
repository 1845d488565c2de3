#include "alloy/pipeline/pipeline.h"

#include <chrono>
#include <iomanip>
#include <sstream>

#include "alloy/backend/backend.h"
#include "alloy/host_ir/pipeline_collectives.h"
#include "alloy/host_ir/side_streams.h"
#include "alloy/ir/printer.h"
#include "alloy/multidevice/communication_segment.h"
#include "alloy/passes/decompose_composites.h"
#include "alloy/passes/sharding/insert_resharding.h"
#include "alloy/passes/sharding/localize_shards.h"
#include "alloy/passes/sharding/propagate_sharding.h"
#include "alloy/passes/sharding/sharding_rules.h"
#include "alloy/passes/split_var_mean.h"
#include "alloy/passes/unify_extents.h"
#include "alloy/segment/segmenter.h"

namespace alloy {
namespace {

// A fusion pass; `sizes` are the bound sizes the sharding passes' cost rule counts (empty: none).
using Pass = std::unique_ptr<Fusion> (*)(const Fusion&, const Bindings& sizes);

constexpr std::string_view kPropagateSharding = "propagate_sharding", kInsertResharding = "insert_resharding";

struct Step {
  std::string_view name;
  Pass pass;
  bool (*applies)(Target target, bool sharded);
};

// The order, and why:
//  1. decompose_composites: softmax, layer_norm and rms_norm become primitives. First, because
//     the sharding rules and the GPU kernels know primitives only (the CPU reference runs
//     composites whole where nothing is sharded).
//  2. split_var_mean: a variance becomes two means, so one over a sharded axis is partial sums.
//  3. propagate_sharding: every value gets a sharding, over the whole finished fusion, choosing
//     by the bytes moved at CompileOptions::sizes (the executor's per binding).
//  4. insert_resharding: collectives where a consumer needs another sharding than it gets (the
//     same choices, at the same sizes).
//  5. localize_shards: each device's fusion, with local shapes; after the passes above, so they
//     reason in global shapes only.
//  6. unify_extents (CUDA): sizes known to be equal become one extent, so kernels see one per axis.
// Then the pipeline segments the local fusion for the target (the CUDA segmenter matches matmul
// epilogues per segment), lowers the segmentation to the host program, asks the target's backend
// for each segment's executable (multidevice/ for communication segments) and rewrites the
// program with the program passes.
const std::vector<Step>& steps() {
  static const std::vector<Step> list = {
      {"decompose_composites", [](const Fusion& f, const Bindings&) { return decompose_composites(f); },
       [](Target t, bool sharded) { return t == Target::cuda || sharded; }},
      {"split_var_mean", [](const Fusion& f, const Bindings&) { return split_var_mean(f); }, [](Target, bool sharded) { return sharded; }},
      {kPropagateSharding, propagate_sharding, [](Target, bool sharded) { return sharded; }},
      {kInsertResharding, insert_resharding, [](Target, bool sharded) { return sharded; }},
      {"localize_shards", [](const Fusion& f, const Bindings&) { return localize_shards(f); }, [](Target, bool sharded) { return sharded; }},
      {"unify_extents", [](const Fusion& f, const Bindings&) { return unify_extents(f); }, [](Target t, bool) { return t == Target::cuda; }},
  };
  return list;
}

// The program passes, after lowering, in order:
//  1. side_streams: memory-bound kernels beside the next GEMM (CUDA), on the flat program;
//  2. pipeline_collectives: all-gather + GEMM and GEMM + reduce-scatter pairs into chunked loops
//     over streams (sharded fusions; --pipeline). After side_streams, which reasons about a
//     flat list of segments, and which leaves the pairs (a collective and a GEMM on the run's
//     stream) as they were.
struct ProgramStep {
  std::string_view name;
  host_ir::Program (*pass)(host_ir::Program, const host_ir::ProgramPassOptions&);
};

const std::vector<ProgramStep>& program_steps() {
  static const std::vector<ProgramStep> list = {
      {"side_streams", host_ir::assign_side_streams},
      {"pipeline_collectives", host_ir::pipeline_collectives},
  };
  return list;
}

std::string where_sharded(const Value& v) {
  if (v.sharding_source.kind == ShardingSource::Kind::user && v.sharding_source.loc.known()) return v.sharding_source.loc.str();
  if (v.producer && v.producer->loc.known()) return v.producer->loc.str();
  return "value '" + v.name + "'";
}

}  // namespace

// The steps between the fusion passes and the program passes.
constexpr std::string_view kSegment = "segment", kLower = "lower", kExecutables = "executables";

const std::vector<std::string_view>& pass_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const Step& s : steps()) out.push_back(s.name);
    for (std::string_view s : {kSegment, kLower, kExecutables}) out.push_back(s);
    for (const ProgramStep& s : program_steps()) out.push_back(s.name);
    return out;
  }();
  return names;
}

std::string CompiledFusion::steps_report() const {
  std::ostringstream os;
  os << "pipeline steps (wall time of this plan's compilation):\n";
  for (auto& [name, us] : step_us) os << "  " << std::left << std::setw(24) << name << std::right << std::fixed << std::setprecision(1) << us << " us\n";
  return os.str();
}

void check_shardable(const Fusion& global, const Bindings* bindings) {
  for (auto& v : global.values()) {
    if (!v->sharding || !v->sharding->shard_axis) continue;
    int axis = *v->sharding->shard_axis;
    ALLOY_CHECK(axis >= 0 && axis < v->rank(), "'", v->name, "' is sharded along axis ", axis, " but has rank ", v->rank());
    const Extent& e = v->shape()[size_t(axis)];
    auto size = bindings ? e.evaluate(*bindings) : e.constant_value();
    int64_t n = int64_t(v->sharding->mesh.size());
    if (!size || *size % n == 0) continue;
    user_error_at(where_sharded(*v), "'", v->name, "' is sharded along axis ", axis, " of size ", *size,
                  e.is_constant() ? "" : " (" + e.str(true) + ")", ", which the ", n, " devices of ", mesh_str(v->sharding->mesh),
                  " do not divide evenly");
  }
}

host_ir::ProgramPassOptions parse_pipeline_option(std::string_view text) {
  using P = host_ir::ProgramPassOptions::Pipeline;
  host_ir::ProgramPassOptions o;
  if (text == "off") o.pipeline = P::off;
  else if (text == "auto") o.pipeline = P::automatic;
  else if (text == "ring") o.pipeline = P::ring;
  else if (text.starts_with("chunks=")) {
    std::string digits(text.substr(7));
    bool ok = !digits.empty() && digits.size() <= 4 && digits.find_first_not_of("0123456789") == std::string::npos;
    int n = ok ? std::stoi(digits) : 0;
    if (n < 1 || n > 1024)
      user_error_at("--pipeline", "chunks must be a whole number from 1 to 1024, found '", digits, "'");
    o.pipeline = P::chunks;
    o.chunks = n;
  } else {
    user_error_at("--pipeline", "expected off, auto, ring or chunks=N, found '", text, "'");
  }
  return o;
}

bool is_lowered_step(std::string_view name) {
  if (name == kSegment || name == kLower || name == kExecutables) return true;
  for (const ProgramStep& s : program_steps())
    if (s.name == name) return true;
  return false;
}

CompiledFusion compile_fusion(const Fusion& fusion, Target target, const CompileOptions& options) {
  CompiledFusion out;
  // Runs one step, timing it.
  auto timed = [&](std::string_view name, auto&& step) {
    auto start = std::chrono::steady_clock::now();
    step();
    out.step_us.emplace_back(name, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  };
  out.mesh = fusion_mesh(fusion);
  bool sharded = out.mesh.has_value();
  std::unique_ptr<Fusion> current;
  for (const Step& step : steps()) {
    if (!step.applies(target, sharded)) {
      if (options.observe) options.observe(step.name, nullptr);
      continue;
    }
    timed(step.name, [&] { current = step.pass(current ? *current : fusion, options.sizes); });
    if (step.name == kPropagateSharding) check_in_place_shardings(fusion, *current);  // the passes before drop the aliases
    if (step.name == kInsertResharding) {
      check_shardable(*current, nullptr);
      out.global = current->clone();
    }
    if (options.observe) options.observe(step.name, current.get());
    if (options.stop_after_sharding && step.name == kInsertResharding) return out;
  }
  out.local = current ? std::move(current) : fusion.clone();
  out.local->take_output_aliases_from(fusion);  // the segmenter decides how each in-place output is written
  Segmentation segmentation;
  timed(kSegment, [&] { segmentation = segment_fusion(*out.local, target); });
  out.after.emplace_back(kSegment, segmentation.str());
  host_ir::Program program;
  timed(kLower, [&] { program = host_ir::lower_to_program(std::move(segmentation)); });
  program.fusion_outputs.assign(out.local->outputs().begin(), out.local->outputs().end());
  out.after.emplace_back(kLower, program.str());
  if (options.stop_after_lowering) {
    out.lowered = std::move(program);
    return out;
  }
  out.executable = std::make_unique<host_ir::Executable>();
  out.executable->program = std::move(program);
  const host_ir::DeviceRuntime& device = backend::device_runtime(target == Target::cpu ? DeviceKind::cpu : DeviceKind::cuda);
  out.executable->device = &device;
  timed(kExecutables, [&] {
    for (const Segment& s : out.executable->program.segmentation.segments)
      out.executable->segments.push_back(s.scheduler == SchedulerKind::communication ? multidevice::make_communication_segment(s, device)
                                                                                     : backend::make_segment_executable(s, target));
  });
  std::string made;
  for (const Segment& s : out.executable->program.segmentation.segments)
    made += "segment " + std::to_string(s.id) + " [" + scheduler_name(s.scheduler) + "]: " +
            (s.scheduler == SchedulerKind::communication ? "multidevice" : target == Target::cpu ? "cpu" : "cuda") + " executable\n";
  out.after.emplace_back(kExecutables, made);
  // program passes keep every segment (the executables are made per segment already)
  for (const ProgramStep& step : program_steps()) {
    std::string before = out.executable->program.str();
    timed(step.name, [&] { out.executable->program = step.pass(std::move(out.executable->program), options.program); });
    std::string after = out.executable->program.str();
    out.after.emplace_back(step.name, after == before ? "(unchanged)\n" + after : after);
  }
  return out;
}

std::string offline_dump(const Fusion& fusion, std::string_view stage, const Bindings* sizes) {
  CompileOptions options;
  options.stop_after_lowering = true;
  if (sizes) options.sizes = *sizes;
  CompiledFusion compiled = compile_fusion(fusion, Target::cuda, options);
  if (stage == "segments") return compiled.lowered->segmentation.str();
  ALLOY_CHECK(stage == "program", "offline_dump of stage '", stage, "'");
  host_ir::Program program = std::move(*compiled.lowered);
  for (const ProgramStep& step : program_steps()) program = step.pass(std::move(program), options.program);
  return program.str();
}

std::string sharding_decision(const Fusion& fusion, Target target, const Bindings& sizes) {
  CompileOptions options;
  options.sizes = sizes;
  options.stop_after_sharding = true;
  CompiledFusion decided = compile_fusion(fusion, target, options);
  return decided.global ? sharding_report(*decided.global) : "";
}

namespace {

// For `alloy compile`'s report: the sizes the sharding was decided at, and the ones assumed.
std::string decided_at(const Fusion& fusion, const Bindings* sizes) {
  std::string bound, assumed;
  const Bindings none;
  const Bindings& at = sizes ? *sizes : none;
  for (const std::string& symbol : fusion.input_symbols()) {
    auto it = at.find(symbol);
    if (it != at.end()) bound += (bound.empty() ? "" : ", ") + symbol + "=" + std::to_string(it->second);
    else assumed += (assumed.empty() ? "" : ", ") + symbol + "=" + std::to_string(sharding_rules::kSymbolGuess);
  }
  if (bound.empty() && assumed.empty()) return "";
  std::string out = "; sharding decided";
  if (!bound.empty()) out += " at " + bound + (assumed.empty() ? "" : ",");
  if (!assumed.empty()) out += " assuming " + assumed + " (not bound; --bind SYMBOL=N decides at N)";
  return out;
}

}  // namespace

std::string compile_offline(const Fusion& fusion, const std::string& arch, bool dump_source, const Bindings* sizes) {
  CompileOptions options;
  options.stop_after_lowering = true;
  if (sizes) options.sizes = *sizes;
  CompiledFusion compiled = compile_fusion(fusion, Target::cuda, options);
  if (compiled.global && sizes) check_shardable(*compiled.global, sizes);
  std::string report = backend::compile_offline(*compiled.local, compiled.lowered->segmentation, arch, dump_source, sizes);
  if (compiled.mesh && !dump_source)
    report = "(the part one rank of " + mesh_str(*compiled.mesh) + " runs" + decided_at(fusion, sizes) + ")\n" + report;
  return report;
}

}  // namespace alloy
