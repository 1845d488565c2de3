// Device discovery, error translation, device guard, streams and events over the CUDA runtime.
// The runtime is linked statically and loads the driver lazily, so every entry point here first
// asks cuda_available(), which is false (not a crash) on a machine without a GPU or driver.
#include "alloy/backend/cuda/cuda_runtime.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "alloy/common/error.h"
#include "alloy/common/settings.h"

namespace alloy::cuda {

namespace {

struct Probe {
  bool available = false;
  std::string reason;
  int device_count = 0;
};

std::string error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

Probe run_probe() noexcept {
  Probe probe;
  try {
    if (settings::flag("ALLOY_DISABLE_CUDA")) {
      probe.reason = "disabled by ALLOY_DISABLE_CUDA";
      return probe;
    }
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the (non-sticky) error so it does not surface later
      probe.reason = err == cudaErrorInsufficientDriver
                         ? "no CUDA driver found, or the driver is older than the CUDA " +
                               std::to_string(CUDART_VERSION / 1000) + " runtime (" + error_text(err) + ")"
                         : "no usable CUDA device (" + error_text(err) + ")";
      return probe;
    }
    if (count == 0) {
      probe.reason = "no CUDA GPU found";
      return probe;
    }
    probe.available = true;
    probe.device_count = count;
  } catch (...) {
    probe.available = false;
    probe.reason = "probing CUDA failed";
  }
  return probe;
}

const Probe& probe() {
  static const Probe result = run_probe();
  return result;
}

// Errors that mean "this machine cannot run CUDA", not "Alloy has a bug".
bool is_environment_error(cudaError_t err) {
  switch (err) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorStubLibrary:
    case cudaErrorInitializationError:
    case cudaErrorUnsupportedPtxVersion:
      return true;
    default:
      return false;
  }
}

std::atomic<uint64_t> next_stream_id{1};

// Sets the current device without throwing, for destructors; returns the previous one or -1.
int quiet_set_device(int device) noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  if (previous != device && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
  return previous;
}

void quiet_restore_device(int previous, int device) noexcept {
  if (previous >= 0 && previous != device && cudaSetDevice(previous) != cudaSuccess) cudaGetLastError();
}

void check_device_index(int device, const char* what) {
  require_cuda(what);
  if (device < 0 || device >= probe().device_count)
    user_error_at(what, "device cuda:", device, " does not exist; this machine has ", probe().device_count,
                  " CUDA device(s)");
}

std::shared_ptr<detail::StreamState> make_per_thread_state(int device) {
  auto state = std::make_shared<detail::StreamState>();
  state->device = device;
  state->stream = cudaStreamPerThread;
  state->owned = false;
  state->thread = std::this_thread::get_id();
  state->id = next_stream_id++;
  return state;
}

// The thread's current stream per device (empty slots are filled with the per-thread default).
std::vector<Stream>& thread_current_streams() {
  thread_local std::vector<Stream> streams;
  return streams;
}

}  // namespace

// ---- availability, errors, devices ----

bool cuda_available() { return probe().available; }

const std::string& cuda_unavailable_reason() { return probe().reason; }

int device_count() { return probe().device_count; }

void require_cuda(const char* what) {
  if (!cuda_available()) user_error_at(what, "CUDA unavailable: ", cuda_unavailable_reason());
}

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error; a sticky one stays whatever we do
  if (err == cudaErrorMemoryAllocation) user_error_at("CUDA", "out of memory (", expr, ")");
  if (is_environment_error(err)) user_error_at("CUDA", "CUDA unavailable: ", error_text(err), " (in ", expr, ")");
  internal_error(file, ":", line, ": ", expr, " failed: ", error_text(err));
}

