// The CUDA backend's public face: device discovery, streams and events, device tensors and
// host<->device copies. Compiles without the CUDA headers (handles are forward-declared), so the
// executor includes it unconditionally; in a build without the toolkit, cuda_disabled.cpp defines
// these with cuda_available() == false and everything else throwing a "CUDA unavailable" UserError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "alloy/tensor/tensor.h"

// The CUDA runtime's stream and event handles are pointers to these driver types.
struct CUstream_st;
struct CUevent_st;

namespace alloy::cuda {

// ---- availability and devices ----

// True when a CUDA driver and at least one GPU can be used. Probed once and cached; never throws.
// ALLOY_DISABLE_CUDA=1 in the environment forces false (to exercise the CPU path on a GPU host).
bool cuda_available();
// Why cuda_available() is false ("no CUDA driver found", "built without CUDA", ...); "" when true.
const std::string& cuda_unavailable_reason();
int device_count();  // 0 when unavailable

struct DeviceProps {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;  // compute capability, e.g. 9.0
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t shared_per_block_optin = 0;  // the most dynamic shared memory a kernel may opt into
  int64_t shared_per_sm = 0;
  int64_t total_memory = 0;
  int max_threads_per_block = 0;
  int warp_size = 0;
};
// Cached per device; throws UserError when CUDA is unavailable or the index is out of range.
const DeviceProps& device_props(int device);

// ---- streams and events ----

namespace detail {
struct StreamState;
}

// A CUDA stream on one device. Copies share one stream; an owned stream is destroyed with its last
// copy (and device buffers allocated on it keep it alive, since they are freed in its order).
class Stream {
 public:
  // The calling thread's current stream on the current device (see current()).
  Stream();
  // The thread's current stream for `device`: the CUDA per-thread default stream unless a
  // StreamGuard has set another.
  static Stream current(int device);
  // A new stream that does not synchronize with the legacy default stream; `urgent`: at the
  // device's greatest priority (its kernels' blocks are scheduled before other streams' pending ones).
  static Stream create(int device, bool urgent = false);
  // A caller's stream (a cudaStream_t of `device`; nullptr is the legacy default stream), not owned:
  // Alloy never destroys it. One Stream per (device, handle) is kept for the process, so the
  // scratch buffers and side streams that hang off it are reused run after run.
  static Stream wrap(int device, CUstream_st* handle);

  int device() const;
  CUstream_st* handle() const;
  uint64_t id() const;  // unique per process (per thread for the per-thread default stream)
  bool is_per_thread_default() const;
  void synchronize() const;  // blocks the host; for tests, transfers and the end of a run
  void wait(const class Event& event) const;  // later work on this stream waits for the event
  // A device buffer private to this stream, at least `bytes` long, kept and grown as needed,
  // freed with the stream (cuBLASLt's workspace, grid-wide reduction scratch).
  void* scratch(size_t bytes) const;
  // A second private buffer whose bytes are zero between kernels: zeroed when (re)allocated, and
  // every kernel that uses it (the column reductions' arrival counters) leaves it zero again.
  void* zeroed_scratch(size_t bytes) const;

  bool operator==(const Stream& other) const { return handle() == other.handle() && device() == other.device(); }
  const std::shared_ptr<detail::StreamState>& state() const { return state_; }

 private:
  explicit Stream(std::shared_ptr<detail::StreamState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::StreamState> state_;
};

// Makes `stream` the thread's current stream for its device until the guard goes away.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

class Event {
 public:
  explicit Event(int device, bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void synchronize() const;
  bool query() const;  // true when all recorded work is done
  // Milliseconds between this (earlier) event and `end`; both need timing = true.
  float elapsed_ms(const Event& end) const;
  CUevent_st* handle() const { return event_; }
  int device() const { return device_; }

 private:
  CUevent_st* event_ = nullptr;
  int device_ = 0;
};

// ---- device tensors ----

// A contiguous uninitialized tensor on the stream's device, from the device's stream-ordered pool;
// it is freed in the order of `stream` when its last view goes away.
Tensor cuda_empty(DType dtype, std::vector<int64_t> sizes, const Stream& stream);
// A contiguous device copy of a CPU tensor (any strides).
Tensor to_device(const Tensor& cpu, const Stream& stream);
// A contiguous CPU copy of a device tensor (any strides); waits for the stream.
Tensor to_host(const Tensor& device_tensor, const Stream& stream);
// dst = src for two contiguous device tensors of the same dtype and element count (devices may differ).
void copy_d2d(const Tensor& dst, const Tensor& src, const Stream& stream);
// Sets every byte that the tensor's elements span to 0xFF: NaN for floats, -1 for integers.
// Tests use it to catch kernels that skip elements.
void fill_poison(const Tensor& device_tensor, const Stream& stream);
// Sets every byte the elements span to 0 (zeros of every dtype).
void fill_zero(const Tensor& device_tensor, const Stream& stream);

}  // namespace alloy::cuda
