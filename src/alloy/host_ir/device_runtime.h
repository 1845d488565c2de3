// The one interface through which everything above the backends reaches a device: tensors
// (allocate, copy, accumulate, moves to and from the host), the streams and events of a run, the
// few facts about the machine the layers above need, and device timing for benchmarks and traces.
// backend/cpu and backend/cuda implement it (backend/backend.h hands out the one for a device
// kind); the host program's evaluator, the communication segments, the executor, the command
// line, the Python module and the benchmarks use it. Nothing here names a CUDA type: a stream
// crosses as an opaque handle (a cudaStream_t on CUDA, 0 on the CPU).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "alloy/host_ir/program.h"
#include "alloy/tensor/tensor.h"

namespace alloy::host_ir {

struct RunState;

// The streams and events of one run of a program with side streams: stream 0 is the run's own
// (the caller's current stream).
class RunStreams {
 public:
  virtual ~RunStreams() = default;
  virtual void record(int stream, int event) = 0;
  virtual void wait(int stream, int event) = 0;
  // Makes `stream` the current one, where launches go, until the next call (0: the run's own).
  virtual void use(int stream) = 0;
  // The run's stream waits for everything enqueued on the side streams (a run cut short by an
  // error, whose buffers are freed in the run's stream order).
  virtual void join() = 0;
};

// Undoes what made it when it goes (a stream made current for a while).
class Scope {
 public:
  virtual ~Scope() = default;
};

// Device time of the work enqueued on the current stream between start() and stop().
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual double elapsed_ms() = 0;  // waits for stop()
  // Holds the current stream for `ms` (a host function that sleeps), so that what is enqueued
  // next starts after the device idled that long and its launch path is hidden.
  virtual void hold(double ms) = 0;
};

// The clock of one traced run (host_ir/trace.h): mark() records a point on the current stream,
// behind the work enqueued on it so far (CUDA: a timing event, recorded on the stream; the CPU,
// which runs every node as it is enqueued: the host's steady clock, read then), and returns its
// number, 0 first; times_us() waits for the device and gives each mark's microseconds after mark 0.
// Made only for a traced run, so an untraced run marks nothing.
class TraceClock {
 public:
  virtual ~TraceClock() = default;
  virtual int mark() = 0;
  virtual std::vector<double> times_us() = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual DeviceKind kind() const = 0;

  // ---- the machine ----
  virtual bool available() const = 0;  // never throws
  virtual std::string unavailable_reason() const = 0;  // "" when available
  virtual int device_count() const = 0;  // 0 when unavailable
  virtual std::string device_name(int index) const = 0;
  virtual int64_t memory_bytes(int index) const = 0;

  // ---- tensors, on the device's current stream ----
  // A contiguous uninitialized tensor (freed in the current stream's order).
  virtual Tensor empty(DType dtype, const std::vector<int64_t>& sizes, int index) const = 0;
  // Sets every byte the elements span to 0xFF (NaN for floats, -1 for integers): tests catch
  // kernels that skip elements.
  virtual void fill_poison(const Tensor& t) const = 0;
  // Sets every byte the elements span to 0 (zeros of every dtype): a pipelined reduce-scatter's
  // own term where the communicator reduces the other ranks' parts (ChunkedValue::landing).
  virtual void fill_zero(const Tensor& t) const = 0;
  // The tensor itself when it is packed, else a packed copy.
  virtual Tensor contiguous(const Tensor& t) const = 0;
  // dst = src: the same dtype and sizes, dst contiguous, src at any strides.
  virtual void copy(const Tensor& dst, const Tensor& src) const = 0;
  // into += the sum of `addends` (the same dtype and sizes, contiguous), added in one pass and
  // rounded once (16-bit floats summed in f32 or wider; a GPU rounds once per 8 addends); `into`
  // at any strides on the CPU, contiguous on a GPU (where there are addends).
  virtual void accumulate(const Tensor& into, const std::vector<Tensor>& addends) const = 0;
  // A contiguous copy on device `index` of a host tensor at any strides.
  virtual Tensor to_device(const Tensor& host, int index) const = 0;
  // A contiguous host copy of a tensor of this kind; waits for the stream.
  virtual Tensor to_host(const Tensor& t) const = 0;
  // Waits for everything enqueued on device `index`'s current stream.
  virtual void synchronize(int index) const = 0;

  // ---- streams ----
  virtual std::unique_ptr<RunStreams> open_streams(const Program& program, RunState& state) const = 0;
  // Makes a caller's stream (its handle) the current one of device `index` while the scope lives.
  virtual std::unique_ptr<Scope> use_stream(int index, uintptr_t handle) const = 0;
  // The current stream's handle (what a communicator enqueues on).
  virtual uintptr_t current_stream(int index) const = 0;

  // ---- timing ----
  virtual std::unique_ptr<DeviceTimer> timer(int index) const = 0;
  // A traced run's clock, for the streams of device `index`.
  virtual std::unique_ptr<TraceClock> trace_clock(int index) const = 0;

  // An Allocate node's buffer: empty() on the run's device, poisoned where the run asks for it.
  Tensor allocate(DType dtype, const std::vector<int64_t>& sizes, const RunState& state) const;
};

// The ranks a ring loop steps through (a multidevice::Communicator is one): this device's rank,
// and one step's exchange.
class Team {
 public:
  virtual ~Team() = default;
  int rank() const { return rank_; }  // in the team
  int size() const { return size_; }  // devices in the team
  // Sends `in` to team rank `to` while receiving `out` from team rank `from`: every rank calls it
  // at once, so it must not wait for its send before receiving.
  virtual void send_recv(const Tensor& in, int to, const Tensor& out, int from) = 0;

 protected:
  Team(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_, size_;
};

}  // namespace alloy::host_ir