const DeviceProps& device_props(int device) {
  check_device_index(device, "device_props");
  static std::mutex mutex;
  static std::vector<std::unique_ptr<DeviceProps>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.empty()) cache.resize(device_count());
  if (!cache[device]) {
    auto props = std::make_unique<DeviceProps>();
    auto attr = [device](cudaDeviceAttr a) {
      int value = 0;
      ALLOY_CUDA_CHECK(cudaDeviceGetAttribute(&value, a, device));
      return value;
    };
    props->index = device;
    props->sm_major = attr(cudaDevAttrComputeCapabilityMajor);
    props->sm_minor = attr(cudaDevAttrComputeCapabilityMinor);
    props->sm_count = attr(cudaDevAttrMultiProcessorCount);
    props->l2_bytes = attr(cudaDevAttrL2CacheSize);
    props->shared_per_block_optin = attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    props->shared_per_sm = attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
    props->max_threads_per_block = attr(cudaDevAttrMaxThreadsPerBlock);
    props->warp_size = attr(cudaDevAttrWarpSize);
    cudaDeviceProp prop{};
    ALLOY_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    props->name = prop.name;
    props->total_memory = int64_t(prop.totalGlobalMem);
    cache[device] = std::move(props);
  }
  return *cache[device];
}

void make_device_current(int device) {
  // cudaSetDevice binds the device's primary context to the thread (CUDA 12+); the runtime does
  // that lazily otherwise, but driver-API calls (module loads, launches) need it bound first.
  thread_local uint64_t bound_devices = 0;
  uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  int current = -1;
  ALLOY_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device && (bound_devices & bit)) return;
  ALLOY_CUDA_CHECK(cudaSetDevice(device));
  bound_devices |= bit;
}

DeviceGuard::DeviceGuard(int device) {
  ALLOY_CUDA_CHECK(cudaGetDevice(&previous_));
  make_device_current(device);
  if (previous_ == device) previous_ = -1;  // nothing to restore
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
}

// ---- streams ----

namespace detail {

cudaStream_t free_stream_for(const StreamState& state) {
  if (!state.owned && !state.external && state.thread != std::this_thread::get_id()) return cudaStreamLegacy;
  return state.stream;
}

StreamState::~StreamState() {
  // Runs from destructors, possibly at process exit after the runtime unloaded: never throws.
  int previous = quiet_set_device(device);
  if (scratch && cudaFreeAsync(scratch, free_stream_for(*this)) != cudaSuccess) cudaGetLastError();
  if (zeroed && cudaFreeAsync(zeroed, free_stream_for(*this)) != cudaSuccess) cudaGetLastError();
  if (owned && stream && cudaStreamDestroy(stream) != cudaSuccess) cudaGetLastError();
  quiet_restore_device(previous, device);
}

}  // namespace detail

Stream::Stream() {
  require_cuda("Stream");
  int device = 0;
  ALLOY_CUDA_CHECK(cudaGetDevice(&device));
  *this = current(device);
}

Stream Stream::current(int device) {
  check_device_index(device, "Stream::current");
  auto& streams = thread_current_streams();
  if (streams.size() <= size_t(device)) streams.resize(device + 1, Stream(nullptr));
  if (!streams[device].state_) streams[device] = Stream(make_per_thread_state(device));
  return streams[device];
}

Stream Stream::create(int device, bool urgent) {
  check_device_index(device, "Stream::create");
  DeviceGuard guard(device);
  auto state = std::make_shared<detail::StreamState>();
  state->device = device;
  state->owned = true;
  state->id = next_stream_id++;
  int least = 0, greatest = 0;
  if (urgent) ALLOY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  ALLOY_CUDA_CHECK(cudaStreamCreateWithPriority(&state->stream, cudaStreamNonBlocking, urgent ? greatest : least));
  return Stream(std::move(state));
}

Stream Stream::wrap(int device, CUstream_st* handle) {
  check_device_index(device, "Stream::wrap");
  // Leaked, like the kernel registry: freeing the scratch buffers at exit would race the runtime's
  // own teardown (and the caller's streams may be gone by then).
  static std::mutex mutex;
  static auto* wrapped = new std::map<std::pair<int, CUstream_st*>, std::shared_ptr<detail::StreamState>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<detail::StreamState>& state = (*wrapped)[{device, handle}];
  if (!state) {
    state = std::make_shared<detail::StreamState>();
    state->device = device;
    state->stream = reinterpret_cast<cudaStream_t>(handle);
    state->external = true;
    state->id = next_stream_id++;
  }
  return Stream(state);
}

