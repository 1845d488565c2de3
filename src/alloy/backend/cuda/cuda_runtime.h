// Internal helpers of the CUDA backend that need the CUDA runtime headers: the error-check
// macro, the device guard, and the raw stream of a Stream. Only files under backend/cuda include it.
#pragma once

#include <cuda_runtime_api.h>

#include <thread>

#include "alloy/backend/cuda/cuda_api.h"

namespace alloy::cuda {

// Throws for a failed CUDA runtime call: a UserError ("CUDA unavailable: ..." or "CUDA out of
// memory: ...") when the environment is at fault, otherwise an InternalError naming the call.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

#define ALLOY_CUDA_CHECK(expr)                                                        \
  do {                                                                                \
    cudaError_t alloy_cuda_err_ = (expr);                                             \
    if (alloy_cuda_err_ != cudaSuccess)                                               \
      ::alloy::cuda::throw_cuda_error(alloy_cuda_err_, #expr, __FILE__, __LINE__);    \
  } while (0)

// Throws the "CUDA unavailable: <reason>" UserError unless cuda_available().
void require_cuda(const char* what);

// Makes `device` the calling thread's current device (and binds its primary context, which
// driver-API calls need) for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Makes `device` current on this thread with its primary context bound; cheap when it already is.
void make_device_current(int device);

inline cudaStream_t raw(const Stream& stream) { return reinterpret_cast<cudaStream_t>(stream.handle()); }
inline cudaEvent_t raw(const Event& event) { return reinterpret_cast<cudaEvent_t>(event.handle()); }

namespace detail {

// What a Stream shares between its copies.
struct StreamState {
  int device = 0;
  cudaStream_t stream = nullptr;
  bool owned = false;                 // false: the per-thread default stream, or a caller's stream
  bool external = false;              // a caller's stream (Stream::wrap)
  std::thread::id thread;             // the thread whose per-thread default stream this is
  uint64_t id = 0;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  void* zeroed = nullptr;
  size_t zeroed_bytes = 0;
  ~StreamState();
};

// The stream on which memory allocated on `state` may be freed from the calling thread: the
// stream itself, except another thread's per-thread default stream, which is not reachable from
// here; then the legacy default stream, which is ordered after all blocking streams' work.
cudaStream_t free_stream_for(const StreamState& state);

}  // namespace detail

}  // namespace alloy::cuda
