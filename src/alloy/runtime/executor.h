// The entry point for running a fusion: compiles it once for the chosen device through the
// pipeline (pipeline/pipeline.h; one plan serves every input signature, since what depends on
// sizes, strides and alignment is chosen per run inside the segment executables; a fusion with a
// mesh has one plan per sharding decision, decided at each run's bound sizes), binds and checks
// the inputs against the declaration, and runs the host program.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy {

enum class DeviceChoice { automatic, cpu, cuda };

struct RunTrace;  // runtime/trace_file.h

struct ExecutorOptions {
  DeviceChoice device = DeviceChoice::automatic;  // automatic: a GPU where one exists, else the CPU
  // The GPU to run on (cuda or automatic). -1: GPU 0, or in a job of several processes the
  // rank's local GPU. A library inside another framework passes its tensors' device.
  int device_index = -1;
  // Fill every buffer the program allocates with NaN (0xFF bytes) before the kernels run, so
  // a test sees any element a kernel failed to write. Costs a memset per buffer.
  bool poison_outputs = false;
  // How collectives are pipelined with the GEMMs next to them (host_ir/pipeline_collectives.h):
  // "off", "auto" (CUDA: the cost model picks per run, from rates measured once per machine and
  // cached, runtime/tune/machine_costs.h; CPU: off), "ring" or "chunks=N"; anything else is a user
  // error when the plan is made.
  std::string pipeline = "auto";
  // A fusion with a mesh in a job of several processes: before the first collective of a run,
  // every rank of the job agrees (multidevice/agreement.h) on the fusion, these options, the bound
  // sizes and each input's local shape, dtype and strides class; any difference is a UserError on
  // every rank naming it. `job_facts` are more facts that must be the same on every rank (the
  // command line's command, seed, dumps, bench: name and value).
  std::vector<std::pair<std::string, std::string>> job_facts;
  // When the ranks agree: every_run (the default: always safe), or on_change, which skips the
  // agreement on a run whose record is the one last agreed (same fusion, options, sizes, shapes).
  // on_change is for programs whose ranks change their inputs' shapes at the same runs (every rank
  // running the same code): a rank that agrees while another skips would wait for it forever.
  enum class Agreement { every_run, on_change };
  Agreement agreement = Agreement::every_run;
};

// How one run is issued.
struct RunOptions {
  // CUDA: the stream the run enqueues its kernels, allocations and frees on, as a cudaStream_t
  // value (a caller's current stream, e.g. torch.cuda.current_stream().cuda_stream; 0 is the
  // legacy default stream); the run returns without waiting for it. It must be a stream of the
  // executor's device that outlives the run's outputs. nullopt: the thread's current stream (CUDA's
  // per-thread default stream). Ignored on the CPU. Outputs are freed in the order of the run's
  // stream when their last view goes, so a consumer on another stream makes the run's stream wait
  // for its work before it drops them (what torch's record_stream does).
  std::optional<uintptr_t> stream;
  // Where the run's timeline goes (runtime/trace_file.h), or null: with it, the run opens a span
  // for each node of its host program (host_ir/trace.h), waits for the device, and fills it. In a
  // job of several processes, a run of a fusion with a mesh is traced on every rank of the job or on
  // none (the job's agreement says so), and `ranks` holds every rank's spans (gathered: ranks
  // outside the mesh have none); otherwise this process's alone.
  RunTrace* trace = nullptr;
  // What the run is for, as a job's agreement compares it (a job of several processes makes the
  // same runs on every rank): "run", or the Python API's runs inside validate and dump, so a rank
  // validating where another executes is a disagreement named as such, not runs paired wrongly.
  const char* purpose = "run";
};

// Thread safety: one executor may run on several threads at once. The plan is built once, under a
// lock; on CUDA, and for a fusion with a mesh, runs take turns (enqueueing a run is microseconds of
// host time, and the kernels' variant caches and the team's collectives are not shared safely); on
// the CPU they run side by side (the reference kernels keep no state).
class FusionExecutor {
 public:
  explicit FusionExecutor(std::unique_ptr<Fusion> fusion, ExecutorOptions options = {});
  ~FusionExecutor();
  FusionExecutor(FusionExecutor&&) noexcept;
  FusionExecutor& operator=(FusionExecutor&&) noexcept;

  // Inputs in declaration order (scalar inputs as 0-dim tensors of any dtype); CPU tensors or
  // tensors already on the executor's device. Outputs are on the executor's device, in return
  // order. Bad inputs raise UserError naming the input, the axis and both sizes. A run that
  // fails returns nothing.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const RunOptions& run_options);
  // A run that failed before it could be given its inputs (a caller's own checks of what it was
  // handed, such as the Python module's): in a job of several processes running a fusion with a
  // mesh, the run agrees with the job as failed, so the other ranks' runs end with a PeerError
  // rather than wait for this one; then (and otherwise at once) `failure` is rethrown.
  [[noreturn]] void fail_run(std::exception_ptr failure);
  // Waits for the device to finish the last run (a no-op on the CPU).
  void synchronize();

  const Fusion& fusion() const;
  Device device() const;
  // How many plans were built: 0 before the first run, then 1 (runs with new sizes or strides
  // reuse it; the kernels' variants are cached inside it). A fusion with a mesh and symbolic
  // sizes decides its sharding at each run's sizes (the cost rule of
  // passes/sharding/sharding_rules.h): one plan more for each decision the plan where no size is
  // bound does not make, compiled at the first sizes that make it; sizes seen before are a look-up.
  int plans_built() const;

  // A fusion with a mesh runs one process per device: `run` takes this device's part of each
  // input and returns its part of each output (nothing on a rank outside the mesh). These say
  // how each input and output is laid over the mesh (after propagation; nullopt for scalars), the
  // same at every size (an output the user did not annotate keeps the layout it has where no
  // size is bound); both are empty for a fusion without a mesh.
  std::vector<std::optional<Sharding>> input_shardings();
  std::vector<std::optional<Sharding>> output_shardings();

  // Printable stages: "ir" (as written), "after=PASS" (the fusion or program after a pass of the
  // pipeline), "sharding" (every value's sharding and its source), "local" (the fusion one device
  // runs), "segments", "program" and "cuda" (the kernels the runs so far compiled). The later
  // stages describe a plan: with `inputs`, the plan for their sizes (checked as a run checks
  // them; no communication), else the last run's, or before any run the plan where no size is
  // bound. Each starts with the settings that differ from their defaults (settings::dump_note),
  // where any do.
  std::string dump(std::string_view stage, const std::vector<Tensor>* inputs = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A CPU copy of any tensor (contiguous); returns `t` itself when it is already a CPU tensor.
Tensor to_cpu(const Tensor& t);

}  // namespace alloy
