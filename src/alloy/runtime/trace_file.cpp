#include "alloy/runtime/trace_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "alloy/common/error.h"
#include "alloy/multidevice/communicator.h"

namespace alloy {
namespace {

using nlohmann::json;

// Nanoseconds are the finest a CUDA event resolves; fewer digits keep the file small.
double rounded(double us) { return std::round(us * 1000.0) / 1000.0; }

json spans_to_json(const std::vector<host_ir::Span>& spans) {
  json out = json::array();
  for (const host_ir::Span& s : spans) out.push_back({s.name, int(s.kind), s.track, rounded(s.start_us), rounded(s.end_us)});
  return out;
}

std::vector<host_ir::Span> spans_from_json(const json& in) {
  std::vector<host_ir::Span> out;
  for (const json& s : in)
    out.push_back({s.at(0).get<std::string>(), host_ir::SpanKind(s.at(1).get<int>()), s.at(2).get<int>(), s.at(3).get<double>(),
                   s.at(4).get<double>()});
  return out;
}

// What a stream did, for its name: the run's own, else what its spans were mostly.
std::string stream_label(int stream, const std::vector<host_ir::Span>& spans) {
  if (stream == 0) return "run";
  std::map<host_ir::SpanKind, double> time;
  for (const host_ir::Span& s : spans)
    if (s.track == stream) time[s.kind] += s.end_us - s.start_us + 1e-9;
  if (time.count(host_ir::SpanKind::communication)) return "communication";
  if (time.count(host_ir::SpanKind::compute)) return "compute";
  return "side";
}

json metadata(const char* what, int pid, int tid, json args) {
  json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

}  // namespace

std::vector<RankSpans> gather_job_spans(const std::vector<host_ir::Span>& mine) {
  const multidevice::ProcessInfo& process = multidevice::process();
  if (process.size == 1) return {{process.rank, mine}};
  std::string text = spans_to_json(mine).dump();
  uint64_t length = text.size();
  std::vector<uint64_t> lengths(size_t(process.size));
  multidevice::job_all_gather(&length, sizeof length, lengths.data());
  size_t longest = size_t(*std::max_element(lengths.begin(), lengths.end()));
  longest = (longest + 7) / 8 * 8;  // the job's gather moves whole 8-byte words
  text.resize(std::max<size_t>(longest, 8), ' ');
  std::string all(text.size() * size_t(process.size), ' ');
  multidevice::job_all_gather(text.data(), text.size(), all.data());
  std::vector<RankSpans> out;
  for (int r = 0; r < process.size; ++r) {
    std::string part = all.substr(size_t(r) * text.size(), size_t(lengths[size_t(r)]));
    out.push_back({r, spans_from_json(json::parse(part))});
  }
  return out;
}

std::string chrome_trace_json(const std::vector<RankSpans>& ranks) {
  json events = json::array();
  for (const RankSpans& rank : ranks) {
    int pid = rank.rank;
    events.push_back(metadata("process_name", pid, -1, {{"name", "rank " + std::to_string(rank.rank)}}));
    events.push_back(metadata("process_sort_index", pid, -1, {{"sort_index", rank.rank}}));
    std::map<int, bool> tracks;
    for (const host_ir::Span& s : rank.spans) tracks[s.track] = true;
    for (auto& [track, _] : tracks) {
      int tid = track == host_ir::kHostTrack ? kHostTid : track;
      std::string name = track == host_ir::kHostTrack ? "host" : "stream " + std::to_string(track) + " (" + stream_label(track, rank.spans) + ")";
      events.push_back(metadata("thread_name", pid, tid, {{"name", name}}));
      events.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", track}}));  // the host first, then the streams
    }
    for (const host_ir::Span& s : rank.spans)
      events.push_back({{"name", s.name},
                        {"cat", host_ir::span_kind_name(s.kind)},
                        {"ph", "X"},
                        {"pid", pid},
                        {"tid", s.track == host_ir::kHostTrack ? kHostTid : s.track},
                        {"ts", rounded(s.start_us)},
                        {"dur", rounded(std::max(0.0, s.end_us - s.start_us))}});
  }
  // one event a line: a file of thousands of events stays readable (and greppable) as text
  std::string out = "{\"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) out += events[i].dump() + (i + 1 < events.size() ? ",\n" : "\n");
  return out + "],\n\"displayTimeUnit\": \"ms\"}\n";
}

void write_chrome_trace(const std::string& path, const std::vector<RankSpans>& ranks) {
  std::string text = chrome_trace_json(ranks);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) user_error_at("trace file " + path, "cannot be written: ", std::strerror(errno));
  out << text;
  out.close();
  if (!out) user_error_at("trace file " + path, "could not be written completely: ", std::strerror(errno));
}

host_ir::CommunicationOverlap communication_under_compute(const std::vector<RankSpans>& ranks) {
  host_ir::CommunicationOverlap total;
  for (const RankSpans& rank : ranks) total += host_ir::communication_under_compute(rank.spans);
  return total;
}

}  // namespace alloy
