// A traced run (RunOptions::trace): the spans the evaluator opens for each node of a run, on the
// CPU and on the GPU (side streams, waits, device times), and the Chrome trace-event file they
// make (runtime/trace_file.h).
#include "alloy/runtime/trace_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "alloy/ir/parser.h"
#include "alloy/multidevice/communicator.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

using host_ir::kHostTrack;
using host_ir::Span;
using host_ir::SpanKind;

const Span* find_span(const std::vector<Span>& spans, const std::string& name, int track) {
  for (const Span& s : spans)
    if (s.name == name && s.track == track) return &s;
  return nullptr;
}

// On one stream the device runs spans one after another: each starts after the one before ends.
void expect_in_order_per_stream(const std::vector<Span>& spans) {
  std::map<int, double> last_end;
  for (const Span& s : spans) {
    EXPECT_LE(s.start_us, s.end_us) << s.name;
    EXPECT_GE(s.start_us, 0) << s.name;
    if (s.track == kHostTrack) continue;
    if (last_end.count(s.track)) EXPECT_GE(s.start_us, last_end[s.track]) << s.name << " on stream " << s.track;
    last_end[s.track] = s.end_us;
  }
}

TEST(Trace, CpuRun_ASpanPerLaunchOnTheRunsStream_ItsTwinOnTheHostTrack_AndTheOutputsUnchanged) {
  auto fusion = parse_fusion("fusion f(x: f32[N, 8]) {\n  e = exp(x)\n  s = sum(e, dims=[1])\n  return s\n}", "f.fusion");
  FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
  std::vector<Tensor> inputs = {random_tensor(DType::f32, {4, 8}, 3)};
  std::vector<Tensor> expected = executor.run(inputs);
  RunTrace trace;
  RunOptions options;
  options.trace = &trace;
  std::vector<Tensor> outputs = executor.run(inputs, options);
  EXPECT_TRUE(testing::tensors_close(outputs.at(0), expected.at(0)));
  ASSERT_EQ(trace.ranks.size(), 1u);
  EXPECT_EQ(trace.ranks[0].rank, multidevice::process().rank);
  const std::vector<Span>& spans = trace.ranks[0].spans;
  ASSERT_TRUE(find_span(spans, "run f", kHostTrack));
  for (const char* name : {"exp e", "sum s"}) {
    const Span* device = find_span(spans, name, 0);
    ASSERT_TRUE(device) << name;
    EXPECT_EQ(device->kind, SpanKind::compute);
    const Span* host = find_span(spans, name, kHostTrack);
    ASSERT_TRUE(host) << name;
    EXPECT_EQ(host->kind, SpanKind::host);
  }
  EXPECT_LE(find_span(spans, "exp e", 0)->end_us, find_span(spans, "sum s", 0)->start_us);
  expect_in_order_per_stream(spans);
}

TEST(Trace, ChromeFile_AProcessPerRank_AThreadPerStreamAndTheHost_CompleteEventsInMicroseconds) {
  std::vector<RankSpans> ranks = {
      {0, {{"run f", SpanKind::host, kHostTrack, 0, 50},
           {"all_gather x chunk 0", SpanKind::communication, 1, 1, 11.5},
           {"linear h chunk 0 block 1", SpanKind::compute, 2, 12, 30},
           {"linear h chunk 0 block 1", SpanKind::host, kHostTrack, 12, 13}}},
      {1, {}},  // a rank outside the mesh
  };
  nlohmann::json file = nlohmann::json::parse(chrome_trace_json(ranks));
  EXPECT_EQ(file["displayTimeUnit"], "ms");
  std::map<std::pair<int, int>, std::string> threads;
  std::map<int, std::string> processes;
  std::vector<nlohmann::json> complete;
  for (const auto& e : file["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "X") complete.push_back(e);
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  EXPECT_EQ(threads[std::make_pair(0, kHostTid)], "host");
  EXPECT_EQ(threads[std::make_pair(0, 1)], "stream 1 (communication)");
  EXPECT_EQ(threads[std::make_pair(0, 2)], "stream 2 (compute)");
  ASSERT_EQ(complete.size(), 4u);
  EXPECT_EQ(complete[1]["name"], "all_gather x chunk 0");
  EXPECT_EQ(complete[1]["cat"], "communication");
  EXPECT_EQ(complete[1]["pid"], 0);
  EXPECT_EQ(complete[1]["tid"], 1);
  EXPECT_DOUBLE_EQ(complete[1]["ts"].get<double>(), 1);
  EXPECT_DOUBLE_EQ(complete[1]["dur"].get<double>(), 10.5);
  EXPECT_EQ(complete[3]["tid"], kHostTid);
  EXPECT_EQ(complete[3]["cat"], "host");
}

TEST(Trace, AFileThatCannotBeWritten_IsAUserErrorNamingIt) {
  std::string path = (std::filesystem::temp_directory_path() / "alloy_no_such_dir" / "t.json").string();
  try {
    write_chrome_trace(path, {});
    ADD_FAILURE() << "wrote " << path;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Trace, GatherInAJobOfOne_IsThisProcesssSpans) {
  if (multidevice::process().size != 1) GTEST_SKIP() << "a job of one";
  std::vector<RankSpans> all = gather_job_spans({{"exp e", SpanKind::compute, 0, 1, 2}});
  ASSERT_EQ(all.size(), 1u);
  ASSERT_EQ(all[0].spans.size(), 1u);
  EXPECT_EQ(all[0].spans[0].name, "exp e");
}

// On the GPU: the MLP backward's bias gradients run on side stream 1 (host_ir/side_streams.h), so
// its trace has compute spans on stream 1, waits, and GEMMs on stream 0, timed by CUDA events in
// each stream's order.
TEST(TraceGpu, MlpBackward_SpansOnTheSideStream_WaitsAndGemms_TimedOnTheDevice) {
  ALLOY_REQUIRE_GPU();
  testing::ScopedEnv side("ALLOY_NO_SIDE_STREAM", "");
  std::string text = testing::read_file(testing::source_path("examples/mlp_backward.fusion"));
  FusionExecutor executor(parse_fusion(text, "mlp_backward.fusion"), {DeviceChoice::cuda});
  std::vector<Tensor> given(executor.fusion().inputs().size());
  std::vector<Tensor> inputs = complete_inputs(executor.fusion(), given, {{"T", 4096}}, 5);
  executor.run(inputs);  // compiles the kernels: the traced run is a warm one
  RunTrace trace;
  RunOptions options;
  options.trace = &trace;
  executor.run(inputs, options);
  ASSERT_EQ(trace.ranks.size(), 1u);
  const std::vector<Span>& spans = trace.ranks[0].spans;
  auto count = [&](auto&& pred) { return std::count_if(spans.begin(), spans.end(), pred); };
  EXPECT_GE(count([](const Span& s) { return s.track == 1 && s.kind == SpanKind::compute; }), 1) << "no span on side stream 1";
  EXPECT_GE(count([](const Span& s) { return s.kind == SpanKind::wait; }), 1) << "no wait";
  EXPECT_GE(count([](const Span& s) { return s.track == 0 && s.kind == SpanKind::compute && s.name.starts_with("matmul"); }), 4);
  // kernels take device time: the GEMMs' spans are not empty
  for (const Span& s : spans)
    if (s.track == 0 && s.name.starts_with("matmul")) EXPECT_GT(s.end_us, s.start_us) << s.name;
  expect_in_order_per_stream(spans);
}

}  // namespace
}  // namespace alloy
