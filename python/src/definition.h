// A fusion definition as Python sees it: the Fusion being built op by op (every op checked and
// typed as it is added, so shape mistakes are reported at the line that makes them), then, once
// finished, one executor per device the definition runs on.
#pragma once

#include <nanobind/nanobind.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/runtime/executor.h"

namespace alloy::python {

namespace nb = nanobind;

struct Definition;

// A value of a definition (what fd.define_tensor and fd.ops.* return).
struct ValueHandle {
  std::shared_ptr<Definition> owner;
  Value* value = nullptr;
};

struct Definition : std::enable_shared_from_this<Definition> {
  std::unique_ptr<Fusion> fusion;
  bool finished = false;
  std::string failure;  // the first error: a definition that failed is never run

  explicit Definition(std::unique_ptr<Fusion> fusion) : fusion(std::move(fusion)) {}

  // ---- building (each a user error after finish() or a failure) ----
  // `mesh` (device ids) with `shard_axis` (nullopt: replicated) lays the input over a mesh.
  ValueHandle add_input(std::optional<std::string> name, DType dtype, std::optional<std::vector<nb::object>> shape,
                        const SourceLoc& loc, std::optional<std::vector<int64_t>> mesh = {}, std::optional<int> shard_axis = {});
  // A literal (define_scalar(value)); with `dtype`, a scalar of that dtype (the literal cast to it).
  ValueHandle add_literal(nb::handle number, std::optional<DType> dtype, const SourceLoc& loc);
  // `inputs`: values of this definition or Python numbers (literals); `attrs`: name -> value
  // (int, float, bool, str, DType, or a list of ints and symbol names).
  std::vector<ValueHandle> add_op(const std::string& op, const std::vector<nb::object>& inputs, const nb::dict& attrs,
                                  const SourceLoc& loc);
  void add_output(const ValueHandle& value, const std::optional<ValueHandle>& alias_input, const SourceLoc& loc);
  void finish();                            // ends the definition: no more ops, at least one output
  void fail(const std::string& message);   // records an error raised while defining

  // ---- running ----
  // `device`: None (where the tensor inputs are), "cpu", "cuda", "cuda:N" or an int N.
  // `stream`: None (torch's current stream for torch tensors, else the thread's), or a handle.
  // `trace`: a path, or None: the run's timeline as a Chrome trace-event file (runtime/trace_file.h),
  // written by rank 0 of the job.
  nb::list execute(const nb::sequence& inputs, nb::handle device, nb::handle stream, const std::optional<std::string>& trace);
  // On a rank outside the fusion's mesh: takes part in making the mesh's teams (collective over
  // the job), and in gathering a traced run's spans, and returns no outputs.
  nb::list join_outside_mesh(const std::optional<std::string>& trace);
  // A check of this rank's arguments failed before its run: in a job of several processes, the
  // run agrees with the job as failed (the other ranks' runs end), then the error is raised.
  [[noreturn]] void fail_with_job(std::exception_ptr failure);
  [[noreturn]] void fail_job(const std::string& message);  // (the Python layer's own checks)
  std::string dump(const std::string& stage, nb::handle inputs, nb::handle device);
  // Mismatches between a run on the inputs' device and `reference` outputs (or, when None, a run of
  // the CPU reference on the same inputs), one line each; empty when every output matches.
  std::vector<std::string> validate(const nb::sequence& inputs, nb::handle reference, nb::handle device);
  int plans_built();
  // The executor options (pipeline, poison_outputs) every run of this definition uses, by
  // ExecutorOptions' field names; set before the first run (a bad name or value is a UserError).
  void set_options(const nb::dict& options);
  nb::dict options();
  // How each input and output is laid over the mesh after propagation: per value None or
  // (mesh, placement) with placement "replicated", "shard(axis=K)" or "partial(OP)"; both lists
  // are all None for a fusion without a mesh.
  std::pair<nb::list, nb::list> shardings();

 private:
  void check_usable(const char* what) const;
  void check_building(const char* what) const;
  Value* value_of(nb::handle object, const SourceLoc& loc, const std::string& what);
  FusionExecutor& executor_for(Device device);
  struct Prepared;
  Prepared prepare(const nb::sequence& inputs, nb::handle device);
  void check_writable(size_t input) const;
  static bool views_read_only_input(const Tensor& output, const Prepared& p);

  ExecutorOptions options_;  // device and device_index aside, which each executor sets
  std::mutex executors_mutex_;
  std::map<std::pair<int, int>, std::unique_ptr<FusionExecutor>> executors_;  // by (device kind, index)
};

}  // namespace alloy::python
