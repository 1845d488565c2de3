// A traced run's timeline as a file (`alloy run --trace FILE`, `fd.execute(..., trace=FILE)`): the
// spans of each rank of the job (host_ir/trace.h), gathered over the job's host team, written as a
// Chrome trace-event file that Perfetto (ui.perfetto.dev) and chrome://tracing open: one process
// per rank ("rank 0"), one thread per stream ("stream 0 (run)", "stream 1 (communication)") and
// the host's ("host", tid kHostTid), a complete event ("X") per span with its kind as category,
// times in microseconds.
//
// Clocks: each rank's times count from its own run's start (the device's first mark on the run's
// stream; the host's time of that mark for the host's track). The ranks start a run of a fusion
// with a mesh together, right after the job's agreement (one all-gather), so their tracks line up
// to within that all-gather's skew (microseconds on one host), not to a shared clock.
#pragma once

#include <string>
#include <vector>

#include "alloy/host_ir/trace.h"

namespace alloy {

struct RankSpans {
  int rank = 0;  // in the job
  std::vector<host_ir::Span> spans;
};

// What a traced run fills in (RunOptions::trace): every rank's spans in a job of several processes
// running a fusion with a mesh (ranks outside the mesh have none), else this process's alone.
struct RunTrace {
  std::vector<RankSpans> ranks;
};

// The host's track in the file (streams are tids 0, 1, ...).
constexpr int kHostTid = 1000;

// Every rank of the job calls it together (two all-gathers: the sizes, then the spans padded to
// the longest): every rank's spans, by rank. A job of one: this process's.
std::vector<RankSpans> gather_job_spans(const std::vector<host_ir::Span>& mine);

// The Chrome trace-event JSON of `ranks`.
std::string chrome_trace_json(const std::vector<RankSpans>& ranks);
// Writes it to `path` (a user error naming the path where it cannot).
void write_chrome_trace(const std::string& path, const std::vector<RankSpans>& ranks);

// The job's communication time and the part of it under compute, every rank's added up.
host_ir::CommunicationOverlap communication_under_compute(const std::vector<RankSpans>& ranks);

}  // namespace alloy
