// The timeline of one run of a host program (`alloy run --trace`, `fd.execute(..., trace=...)`):
// the evaluator (host_ir/evaluator.h) opens a span around each node that enqueues work, timed by
// the device's TraceClock (host_ir/device_runtime.h: CUDA events on the node's stream, the host's
// clock on the CPU) and by the host's clock (the time the host took to enqueue it, on the host
// track); and, from a run's spans, the share of its communication that ran under compute
// (`alloy run --bench`). runtime/trace_file.h gathers the spans of a job and writes them as a
// Chrome trace-event file.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "alloy/host_ir/device_runtime.h"

namespace alloy::host_ir {

// What a span's node did. Compute: a Launch (a kernel, a GEMM or its chunk) or a ring's Accumulate;
// communication: a collective (Communicate) or a ring's SendRecv; copy: a view segment, a slice of
// this device's part, a copy into a chunk; wait: a stream waiting for an event; host: host-only work
// (an allocation, the cost model's choice, the whole run).
enum class SpanKind { compute, communication, copy, wait, host };
const char* span_kind_name(SpanKind kind);

// The host's track: spans of the host's own time (every other track is a stream of the run).
constexpr int kHostTrack = -1;

// One span, in microseconds after the run's start (the device's first mark for a stream's track,
// the host's time of that mark for the host's track).
struct Span {
  std::string name;
  SpanKind kind = SpanKind::compute;
  int track = 0;  // the stream (0: the run's own), or kHostTrack
  double start_us = 0;
  double end_us = 0;
};

// Collects one run's spans: begin_run() first, then open() before a node's work is enqueued on the
// current stream and close() after it; finish() waits for the device and turns the marks into spans
// (each device span with its twin on the host's track, and the whole run's host span).
class TraceRecorder {
 public:
  TraceRecorder(std::unique_ptr<TraceClock> clock, std::string run_name);
  void begin_run();
  // A span of work enqueued on `stream` (the current stream) between open() and close(); with
  // kHostTrack, of host time only.
  int open(std::string name, SpanKind kind, int stream);
  void close(int span);
  std::vector<Span> finish();

 private:
  using HostTime = std::chrono::steady_clock::time_point;
  struct Open {
    std::string name;
    SpanKind kind;
    int stream;
    int start_mark = -1, end_mark = -1;  // device marks (none on the host's track)
    HostTime host_start, host_end;
  };
  std::unique_ptr<TraceClock> clock_;
  std::string run_name_;
  HostTime run_start_;
  std::vector<Open> spans_;
};

// Communication time and the part of it under compute: for each communication span, the time some
// compute span on another stream of the same run covers (less the waits inside it on its stream: a
// GEMM waiting for a landed part computes nothing then); a share of 1 hides every collective behind
// the GEMMs. Host-track spans do not count. Ranks add up (`+=`).
struct CommunicationOverlap {
  double communication_us = 0;
  double under_compute_us = 0;
  double share() const { return communication_us > 0 ? under_compute_us / communication_us : 0; }
  CommunicationOverlap& operator+=(const CommunicationOverlap& other);
};
CommunicationOverlap communication_under_compute(const std::vector<Span>& spans);

}  // namespace alloy::host_ir
