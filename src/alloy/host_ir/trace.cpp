#include "alloy/host_ir/trace.h"

#include <algorithm>
#include <map>

#include "alloy/common/error.h"

namespace alloy::host_ir {

const char* span_kind_name(SpanKind kind) {
  switch (kind) {
    case SpanKind::compute: return "compute";
    case SpanKind::communication: return "communication";
    case SpanKind::copy: return "copy";
    case SpanKind::wait: return "wait";
    case SpanKind::host: return "host";
  }
  return "?";
}

TraceRecorder::TraceRecorder(std::unique_ptr<TraceClock> clock, std::string run_name)
    : clock_(std::move(clock)), run_name_(std::move(run_name)) {
  ALLOY_CHECK(clock_ != nullptr, "a trace without a clock");
}

void TraceRecorder::begin_run() {
  ALLOY_CHECK(spans_.empty(), "a trace's run began twice");
  run_start_ = std::chrono::steady_clock::now();
  clock_->mark();  // mark 0: the device's start of the run, on the run's stream
}

int TraceRecorder::open(std::string name, SpanKind kind, int stream) {
  Open span{std::move(name), kind, stream, -1, -1, std::chrono::steady_clock::now(), {}};
  if (stream != kHostTrack) span.start_mark = clock_->mark();
  spans_.push_back(std::move(span));
  return int(spans_.size()) - 1;
}

void TraceRecorder::close(int span) {
  Open& s = spans_.at(size_t(span));
  if (s.stream != kHostTrack) s.end_mark = clock_->mark();
  s.host_end = std::chrono::steady_clock::now();
}

std::vector<Span> TraceRecorder::finish() {
  auto host_end = std::chrono::steady_clock::now();
  std::vector<double> device = clock_->times_us();
  auto host_us = [&](HostTime t) { return std::chrono::duration<double, std::micro>(t - run_start_).count(); };
  std::vector<Span> out;
  out.reserve(2 * spans_.size() + 1);
  out.push_back({"run " + run_name_, SpanKind::host, kHostTrack, 0, host_us(host_end)});
  for (const Open& s : spans_) {
    ALLOY_CHECK(s.stream == kHostTrack || s.end_mark >= 0, "span '", s.name, "' was never closed");
    // A wait's first mark, on a side stream idle before the run, may pass before mark 0 (which
    // follows the run's stream's earlier work): such a wait counts from the run's start.
    if (s.stream != kHostTrack)
      out.push_back({s.name, s.kind, s.stream, std::max(0.0, device.at(size_t(s.start_mark))), std::max(0.0, device.at(size_t(s.end_mark)))});
    out.push_back({s.name, s.stream == kHostTrack ? s.kind : SpanKind::host, kHostTrack, host_us(s.host_start), host_us(s.host_end)});
  }
  spans_.clear();
  return out;
}

CommunicationOverlap& CommunicationOverlap::operator+=(const CommunicationOverlap& other) {
  communication_us += other.communication_us;
  under_compute_us += other.under_compute_us;
  return *this;
}

CommunicationOverlap communication_under_compute(const std::vector<Span>& spans) {
  std::map<int, std::vector<std::pair<double, double>>> compute, waits;  // by stream
  for (const Span& s : spans)
    if (s.track != kHostTrack && s.end_us > s.start_us && (s.kind == SpanKind::compute || s.kind == SpanKind::wait))
      (s.kind == SpanKind::compute ? compute : waits)[s.track].emplace_back(s.start_us, s.end_us);
  // a wait inside a compute span (the own GEMM of a reduce-scatter loop waiting for a landed part)
  // is the stream idling, not computing: cut out of it
  for (auto& [stream, intervals] : compute) {
    auto it = waits.find(stream);
    if (it == waits.end()) continue;
    std::sort(it->second.begin(), it->second.end());
    std::vector<std::pair<double, double>> pieces;
    for (auto [begin, end] : intervals) {
      for (auto [wait_begin, wait_end] : it->second) {
        if (wait_end <= begin || wait_begin >= end) continue;
        if (wait_begin > begin) pieces.emplace_back(begin, wait_begin);
        begin = std::max(begin, wait_end);
      }
      if (end > begin) pieces.emplace_back(begin, end);
    }
    intervals = std::move(pieces);
  }
  CommunicationOverlap overlap;
  std::vector<std::pair<double, double>> covered;
  for (const Span& c : spans) {
    if (c.kind != SpanKind::communication || c.track == kHostTrack || c.end_us <= c.start_us) continue;
    overlap.communication_us += c.end_us - c.start_us;
    // the union of the other streams' compute, clipped to this span
    covered.clear();
    for (auto& [stream, intervals] : compute) {
      if (stream == c.track) continue;
      for (auto [begin, end] : intervals) {
        double b = std::max(begin, c.start_us), e = std::min(end, c.end_us);
        if (e > b) covered.emplace_back(b, e);
      }
    }
    std::sort(covered.begin(), covered.end());
    double reach = c.start_us;
    for (auto [begin, end] : covered) {
      begin = std::max(begin, reach);
      if (end > begin) overlap.under_compute_us += end - begin;
      reach = std::max(reach, end);
    }
  }
  return overlap;
}

}  // namespace alloy::host_ir
