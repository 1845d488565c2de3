// Module loading and kernel launch through driver entry points obtained from the CUDA runtime.
// Linking libcuda would make every Alloy binary fail to start on a machine without the driver; the
// runtime (linked statically) loads the driver lazily and hands out its function pointers instead.
#include "alloy/backend/cuda/loaded_kernel.h"

#include <cudaTypedefs.h>

#include <mutex>
#include <unordered_map>

#include "alloy/backend/cuda/cuda_runtime.h"
#include "alloy/common/error.h"

namespace alloy::cuda {

namespace {

// Every symbol here exists since CUDA 9; asking for the 12.0 ABI works with any driver that can
// run the CUDA 13 runtime at all.
constexpr unsigned kDriverAbiVersion = 12000;

struct DriverApi {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuModuleLoadData_v2000 module_load_data = nullptr;
  PFN_cuModuleGetFunction_v2000 module_get_function = nullptr;
  PFN_cuLaunchKernel_v4000 launch_kernel = nullptr;
  PFN_cuLaunchCooperativeKernel_v9000 launch_cooperative_kernel = nullptr;
  PFN_cuFuncSetAttribute_v9000 func_set_attribute = nullptr;
  PFN_cuFuncGetAttribute_v2020 func_get_attribute = nullptr;
  PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050 occupancy_max_active_blocks = nullptr;
};

template <class Fn>
void resolve(const char* symbol, Fn& fn) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ALLOY_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &ptr, kDriverAbiVersion, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || !ptr)
    user_error_at("CUDA", "CUDA unavailable: the driver does not provide ", symbol, " (query status ", int(status), ")");
  fn = reinterpret_cast<Fn>(ptr);
}

const DriverApi& driver() {
  static std::once_flag once;
  static DriverApi api;
  std::call_once(once, [] {
    require_cuda("driver API");
    DriverApi loaded;
    resolve("cuGetErrorName", loaded.get_error_name);
    resolve("cuGetErrorString", loaded.get_error_string);
    resolve("cuModuleLoadData", loaded.module_load_data);
    resolve("cuModuleGetFunction", loaded.module_get_function);
    resolve("cuLaunchKernel", loaded.launch_kernel);
    resolve("cuLaunchCooperativeKernel", loaded.launch_cooperative_kernel);
    resolve("cuFuncSetAttribute", loaded.func_set_attribute);
    resolve("cuFuncGetAttribute", loaded.func_get_attribute);
    resolve("cuOccupancyMaxActiveBlocksPerMultiprocessor", loaded.occupancy_max_active_blocks);
    api = loaded;
  });
  // call_once rethrows a failure and retries next time, so reaching here means all resolved
  return api;
}

std::string driver_error_text(CUresult res) {
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverApi& api = driver();
  if (api.get_error_name(res, &name) != CUDA_SUCCESS) name = "unknown CUresult";
  if (api.get_error_string(res, &text) != CUDA_SUCCESS) text = "";
  return std::string(name) + " (" + std::to_string(int(res)) + "): " + text;
}

[[noreturn]] void throw_driver_error(CUresult res, const char* expr, const char* file, int line) {
  if (res == CUDA_ERROR_OUT_OF_MEMORY) user_error_at("CUDA", "out of memory (", expr, ")");
  if (res == CUDA_ERROR_NO_DEVICE || res == CUDA_ERROR_NOT_INITIALIZED || res == CUDA_ERROR_DEINITIALIZED)
    user_error_at("CUDA", "CUDA unavailable: ", driver_error_text(res), " (in ", expr, ")");
  internal_error(file, ":", line, ": ", expr, " failed: ", driver_error_text(res));
}

