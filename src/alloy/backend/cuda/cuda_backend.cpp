#include "alloy/backend/cuda/cuda_backend.h"

#include <chrono>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "alloy/backend/cpu/cpu_executable.h"
#include "alloy/backend/cuda/accumulate.h"
#include "alloy/backend/cuda/bitmask_segment.h"
#include "alloy/backend/cuda/cuda_api.h"
#include "alloy/backend/cuda/generated_kernel.h"
#include "alloy/backend/cuda/host_views.h"
#include "alloy/backend/cuda/matmul_segment.h"
#include "alloy/backend/cuda/multi_tensor_segment.h"
#include "alloy/backend/cuda/strided_copy.h"
#include "alloy/backend/cuda/cuda_runtime.h"
#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy::cuda {
namespace {

// Views made on the host: no kernel at all. A reshape that cannot be a view copies.
class NoopSegment final : public host_ir::SegmentExecutable {
 public:
  explicit NoopSegment(const Segment& s) : ops_(s.ops) {}
  void run(host_ir::RunState& state) override {
    for (const Op* op : ops_) make_host_view(*op, state);
  }

 private:
  std::vector<const Op*> ops_;
};

// Ops no GPU path runs (the segment's note says why): through the host and the reference
// kernels, then back. A scalar result stays on the host, where kernels read scalars by value.
class CpuFallbackSegment final : public host_ir::SegmentExecutable {
 public:
  explicit CpuFallbackSegment(const Segment& s) : ops_(s.ops) {}
  void run(host_ir::RunState& state) override {
    Stream stream = Stream::current(state.device.index);
    run_reference_ops(ops_, state, [&](const Tensor& t) { return to_host(t, stream); }, {});
    for (const Op* op : ops_)
      for (Value* out : op->outputs)
        if (!out->is_scalar()) state.values[out->id] = to_device(state.at(out), stream);
  }

 private:
  std::vector<const Op*> ops_;
};

// The side streams and events of one run. Both are kept per thread and reused run after run: a
// side stream per (run's stream, priority, index among that priority's: a program's urgent
// streams, Program::urgent_streams, are made at the device's greatest priority), and events,
// which a later record may reuse as soon as the waits on them are enqueued.
class CudaRunStreams final : public host_ir::RunStreams {
 public:
  CudaRunStreams(const host_ir::Program& program, int device) : main_(Stream::current(device)) {
    struct SideStreams {
      std::vector<Stream> normal, urgent;
    };
    thread_local std::map<uint64_t, SideStreams> side_streams;      // by the run's stream id
    thread_local std::map<int, std::vector<Event>> event_pool;      // by device
    // a caller making a new stream for each run must not collect side streams: keep the newest
    // few (stream ids only grow; a dropped stream frees its buffers in its own order, and this
    // run holds its own handles to the streams it uses)
    constexpr size_t kKeptCallerStreams = 8;
    if (side_streams.size() >= kKeptCallerStreams && !side_streams.count(main_.id())) side_streams.erase(side_streams.begin());
    SideStreams& kept = side_streams[main_.id()];
    // program stream s >= 1: the next of its priority's streams, in order
    const size_t urgent = program.urgent_streams.size();
    while (kept.normal.size() + 1 + urgent < size_t(program.streams)) kept.normal.push_back(Stream::create(device));
    while (kept.urgent.size() < urgent) kept.urgent.push_back(Stream::create(device, true));
    size_t next_normal = 0, next_urgent = 0;
    for (int s = 1; s < program.streams; ++s) side_.push_back(program.urgent_streams.count(s) ? kept.urgent[next_urgent++] : kept.normal[next_normal++]);
    std::vector<Event>& events = event_pool[device];
    while (int(events.size()) < program.events) events.emplace_back(device, false);
    events_ = &events;
  }

  void record(int stream, int event) override {
    events_->at(size_t(event)).record(stream_at(stream));
  }
  void wait(int stream, int event) override { stream_at(stream).wait(events_->at(size_t(event))); }
  void use(int stream) override {
    guard_.reset();
    if (stream != 0) guard_.emplace(stream_at(stream));
  }
  void join() override {
    for (const Stream& side : side_) {
      Event done(main_.device(), false);
      done.record(side);
      main_.wait(done);
    }
  }

 private:
  const Stream& stream_at(int stream) const { return stream == 0 ? main_ : side_.at(size_t(stream - 1)); }

  Stream main_;
  std::vector<Stream> side_;  // the program's streams 1.. (handles to the thread's kept streams)
  std::vector<Event>* events_ = nullptr;
  std::optional<StreamGuard> guard_;
};

class CudaTimer final : public host_ir::DeviceTimer {
 public:
  explicit CudaTimer(int device) : device_(device), start_(device, true), stop_(device, true) {}
  void start() override { start_.record(Stream::current(device_)); }
  void stop() override { stop_.record(Stream::current(device_)); }
  double elapsed_ms() override {
    stop_.synchronize();
    return start_.elapsed_ms(stop_);
  }
  // The host function reads held_ms_ when the stream reaches it, before stop() can be recorded
  // behind it, so the timer (which elapsed_ms() keeps alive until then) holds the length.
  void hold(double ms) override {
    held_ms_ = ms;
    auto sleep = [](void* length) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(*static_cast<double*>(length)));
    };
    ALLOY_CUDA_CHECK(cudaLaunchHostFunc(raw(Stream::current(device_)), sleep, &held_ms_));
  }

 private:
  int device_;
  double held_ms_ = 0;
  Event start_, stop_;
};

