#include "alloy/host_ir/cost_model.h"

#include <algorithm>
#include <cstdio>

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

// a then b: overlapped steps cost the slower one, or both where nothing overlaps
double step(const MachineCosts& c, double a, double b) { return c.overlaps ? std::max(a, b) : a + b; }

}  // namespace

std::string MachineCosts::str() const {
  // bytes/us is MB/s; flops/us is MFLOP/s
  return "link hop " + number(hop_latency_us, "us") + " + bytes at " + number(hop_bytes_per_us / 1e3, "GB/s") + ", collective " +
         number(gather_latency_us, "us") + " + bytes at " + number(gather_bytes_per_us / 1e3, "GB/s") + ", GEMM " +
         number(gemm_flops_per_us / 1e6, "TFLOP/s") + " (half rate at " + number(gemm_half_rows, "rows") + ", " +
         number(launch_us, "us") + " a launch)" + (overlaps ? "" : ", nothing overlaps") + "; " + key + ", " + source;
}

double gemm_us(const MachineCosts& c, double rows, const PairShape& s) {
  return c.launch_us + 2.0 * (rows + c.gemm_half_rows) * double(s.k) * double(s.n) / c.gemm_flops_per_us;
}

double all_reduce_us(const MachineCosts& c, double bytes, int parts) {
  return parts > 1 ? 2 * collective_us(c, bytes / parts) : 0;
}

double off_us(const MachineCosts& c, const PairShape& s) {
  if (s.kind == PairShape::Kind::gemm_all_reduce) return all_reduce_us(c, double(s.block_bytes), s.parts) + gemm_us(c, double(s.rows), s);
  return collective_us(c, double(s.block_bytes)) + gemm_us(c, double(s.rows) * s.parts, s);
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

double chunks_us(const MachineCosts& c, const PairShape& s, int chunks) {
  if (s.kind == PairShape::Kind::gemm_all_reduce) return all_reduce_chunks_us(c, s, chunks);
  const double comm = collective_us(c, double(s.block_bytes) / chunks);
  const double gemm = gemm_us(c, double(s.rows) / chunks, s);  // one block's chunk
  const int others = s.parts - 1;
  if (!c.overlaps) return chunks * (comm + s.parts * gemm);
  double compute = 0, link = 0;
  for (int i = 0; i < chunks; ++i) {
    if (s.kind == PairShape::Kind::all_gather_gemm) {
      link += comm;                                      // chunk i of every other block arrives
      compute += gemm;                                   // the own block's chunk: nothing to wait for
      compute = std::max(compute, link) + others * gemm; // the others' once they are here
    } else {
      compute += others * gemm;                          // the others' partial sums, sent ...
      link = std::max(link, compute) + comm;             // ... while the own block's GEMM runs
      compute += gemm;
      link = std::max(link, compute);                    // this rank's part finished after it
    }
  }
  return std::max(compute, link);
}

double ring_us(const MachineCosts& c, const PairShape& s) {
  double gemm = gemm_us(c, double(s.rows), s);
  return gemm + (s.parts - 1) * step(c, hop_us(c, double(s.block_bytes)), gemm);
}

PipelineChoice choose_pipeline(const MachineCosts& c, const PairShape& s) {
  PipelineChoice best;
  // a pipelined program must win by a margin (kMargin of off, and a microsecond) to be chosen:
  // the model's errors then cost little, where a near tie would pay the loop's own overheads
  const double off = off_us(c, s);
  double best_us = std::min(off * (1 - kMargin), off - 1);
  std::string times = "off " + number(off, "us");
  for (int chunks = 1; chunks <= 16 && chunks <= std::max<int64_t>(1, s.rows); chunks *= 2) {
    double t = chunks_us(c, s, chunks);
    times += ", chunks=" + std::to_string(chunks) + " " + number(t, "us");
    if (t < best_us) {
      best_us = t;
      best = {PipelineChoice::Variant::chunks, chunks, ""};
    }
  }
  if (s.ring_ok && s.parts > 1 && s.kind != PairShape::Kind::gemm_all_reduce) {
    double t = ring_us(c, s);
    times += ", ring " + number(t, "us");
    if (t < best_us) {
      best_us = t;
      best = {PipelineChoice::Variant::ring, 0, ""};
    }
  }
  std::string chosen = best.variant == PipelineChoice::Variant::off      ? "off"
                       : best.variant == PipelineChoice::Variant::ring ? "ring"
                                                                       : "chunks=" + std::to_string(best.chunks);
  const char* rows = s.kind == PairShape::Kind::gemm_all_reduce ? " rows (every rank's), K " : " rows a block, K ";
  const char* bytes = s.kind == PairShape::Kind::gemm_all_reduce ? " bytes all-reduced, " : " bytes a block, ";
  best.why = chosen + " (model: " + times + "; " + std::to_string(s.rows) + rows + std::to_string(s.k) + ", N " +
             std::to_string(s.n) + ", " + std::to_string(s.block_bytes) + bytes + std::to_string(s.parts) +
             " ranks; machine: " + c.str() + ")";
  return best;
}

}  // namespace alloy::host_ir