#define ALLOY_CU_CHECK(expr)                                                                \
  do {                                                                                      \
    CUresult alloy_cu_res_ = (expr);                                                        \
    if (alloy_cu_res_ != CUDA_SUCCESS) throw_driver_error(alloy_cu_res_, #expr, __FILE__, __LINE__); \
  } while (0)

struct Registry {
  std::mutex mutex;
  std::unordered_map<std::string, LoadedKernel*> kernels;  // key: module key + "@" + device
};

Registry& registry() {
  // Deliberately leaked: unloading modules from static destructors would race the runtime's own
  // teardown at exit, and the driver frees everything with the context anyway.
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

bool cubin_runs_on(int major, int minor, const std::string& suffix, int device_major, int device_minor) {
  if (suffix == "a") return major == device_major && minor == device_minor;
  return major == device_major && minor <= device_minor;
}

LoadedKernel& LoadedKernel::get(const CompiledModule& module, int device) {
  ALLOY_CHECK(!module.key.empty(), "LoadedKernel::get: module without a cache key (not from compile_cuda)");
  Registry& r = registry();
  std::string key = module.key + "@" + std::to_string(device);
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.kernels.find(key);
  if (it != r.kernels.end()) return *it->second;
  auto* kernel = new LoadedKernel(module, device);
  r.kernels.emplace(key, kernel);
  return *kernel;
}

LoadedKernel::LoadedKernel(const CompiledModule& module, int device) : device_(device), name_(module.kernel_name) {
  const DeviceProps& props = device_props(device);
  if (!cubin_runs_on(module.arch_major, module.arch_minor, module.arch_suffix, props.sm_major, props.sm_minor))
    internal_error("kernel '", module.kernel_name, "' was compiled for sm_", module.arch_major, module.arch_minor,
                   module.arch_suffix, ", which cannot run on cuda:", device, " (", props.name, ", sm_", props.sm_major,
                   props.sm_minor, ")");
  const DriverApi& api = driver();
  DeviceGuard guard(device);
  CUmodule loaded = nullptr;
  ALLOY_CU_CHECK(api.module_load_data(&loaded, module.cubin.data()));
  CUfunction function = nullptr;
  CUresult res = api.module_get_function(&function, loaded, module.lowered_name.c_str());
  if (res != CUDA_SUCCESS)
    internal_error("kernel '", module.kernel_name, "' (symbol ", module.lowered_name,
                   ") not found in its module: ", driver_error_text(res));
  module_ = loaded;
  function_ = function;
}

void LoadedKernel::ensure_shared(size_t shared_bytes) const {
  if (shared_bytes <= shared_opted_in_.load(std::memory_order_relaxed)) return;
  const DeviceProps& props = device_props(device_);
  if (int64_t(shared_bytes) > props.shared_per_block_optin)
    internal_error("kernel '", name_, "' asks for ", shared_bytes, " bytes of shared memory; cuda:", device_,
                   " allows at most ", props.shared_per_block_optin);
  ALLOY_CU_CHECK(driver().func_set_attribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             int(shared_bytes)));
  shared_opted_in_.store(shared_bytes, std::memory_order_relaxed);
}

void LoadedKernel::launch_impl(Dim3 grid, Dim3 block, size_t shared_bytes, const Stream& stream, void** args,
                               bool cooperative) const {
  ALLOY_CHECK(stream.device() == device_, "kernel '", name_, "' loaded on cuda:", device_,
              " launched on a stream of cuda:", stream.device());
  make_device_current(device_);
  ensure_shared(shared_bytes);
  const DriverApi& api = driver();
  CUstream s = reinterpret_cast<CUstream>(stream.handle());
  if (cooperative) {
    ALLOY_CU_CHECK(api.launch_cooperative_kernel(function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                                 unsigned(shared_bytes), s, args));
  } else {
    ALLOY_CU_CHECK(api.launch_kernel(function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                     unsigned(shared_bytes), s, args, nullptr));
  }
}

void LoadedKernel::launch(Dim3 grid, Dim3 block, size_t shared_bytes, const Stream& stream, void** args) const {
  launch_impl(grid, block, shared_bytes, stream, args, false);
}

void LoadedKernel::launch_cooperative(Dim3 grid, Dim3 block, size_t shared_bytes, const Stream& stream,
                                      void** args) const {
  launch_impl(grid, block, shared_bytes, stream, args, true);
}

int LoadedKernel::num_registers() const {
  int value = 0;
  ALLOY_CU_CHECK(driver().func_get_attribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, function_));
  return value;
}

int LoadedKernel::max_threads_per_block() const {
  int value = 0;
  ALLOY_CU_CHECK(driver().func_get_attribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function_));
  return value;
}

int LoadedKernel::max_active_blocks_per_sm(int block_threads, size_t shared_bytes) const {
  make_device_current(device_);
  ensure_shared(shared_bytes);
  int blocks = 0;
  ALLOY_CU_CHECK(driver().occupancy_max_active_blocks(&blocks, function_, block_threads, shared_bytes));
  return blocks;
}

}  // namespace alloy::cuda