// A traced run's marks: a timing event each, recorded on the current stream, read against mark 0
// once the run is done (cudaEventElapsedTime works across the streams of a device). The events are
// kept per thread and device and reused run after run, so a traced run creates none once warm.
class CudaTraceClock final : public host_ir::TraceClock {
 public:
  explicit CudaTraceClock(int device) : device_(device), events_(std::move(pool()[device])) {}
  ~CudaTraceClock() override { pool()[device_] = std::move(events_); }
  int mark() override {
    if (size_t(marks_) == events_.size()) events_.emplace_back(device_, true);
    events_[size_t(marks_)].record(Stream::current(device_));
    return marks_++;
  }
  std::vector<double> times_us() override {
    std::vector<double> out;
    out.reserve(size_t(marks_));
    for (int k = 0; k < marks_; ++k) {
      events_[size_t(k)].synchronize();
      out.push_back(double(events_[0].elapsed_ms(events_[size_t(k)])) * 1000.0);
    }
    return out;
  }

 private:
  static std::map<int, std::vector<Event>>& pool() {
    thread_local std::map<int, std::vector<Event>> events;  // by device
    return events;
  }
  int device_;
  int marks_ = 0;
  std::vector<Event> events_;
};

class StreamScope final : public host_ir::Scope {
 public:
  explicit StreamScope(const Stream& stream) : guard_(stream) {}

 private:
  StreamGuard guard_;
};

class CudaRuntime final : public host_ir::DeviceRuntime {
 public:
  DeviceKind kind() const override { return DeviceKind::cuda; }
  bool available() const override { return cuda_available(); }
  std::string unavailable_reason() const override { return cuda_unavailable_reason(); }
  int device_count() const override { return cuda::device_count(); }
  std::string device_name(int index) const override { return device_props(index).name; }
  int64_t memory_bytes(int index) const override { return device_props(index).total_memory; }

  Tensor empty(DType dtype, const std::vector<int64_t>& sizes, int index) const override {
    return cuda_empty(dtype, sizes, Stream::current(index));
  }
  void fill_poison(const Tensor& t) const override { cuda::fill_poison(t, current(t)); }
  void fill_zero(const Tensor& t) const override { cuda::fill_zero(t, current(t)); }
  Tensor contiguous(const Tensor& t) const override { return cuda::contiguous(t, current(t)); }
  void copy(const Tensor& dst, const Tensor& src) const override {
    Stream stream = current(dst);
    copy_d2d(dst, cuda::contiguous(src, stream), stream);
  }
  void accumulate(const Tensor& into, const std::vector<Tensor>& addends) const override { cuda::accumulate(into, addends, current(into)); }
  Tensor to_device(const Tensor& host, int index) const override { return cuda::to_device(host, Stream::current(index)); }
  Tensor to_host(const Tensor& t) const override { return cuda::to_host(t, current(t)); }
  void synchronize(int index) const override { Stream::current(index).synchronize(); }

  std::unique_ptr<host_ir::RunStreams> open_streams(const host_ir::Program& program, host_ir::RunState& state) const override {
    return std::make_unique<CudaRunStreams>(program, state.device.index);
  }
  std::unique_ptr<host_ir::Scope> use_stream(int index, uintptr_t handle) const override {
    return std::make_unique<StreamScope>(Stream::wrap(index, reinterpret_cast<CUstream_st*>(handle)));
  }
  uintptr_t current_stream(int index) const override { return reinterpret_cast<uintptr_t>(Stream::current(index).handle()); }
  std::unique_ptr<host_ir::DeviceTimer> timer(int index) const override { return std::make_unique<CudaTimer>(index); }
  std::unique_ptr<host_ir::TraceClock> trace_clock(int index) const override { return std::make_unique<CudaTraceClock>(index); }

 private:
  static Stream current(const Tensor& t) { return Stream::current(t.device().index); }
};

}  // namespace

const host_ir::DeviceRuntime& cuda_runtime() {
  static const CudaRuntime runtime;
  return runtime;
}

std::unique_ptr<host_ir::SegmentExecutable> make_cuda_executable(const Segment& s) {
  switch (s.scheduler) {
    case SchedulerKind::noop: return std::make_unique<NoopSegment>(s);
    case SchedulerKind::matmul: return make_matmul_segment(s);
    case SchedulerKind::bitmask: return make_bitmask_segment(s);
    case SchedulerKind::cpu_fallback: return std::make_unique<CpuFallbackSegment>(s);
    case SchedulerKind::pointwise:
    case SchedulerKind::reduction:
    case SchedulerKind::normalization:
    case SchedulerKind::inner_outer:
      ALLOY_CHECK(s.analysis != nullptr, "segment ", s.id, " [", scheduler_name(s.scheduler), "] has no kernel analysis");
      return make_generated_kernel(s, *s.analysis);
    case SchedulerKind::multi_tensor: return make_multi_tensor_segment(s);
    case SchedulerKind::cpu_reference:
    case SchedulerKind::communication: break;
  }
  internal_error("the CUDA backend has no executable for a ", scheduler_name(s.scheduler), " segment");
}

}  // namespace alloy::cuda
