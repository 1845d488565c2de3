// The entry point for running a fusion: binds inputs, checks them against the declaration,
// segments and lowers the fusion to a host program for the chosen device (cached by input
// signature), and runs it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alloy/ir/fusion.h"
#include "alloy/runtime/tensor.h"

namespace alloy {

enum class DeviceChoice { automatic, cpu, cuda };

struct ExecutorOptions {
  DeviceChoice device = DeviceChoice::automatic;  // automatic: a GPU where one exists, else the CPU
  // Fill every buffer the program allocates with NaN (0xFF bytes) before the kernels run, so
  // a test sees any element a kernel failed to write. Costs a memset per buffer.
  bool poison_outputs = false;
  // How collectives are pipelined with the GEMMs next to them (host_ir/pipeline_collectives.h):
  // "off", "auto" or "chunks=N"; anything else is a user error when the plan is made.
  std::string pipeline = "auto";
};

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
  // Waits for the device to finish the last run (a no-op on the CPU).
  void synchronize();

  const Fusion& fusion() const;
  Device device() const;

  // A fusion with a mesh runs one process per device: `run` takes this device's part of each
  // input and returns its part of each output (nothing on a rank outside the mesh). These say
  // how each input and output is laid over the mesh (after propagation; nullopt for scalars);
  // both are empty for a fusion without a mesh.
  std::vector<std::optional<Sharding>> input_shardings();
  std::vector<std::optional<Sharding>> output_shardings();

  // Printable stages: "ir", "segments", "program", "cuda". The later stages describe the plan
  // of the last run (or of `inputs` when given).
  std::string dump(std::string_view stage, const std::vector<Tensor>* inputs = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A CPU copy of any tensor (contiguous); returns `t` itself when it is already a CPU tensor.
Tensor to_cpu(const Tensor& t);

}  // namespace alloy
