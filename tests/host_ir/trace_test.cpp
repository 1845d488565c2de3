// The trace recorder (host_ir/trace.h): spans from a clock's marks, their host twins, and the share
// of communication under compute on synthetic spans, exactly.
#include "alloy/host_ir/trace.h"

#include <gtest/gtest.h>

#include "alloy/common/error.h"

namespace alloy::host_ir {
namespace {

// A device clock whose mark k is at 10 k microseconds.
class StepClock final : public TraceClock {
 public:
  int mark() override { return marks_++; }
  std::vector<double> times_us() override {
    std::vector<double> out;
    for (int k = 0; k < marks_; ++k) out.push_back(10.0 * k);
    return out;
  }

 private:
  int marks_ = 0;
};

TEST(TraceRecorder, EachSpanOnItsStreamFromTheDevicesMarks_WithItsTwinOnTheHostTrack) {
  TraceRecorder recorder(std::make_unique<StepClock>(), "f");
  recorder.begin_run();                                            // mark 0
  int a = recorder.open("matmul h", SpanKind::compute, 0);       // mark 1
  recorder.close(a);                                               // mark 2
  int b = recorder.open("allocate g", SpanKind::host, kHostTrack);  // no marks
  recorder.close(b);
  int c = recorder.open("all_gather x chunk 1", SpanKind::communication, 1);  // marks 3, 4
  recorder.close(c);
  std::vector<Span> spans = recorder.finish();
  ASSERT_EQ(spans.size(), 6u);
  EXPECT_EQ(spans[0].name, "run f");
  EXPECT_EQ(spans[0].track, kHostTrack);
  EXPECT_EQ(spans[0].start_us, 0);
  // the device spans, with the clock's times
  EXPECT_EQ(spans[1].name, "matmul h");
  EXPECT_EQ(spans[1].kind, SpanKind::compute);
  EXPECT_EQ(spans[1].track, 0);
  EXPECT_EQ(spans[1].start_us, 10);
  EXPECT_EQ(spans[1].end_us, 20);
  EXPECT_EQ(spans[4].name, "all_gather x chunk 1");
  EXPECT_EQ(spans[4].track, 1);
  EXPECT_EQ(spans[4].start_us, 30);
  EXPECT_EQ(spans[4].end_us, 40);
  // the host's: each device span's twin, and host-only work, on the host's track
  EXPECT_EQ(spans[2].name, "matmul h");
  EXPECT_EQ(spans[2].kind, SpanKind::host);
  EXPECT_EQ(spans[2].track, kHostTrack);
  EXPECT_EQ(spans[3].name, "allocate g");
  EXPECT_EQ(spans[3].track, kHostTrack);
  EXPECT_EQ(spans[5].track, kHostTrack);
  for (const Span& s : spans) EXPECT_LE(s.start_us, s.end_us) << s.name;
  EXPECT_GE(spans[0].end_us, spans[5].end_us);  // the run's host span holds every other
}

TEST(TraceRecorder, AnUnclosedSpan_IsAnInternalError) {
  TraceRecorder recorder(std::make_unique<StepClock>(), "f");
  recorder.begin_run();
  recorder.open("matmul h", SpanKind::compute, 0);
  EXPECT_THROW(recorder.finish(), InternalError);
}

// Communication 1 [0, 10) on stream 1 has compute on stream 2 over [2, 5) and [4, 8) (6 us of
// union) and on its own stream (not counted), and host-track compute (not counted); communication
// 2 [20, 30) on stream 1 has compute on stream 0 over [25, 40) (5 us). 11 of 20 us: 0.55.
TEST(CommunicationOverlap, UnderComputeOnOtherStreams_OfSyntheticSpans_IsExact) {
  std::vector<Span> spans = {
      {"all_gather x chunk 0", SpanKind::communication, 1, 0, 10},
      {"linear h chunk 0", SpanKind::compute, 2, 2, 5},
      {"linear h chunk 1", SpanKind::compute, 2, 4, 8},
      {"linear on the same stream", SpanKind::compute, 1, 0, 10},
      {"host twin", SpanKind::compute, kHostTrack, 0, 10},
      {"copy h chunk 0", SpanKind::copy, 3, 0, 10},
      {"wait event 1", SpanKind::wait, 3, 0, 10},
      {"reduce_scatter y chunk 0", SpanKind::communication, 1, 20, 30},
      {"linear y", SpanKind::compute, 0, 25, 40},
  };
  CommunicationOverlap overlap = communication_under_compute(spans);
  EXPECT_DOUBLE_EQ(overlap.communication_us, 20);
  EXPECT_DOUBLE_EQ(overlap.under_compute_us, 11);
  EXPECT_DOUBLE_EQ(overlap.share(), 0.55);
  CommunicationOverlap job = overlap;
  job += communication_under_compute({{"send_recv x step 0", SpanKind::communication, 1, 0, 20}, {"linear h step 0", SpanKind::compute, 2, 0, 20}});
  EXPECT_DOUBLE_EQ(job.share(), 31.0 / 40.0);
}

// A wait nested in a compute span on its stream (the own GEMM of a reduce-scatter loop waiting for
// a landed part) is not compute: communication [0, 20) on stream 1 beside compute [0, 20) on
// stream 2 that waits [5, 15) on stream 2 is under compute for 10 us; a wait on another stream
// cuts nothing.
TEST(CommunicationOverlap, WaitsInsideComputeOnTheirStream_AreNotCompute) {
  CommunicationOverlap overlap = communication_under_compute({
      {"reduce_scatter y chunk 0", SpanKind::communication, 1, 0, 20},
      {"linear y chunk 0 block 0 + landed", SpanKind::compute, 2, 0, 20},
      {"wait for y's part 1", SpanKind::wait, 2, 5, 15},
      {"wait event 3", SpanKind::wait, 3, 0, 20},
  });
  EXPECT_DOUBLE_EQ(overlap.communication_us, 20);
  EXPECT_DOUBLE_EQ(overlap.under_compute_us, 10);
}

TEST(CommunicationOverlap, NoCommunication_IsAShareOfZero) {
  CommunicationOverlap overlap = communication_under_compute({{"linear h", SpanKind::compute, 0, 0, 10}});
  EXPECT_EQ(overlap.communication_us, 0);
  EXPECT_EQ(overlap.share(), 0);
}

}  // namespace
}  // namespace alloy::host_ir
