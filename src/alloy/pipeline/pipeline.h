// The pipeline: the one flat list of every pass in execution order, then segmentation, lowering
// to the host program, the backend's executables and the program passes. It belongs to no
// backend: backends only make executables for the segments it hands them. Each pass is
// addressable by name: `--dump after=NAME` prints the fusion after it ("(skipped)" where it did
// not apply). The executor and `alloy compile` both run it, so what is compiled ahead of time is
// what a rank runs.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alloy/host_ir/evaluator.h"
#include "alloy/ir/fusion.h"

namespace alloy {

// Called after each pass with its name and its result (nullptr where the pass was skipped).
using PassObserver = std::function<void(std::string_view pass, const Fusion* result)>;

struct CompileOptions {
  PassObserver observe;                    // called after each fusion pass
  host_ir::ProgramPassOptions program;     // --pipeline
  // The sizes the sharding passes decide at (a run's bound sizes: the executor compiles a plan
  // per sharding decision); a symbol not bound counts as 4096 (passes/sharding/sharding_rules.h).
  Bindings sizes;
  // Stop once the segmentation is lowered (`alloy compile`: no executables, no device needed).
  bool stop_after_lowering = false;
  // Stop after the sharding passes (insert_resharding): `global` only (sharding_decision).
  bool stop_after_sharding = false;
};

struct CompiledFusion {
  std::optional<std::vector<int64_t>> mesh;  // the fusion's mesh, when it names one
  std::unique_ptr<Fusion> global;            // after the sharding passes, global shapes (--dump sharding)
  std::unique_ptr<Fusion> local;             // what each device runs (the fusion itself, on one device)
  std::optional<host_ir::Program> lowered;   // with stop_after_lowering: the program before its passes
  std::unique_ptr<host_ir::Executable> executable;  // otherwise
  // After each step past the fusion passes, by the step's name (--dump after=NAME): the
  // segmentation (segment), the program as lowered (lower), the executables made (executables),
  // then the host program after each program pass.
  std::vector<std::pair<std::string_view, std::string>> after;
  // Every step's wall time in microseconds, in order (a skipped fusion pass is absent): `--dump steps`.
  std::vector<std::pair<std::string_view, double>> step_us;
  std::string steps_report() const;  // "step  time", a line a step
};

// Every fusion pass in order, then the target's segmentation, lowering and executables, then
// every program pass in order.
CompiledFusion compile_fusion(const Fusion& fusion, Target target, const CompileOptions& options = {});

// What the sharding passes decide at `sizes` (nothing compiled): the global fusion's `--dump
// sharding` text, which names every value's sharding, how it was chosen and every reshard. Two
// sizes of one text share a plan. Empty for a fusion without a mesh.
std::string sharding_decision(const Fusion& fusion, Target target, const Bindings& sizes);

// `alloy compile`: the pipeline to the lowered program for CUDA (a sharded fusion compiles as the
// part one rank runs, its sharding decided at `sizes`, or with every symbol counted as 4096, which
// the report says), then every generated kernel NVRTC-compiled for `arch` with no GPU
// (backend::compile_offline says how; with `sizes`, the variants a run at those sizes launches).
std::string compile_offline(const Fusion& fusion, const std::string& arch, bool dump_source, const Bindings* sizes = nullptr);

// `alloy compile --dump segments|program`: the CUDA segmentation, or the host program after the
// program passes, as a run on a GPU makes them (no GPU needed; a sharded fusion as the part one
// rank runs, decided at `sizes` as compile_offline decides it). --pipeline is auto.
std::string offline_dump(const Fusion& fusion, std::string_view stage, const Bindings* sizes = nullptr);

// The steps' names, in execution order: the fusion passes, then segment, lower, executables,
// then the program passes.
const std::vector<std::string_view>& pass_names();
// Whether a step comes after the fusion passes (its result is text kept in CompiledFusion::after).
bool is_lowered_step(std::string_view name);

// `--pipeline off|auto|ring|chunks=N` (N from 1 to 1024); anything else is a user error at "--pipeline".
host_ir::ProgramPassOptions parse_pipeline_option(std::string_view text);

// A sharded value whose size along its sharded axis the mesh does not divide is a user error
// naming the value, the axis, the size and the mesh. With `bindings` (run time) every size is
// checked; without, the constant ones.
void check_shardable(const Fusion& global, const Bindings* bindings);

}  // namespace alloy
