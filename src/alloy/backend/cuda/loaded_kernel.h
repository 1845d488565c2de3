// A compiled kernel loaded on one device, launched through the CUDA driver API. The driver is not
// linked: its entry points come from the runtime (cudaGetDriverEntryPointByVersion), so binaries
// start without libcuda. Callers keep the LoadedKernel reference: a launch is then no lookup at all.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/nvrtc_compiler.h"

struct CUmod_st;
struct CUfunc_st;

namespace alloy::cuda {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

class LoadedKernel {
 public:
  // Loads `module` on `device` once; later calls with a module of the same key return the same
  // object, which lives until the process exits. Throws InternalError when the module's arch
  // cannot run on the device (the caller compiled for the wrong GPU).
  static LoadedKernel& get(const CompiledModule& module, int device);

  // `args` holds one pointer per kernel parameter, pointing at the parameter's value.
  // Dynamic shared memory is opted into on first use.
  void launch(Dim3 grid, Dim3 block, size_t shared_bytes, const Stream& stream, void** args) const;
  // The same with all blocks resident at once (cooperative launch), for grid-wide synchronization.
  void launch_cooperative(Dim3 grid, Dim3 block, size_t shared_bytes, const Stream& stream, void** args) const;

  int device() const { return device_; }
  const std::string& name() const { return name_; }
  int num_registers() const;
  int max_threads_per_block() const;
  // How many blocks of this shape fit on one SM at once (persistent-kernel grid sizing).
  int max_active_blocks_per_sm(int block_threads, size_t shared_bytes) const;

  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

 private:
  LoadedKernel(const CompiledModule& module, int device);
  void launch_impl(Dim3 grid, Dim3 block, size_t shared_bytes, const Stream& stream, void** args,
                   bool cooperative) const;
  void ensure_shared(size_t shared_bytes) const;

  CUmod_st* module_ = nullptr;
  CUfunc_st* function_ = nullptr;
  int device_ = 0;
  std::string name_;
  // dynamic shared memory allowed so far: any is opted into, since the 48 KiB a kernel may take
  // without asking counts its static shared memory too
  mutable std::atomic<size_t> shared_opted_in_{0};
};

// True when a CUBIN for sm_<major><minor><suffix> runs on a GPU of compute capability
// device_major.device_minor: same major and no newer minor ("f", family code, alike); an "a"
// arch (sm_90a) runs only on exactly that GPU.
bool cubin_runs_on(int major, int minor, const std::string& suffix, int device_major, int device_minor);

}  // namespace alloy::cuda