int Stream::device() const { return state_ ? state_->device : -1; }
CUstream_st* Stream::handle() const { return state_ ? state_->stream : nullptr; }
uint64_t Stream::id() const { return state_ ? state_->id : 0; }
bool Stream::is_per_thread_default() const { return state_ && !state_->owned && !state_->external; }

void Stream::synchronize() const {
  ALLOY_CHECK(state_, "synchronize on an empty Stream");
  DeviceGuard guard(state_->device);
  ALLOY_CUDA_CHECK(cudaStreamSynchronize(state_->stream));
}

void Stream::wait(const Event& event) const {
  ALLOY_CHECK(state_, "wait on an empty Stream");
  DeviceGuard guard(state_->device);
  ALLOY_CUDA_CHECK(cudaStreamWaitEvent(state_->stream, raw(event), 0));
}

namespace {

// Grows `buffer` to at least `bytes` (rounded up to 1 MiB) in the stream's order.
void* grow_stream_buffer(detail::StreamState& s, void*& buffer, size_t& size, size_t bytes, bool zero) {
  if (bytes <= size) return buffer;
  DeviceGuard guard(s.device);
  // Work already queued on this stream finishes with the old buffer before the new one is used.
  if (buffer) ALLOY_CUDA_CHECK(cudaFreeAsync(buffer, s.stream));
  buffer = nullptr;
  size = 0;
  size_t rounded = (bytes + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
  ALLOY_CUDA_CHECK(cudaMallocAsync(&buffer, rounded, s.stream));
  if (zero) ALLOY_CUDA_CHECK(cudaMemsetAsync(buffer, 0, rounded, s.stream));
  size = rounded;
  return buffer;
}

// Owned streams may be shared between threads; the per-thread default state is thread-local.
std::mutex stream_buffer_mutex;

}  // namespace

void* Stream::scratch(size_t bytes) const {
  ALLOY_CHECK(state_, "scratch on an empty Stream");
  std::lock_guard<std::mutex> lock(stream_buffer_mutex);
  return grow_stream_buffer(*state_, state_->scratch, state_->scratch_bytes, bytes, false);
}

void* Stream::zeroed_scratch(size_t bytes) const {
  ALLOY_CHECK(state_, "zeroed_scratch on an empty Stream");
  std::lock_guard<std::mutex> lock(stream_buffer_mutex);
  return grow_stream_buffer(*state_, state_->zeroed, state_->zeroed_bytes, bytes, true);
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(Stream::current(stream.device())) {
  thread_current_streams()[stream.device()] = stream;
}

StreamGuard::~StreamGuard() {
  auto& streams = thread_current_streams();
  if (size_t(previous_.device()) < streams.size()) streams[previous_.device()] = previous_;
}

// ---- events ----

Event::Event(int device, bool timing) : device_(device) {
  check_device_index(device, "Event");
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  ALLOY_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  event_ = event;
}

Event::~Event() {
  if (event_ && cudaEventDestroy(event_) != cudaSuccess) cudaGetLastError();
}

Event::Event(Event&& other) noexcept : event_(other.event_), device_(other.device_) { other.event_ = nullptr; }

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ && cudaEventDestroy(event_) != cudaSuccess) cudaGetLastError();
    event_ = other.event_;
    device_ = other.device_;
    other.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  ALLOY_CHECK(event_, "record on a moved-from Event");
  ALLOY_CHECK(stream.device() == device_, "event on cuda:", device_, " recorded on a stream of cuda:", stream.device());
  DeviceGuard guard(device_);
  ALLOY_CUDA_CHECK(cudaEventRecord(event_, raw(stream)));
}

void Event::synchronize() const {
  ALLOY_CHECK(event_, "synchronize on a moved-from Event");
  ALLOY_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::query() const {
  ALLOY_CHECK(event_, "query on a moved-from Event");
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  ALLOY_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0.f;
  ALLOY_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace alloy::cuda
