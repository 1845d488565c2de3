// The CUDA backend's public entry points (backend/cuda/cuda_api.h, nvrtc_compiler.h) for a build
// without the CUDA toolkit: cuda_available() is false and everything that needs CUDA throws a
// "CUDA unavailable" UserError, so the executor can include cuda_api.h unconditionally.
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/nvrtc_compiler.h"
#include "alloy/common/error.h"

namespace alloy::cuda {

namespace {
[[noreturn]] void unavailable(const char* what) {
  user_error_at(what, "CUDA unavailable: Alloy was built without the CUDA toolkit");
}
}  // namespace

bool cuda_available() { return false; }
const std::string& cuda_unavailable_reason() {
  static const std::string reason = "Alloy was built without the CUDA toolkit";
  return reason;
}
int device_count() { return 0; }
const DeviceProps& device_props(int) { unavailable("device_props"); }

Stream::Stream() { unavailable("Stream"); }
Stream Stream::current(int) { unavailable("Stream::current"); }
Stream Stream::create(int) { unavailable("Stream::create"); }
Stream Stream::wrap(int, CUstream_st*) { unavailable("Stream::wrap"); }
int Stream::device() const { return -1; }
CUstream_st* Stream::handle() const { return nullptr; }
uint64_t Stream::id() const { return 0; }
bool Stream::is_per_thread_default() const { return false; }
void Stream::synchronize() const { unavailable("Stream::synchronize"); }
void Stream::wait(const Event&) const { unavailable("Stream::wait"); }
void* Stream::scratch(size_t) const { unavailable("Stream::scratch"); }
void* Stream::zeroed_scratch(size_t) const { unavailable("Stream::zeroed_scratch"); }

StreamGuard::StreamGuard(const Stream& stream) : previous_(stream) { unavailable("StreamGuard"); }
StreamGuard::~StreamGuard() = default;

Event::Event(int, bool) { unavailable("Event"); }
Event::~Event() = default;
Event::Event(Event&& other) noexcept : event_(other.event_), device_(other.device_) {}
Event& Event::operator=(Event&&) noexcept { return *this; }
void Event::record(const Stream&) { unavailable("Event::record"); }
void Event::synchronize() const { unavailable("Event::synchronize"); }
bool Event::query() const { unavailable("Event::query"); }
float Event::elapsed_ms(const Event&) const { unavailable("Event::elapsed_ms"); }

Tensor cuda_empty(DType, std::vector<int64_t>, const Stream&) { unavailable("cuda_empty"); }
Tensor to_device(const Tensor&, const Stream&) { unavailable("to_device"); }
Tensor to_host(const Tensor&, const Stream&) { unavailable("to_host"); }
void copy_d2d(const Tensor&, const Tensor&, const Stream&) { unavailable("copy_d2d"); }
void fill_poison(const Tensor&, const Stream&) { unavailable("fill_poison"); }

std::shared_ptr<const CompiledModule> compile_cuda(const std::string&, const std::string&, int, int,
                                                   const CompileOptions&) {
  unavailable("compile_cuda");
}
std::string cuda_cache_dir() { return ""; }
CompileCacheStats compile_cache_stats() { return {}; }
void clear_compile_memory_cache() {}
CudaArch parse_cuda_arch(std::string_view) { unavailable("--arch"); }

}  // namespace alloy::cuda
