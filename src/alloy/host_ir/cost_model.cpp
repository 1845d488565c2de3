#include "alloy/host_ir/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

namespace alloy::host_ir {
namespace {

std::string number(double v, const char* unit) {
  char text[64];
  std::snprintf(text, sizeof text, v >= 100 ? "%.0f %s" : "%.3g %s", v, unit);
  return text;
}

constexpr double kMargin = 0.03;

double collective_us(const MachineCosts& c, double bytes) { return c.gather_latency_us + bytes / c.gather_bytes_per_us; }
double hop_us(const MachineCosts& c, double bytes) { return c.hop_latency_us + bytes / c.hop_bytes_per_us; }

// The unpipelined program's all-gather or reduce-scatter of `bytes` a block (the chunked
// collective's cost where that was not measured).
double off_collective_us(const MachineCosts& c, PairShape::Kind kind, double bytes) {
  bool scatter = kind == PairShape::Kind::gemm_reduce_scatter;
  double latency = scatter ? c.off_scatter_latency_us : c.off_gather_latency_us;
  double rate = scatter ? c.off_scatter_bytes_per_us : c.off_gather_bytes_per_us;
  return rate > 0 ? latency + bytes / rate : collective_us(c, bytes);
}

// a then b: overlapped steps cost the slower one, or both where nothing overlaps
double step(const MachineCosts& c, double a, double b) { return c.overlaps ? std::max(a, b) : a + b; }

}  // namespace

std::string MachineCosts::str() const {
  // bytes/us is MB/s; flops/us is MFLOP/s
  return "link hop " + number(hop_latency_us, "us") + " + bytes at " + number(hop_bytes_per_us / 1e3, "GB/s") + ", collective " +
         number(gather_latency_us, "us") + " + bytes at " + number(gather_bytes_per_us / 1e3, "GB/s") +
         (off_gather_bytes_per_us > 0 ? ", unpipelined all-gather " + number(off_gather_latency_us, "us") + " + bytes at " +
                                            number(off_gather_bytes_per_us / 1e3, "GB/s")
                                      : "") +
         (off_scatter_bytes_per_us > 0 ? ", reduce-scatter " + number(off_scatter_latency_us, "us") + " + bytes at " +
                                             number(off_scatter_bytes_per_us / 1e3, "GB/s")
                                       : "") +
         ", GEMM " +
         number(gemm_flops_per_us / 1e6, "TFLOP/s") + " (half rate at " + number(gemm_half_rows, "rows") + ", " +
         number(launch_us, "us") + " a launch)" + (overlaps ? "" : ", nothing overlaps") +
         (chunks_take_no_sms ? ", chunks by the copy engines (no ring)" : "") + "; " + key + ", " + source;
}

double gemm_us(const MachineCosts& c, double rows, const PairShape& s) {
  return c.launch_us + 2.0 * (rows + c.gemm_half_rows) * double(s.k) * double(s.n) / c.gemm_flops_per_us;
}

double all_reduce_us(const MachineCosts& c, double bytes, int parts) {
  return parts > 1 ? 2 * collective_us(c, bytes / parts) : 0;
}

double off_us(const MachineCosts& c, const PairShape& s) {
  if (s.kind == PairShape::Kind::gemm_all_reduce) return all_reduce_us(c, double(s.block_bytes), s.parts) + gemm_us(c, double(s.rows), s);
  return off_collective_us(c, s.kind, double(s.block_bytes)) + gemm_us(c, double(s.rows) * s.parts, s);
}

namespace {

// GEMM -> all-reduce in `chunks`: chunk i's all-reduce once its GEMM and chunk i - 1's all-reduce are done.
double all_reduce_chunks_us(const MachineCosts& c, const PairShape& s, int chunks) {
  const double comm = all_reduce_us(c, double(s.block_bytes) / chunks, s.parts);
  const double gemm = gemm_us(c, double(s.rows) / chunks, s);
  if (!c.overlaps) return chunks * (comm + gemm);
  double compute = 0, link = 0;
  for (int i = 0; i < chunks; ++i) {
    compute += gemm;
    link = std::max(link, compute) + comm;
  }
  return link;
}

}  // namespace

namespace {

// The loop's timeline where streams overlap (pipeline_collectives.h's loops): chunk i's two GEMM
// launches (the own block's, and the other blocks' as one) on compute stream i % kPoolStreams, the
// collectives in order on the communication stream. The pool's streams share the device: it runs
// one launch at a time, the earliest ready head of a stream (ties: the earlier chunk), so a stream
// waiting for its chunk's transfer leaves the device to the other's next chunk.
//   all-gather -> GEMM: chunk i is [own, others]; chunk i of the other blocks arrives at (i + 1) c
//     (sent at once, one after the other); the others' launch waits for it. Where the blocks land
//     one by one (`arrivals` of them: the copy engines, each GEMM waiting for its own block),
//     block j of chunk i lands at i c + j c / arrivals, and the others' launches (one a block, in
//     that order) can start before the last block is there: as one launch of their summed time,
//     it starts at the latest of (block j's landing - the j - 1 launches before it).
//   GEMM -> reduce-scatter: chunk i is [others, own]; the others' partial sums are sent when their
//     launch ends (after the link's previous transfer) and land c later; the own launch adds what
//     landed (cuBLASLt's C, or the copying communicators' sum), so it waits for the landing. By
//     the copy engines, each block's part is sent when its own launch ends (c / arrivals each),
//     and the own launch waits for the first to land (its C), adding each later one once landed.
constexpr int kPoolStreams = 2;

double pool_timeline(bool gather, int chunks, double own, double others, double comm, int arrivals) {
  std::vector<double> landed(size_t(chunks), std::numeric_limits<double>::infinity());
  std::vector<double> first_landed = landed;  // a reduce-scatter's first part (the own launch's C)
  if (gather) {
    // the others' launch may start once each block's launch finds its block landed
    double first = 0;
    for (int j = 1; j <= arrivals; ++j) first = std::max(first, j * comm / arrivals - (j - 1) * others / arrivals);
    for (int i = 0; i < chunks; ++i) landed[size_t(i)] = i * comm + first;
  }
  std::vector<int> next(kPoolStreams, 0);        // each stream's next launch: 2 * (its k-th chunk) + (0 or 1)
  std::vector<double> stream_free(kPoolStreams, 0);
  double device_free = 0, link_free = 0;
  for (int launched = 0; launched < 2 * chunks; ++launched) {
    int pick = -1;
    double pick_ready = std::numeric_limits<double>::infinity();
    for (int p = 0; p < kPoolStreams; ++p) {
      int chunk = p + kPoolStreams * (next[size_t(p)] / 2);
      if (chunk >= chunks) continue;
      bool second = next[size_t(p)] % 2 == 1;   // the launch that waits for the link
      double waits_for = gather ? landed[size_t(chunk)] : first_landed[size_t(chunk)];
      double ready = std::max(stream_free[size_t(p)], second ? waits_for : 0.0);
      if (pick < 0 || ready < pick_ready) pick = p, pick_ready = ready;
    }
    int chunk = pick + kPoolStreams * (next[size_t(pick)] / 2);
    bool second = next[size_t(pick)] % 2 == 1;
    double work = gather == second ? others : own;
    double end = std::max(device_free, pick_ready) + work;
    device_free = stream_free[size_t(pick)] = end;
    // the own launch adds the later parts as they land (its stream, not the device, waits)
    if (!gather && second) stream_free[size_t(pick)] = std::max(end, landed[size_t(chunk)]);
    ++next[size_t(pick)];
    if (!gather && !second) {  // each block's part sent once its launch ends (one by one where `arrivals` > 1)
      for (int j = 1; j <= arrivals; ++j) {
        link_free = std::max(link_free, end - work + j * work / arrivals) + comm / arrivals;
        if (j == 1) first_landed[size_t(chunk)] = link_free;
      }
      landed[size_t(chunk)] = link_free;
    }
  }
  return std::max(device_free, *std::max_element(stream_free.begin(), stream_free.end()));
}

}  // namespace

double chunks_us(const MachineCosts& c, const PairShape& s, int chunks) {
  if (s.kind == PairShape::Kind::gemm_all_reduce) return all_reduce_chunks_us(c, s, chunks);
  const double comm = collective_us(c, double(s.block_bytes) / chunks);
  const double gemm = gemm_us(c, double(s.rows) / chunks, s);  // one block's chunk
  const int others = s.parts - 1;
  if (!c.overlaps) return chunks * (comm + s.parts * gemm);
  return pool_timeline(s.kind == PairShape::Kind::all_gather_gemm, chunks, gemm, others * gemm, comm,
                       c.chunks_take_no_sms ? std::max(others, 1) : 1);
}

double ring_us(const MachineCosts& c, const PairShape& s) {
  double gemm = gemm_us(c, double(s.rows), s);
  return gemm + (s.parts - 1) * step(c, hop_us(c, double(s.block_bytes)), gemm);
}

std::string Candidate::name() const {
  return choice.variant == PipelineChoice::Variant::off    ? "off"
         : choice.variant == PipelineChoice::Variant::ring ? "ring"
                                                           : "chunks=" + std::to_string(choice.chunks);
}

std::vector<Candidate> pipeline_candidates(const MachineCosts& c, const PairShape& s) {
  std::vector<Candidate> out{{PipelineChoice{}, off_us(c, s)}};
  for (int chunks = 1; chunks <= 16 && chunks <= std::max<int64_t>(1, s.rows); chunks *= 2)
    out.push_back({{PipelineChoice::Variant::chunks, chunks, ""}, chunks_us(c, s, chunks)});
  if (s.ring_ok && s.parts > 1 && s.kind != PairShape::Kind::gemm_all_reduce && !c.chunks_take_no_sms)
    out.push_back({{PipelineChoice::Variant::ring, 0, ""}, ring_us(c, s)});
  return out;
}

PipelineChoice choose_pipeline(const MachineCosts& c, const PairShape& s) {
  std::vector<Candidate> candidates = pipeline_candidates(c, s);
  // a pipelined program must win by a margin (kMargin of off, and a microsecond) to be chosen:
  // the model's errors then cost little, where a near tie would pay the loop's own overheads
  const double off = candidates[0].us;
  double best_us = std::min(off * (1 - kMargin), off - 1);
  size_t best = 0;
  std::string times;
  for (size_t i = 0; i < candidates.size(); ++i) {
    times += (i ? ", " : "") + candidates[i].name() + " " + number(candidates[i].us, "us");
    if (i > 0 && candidates[i].us < best_us) best_us = candidates[best = i].us;
  }
  PipelineChoice chosen = candidates[best].choice;
  const char* rows = s.kind == PairShape::Kind::gemm_all_reduce ? " rows (every rank's), K " : " rows a block, K ";
  const char* bytes = s.kind == PairShape::Kind::gemm_all_reduce ? " bytes all-reduced, " : " bytes a block, ";
  chosen.why = candidates[best].name() + " (model: " + times + "; " + std::to_string(s.rows) + rows + std::to_string(s.k) + ", N " +
               std::to_string(s.n) + ", " + std::to_string(s.block_bytes) + bytes + std::to_string(s.parts) +
               " ranks; machine: " + c.str() + ")";
  return chosen;
}

}  // namespace alloy::host_ir
