// cost_model: how `--pipeline auto` runs a pipelinable pair (host_ir/pipeline_collectives.h),
// from the machine's measured rates (runtime/tune/machine_costs.h measures and caches them) and the
// run's sizes. The model, per pair, with m the GEMM rows of one block (one rank's rows), K and N
// the GEMM's other sizes, B the bytes of one block on the link, n the team's ranks:
//   gemm(rows)  = launch + 2 * (rows + half_rows) * K * N / rate
//                 (a GEMM of `rows` rows runs at rate * rows / (rows + half_rows): small chunks
//                 lose efficiency; `launch` is the fixed cost of one GEMM);
//   coll(bytes) = gather_latency + bytes / gather_rate   (the collective, by each rank's bytes;
//                 a reduce-scatter is costed as the all-gather of the same bytes);
//   hop(bytes)  = hop_latency + bytes / hop_rate         (one send_recv between neighbours);
//   off         = off_coll(B) + gemm(n * m)   (off_coll: the unpipelined program's own all-gather or
//                 reduce-scatter, measured apart from the chunks' transfers: NCCL's kernels beside
//                 the copy engines' chunks; coll where not measured);
//   chunks S    = the loop's timeline, S in 1, 2, 4, 8, 16 up to m, with c = coll(B / S) and
//                 g = gemm(m / S) one block's chunk (host_ir/pipeline_collectives.h's bodies):
//                 chunk i's two launches (the own block's chunk, g, and the other blocks', (n - 1) g)
//                 on compute stream i % 2 of the loop's pool; the pool's streams share the device,
//                 which runs one launch at a time, the earliest ready head of a stream;
//                 all-gather -> GEMM: chunk i runs [own, others]; the link brings chunk i of the
//                   other blocks at (i + 1) c, and the others' launch waits for it;
//                 GEMM -> reduce-scatter: chunk i runs [others, own]; the others' partial sums are
//                   sent when their launch ends (after the link's previous send) and land c later;
//                   the own launch adds what landed (cuBLASLt's C), so it waits for the landing
//                   (one chunk hides nothing: S = 1 costs what off does);
//                 the time is the device's last launch's end;
//   ring        = g + (n - 1) * max(h, g),  g = gemm(m),  h = hop(B)
//                 (step s's hop overlaps step s's GEMM; the reduce-scatter ring's add is a read
//                 of two blocks and a write, neglected against its GEMM).
// GEMM -> all-reduce (a row-parallel linear whose output is replicated, Megatron's), with m every
// row (each rank computes every row of its partial sums P) and B the bytes of P:
//   allreduce(bytes) = 2 * coll(bytes / n)
//                 (a ring all-reduce moves 2 (n - 1) / n of the bytes on each rank's link: a
//                 reduce-scatter and an all-gather of bytes / n a rank, each costed as the
//                 measured all-gather of that block, which moves (n - 1) blocks);
//   off         = allreduce(B) + gemm(m);
//   chunks S    = the compute stream runs chunk i's GEMM (g = gemm(m / S)); the link all-reduces
//                 chunk i (a = allreduce(B / S)) once that GEMM and chunk i - 1's all-reduce are
//                 done; the link's end (only the last chunk's all-reduce is exposed);
//   no ring.  (On a GPU NCCL's all-reduce takes SMs from the GEMM beside it: not modelled.)
// Where nothing overlaps (`overlaps` false: the CPU runs every node in order) the max becomes a
// sum, so off is never slower. The cheapest wins, where it is at least 3% (and 1 us) faster than
// off by the model; ties go to the simpler program (off, then fewer chunks, then the ring).
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <vector>

namespace alloy::host_ir {

// The measured rates of one machine, team and communicator (microseconds and bytes).
struct MachineCosts {
  std::string key;                   // what they were measured for: device name, communicator, team size
  bool overlaps = true;              // whether communication and GEMMs run at once (CUDA streams)
  double hop_latency_us = 0, hop_bytes_per_us = 1;
  double gather_latency_us = 0, gather_bytes_per_us = 1;  // the loops' chunked all-gather
  // The unpipelined program's own collectives (the team's all_gather and sum reduce_scatter: NCCL's
  // kernels where the loops' chunks go by the copy engines), by the bytes of one block; a rate of
  // 0 (not measured) costs them as the chunked all-gather. On two H200s the reduce-scatter off
  // runs measured ~18% above the chunked gather's cost, and kept a faster chunks=2 off.
  double off_gather_latency_us = 0, off_gather_bytes_per_us = 0;
  double off_scatter_latency_us = 0, off_scatter_bytes_per_us = 0;
  double gemm_flops_per_us = 1;      // a large GEMM's rate
  double gemm_half_rows = 0;         // the rows at which a GEMM reaches half that rate
  double launch_us = 0;              // a GEMM's fixed cost
  std::string source;                // "measured" or "cache FILE" (for --dump program)
  // Whether the chunked loops' transfers take no SMs (the copy engines) while a ring's send/recv
  // would run as NCCL kernels beside its GEMMs: then the ring is no candidate (the formula has no
  // term for the SMs it takes; on two H200s it measured 2851 us against chunks=2's 2656, and off's
  // 2845, for GEMM -> reduce-scatter). Not measured: the team's communicator says (lands_in_place).
  bool chunks_take_no_sms = false;

  std::string str() const;           // the numbers, in the units a reader thinks in
};

// One pair at one run's sizes.
struct PairShape {
  enum class Kind { all_gather_gemm, gemm_reduce_scatter, gemm_all_reduce } kind = Kind::all_gather_gemm;
  int parts = 1;             // ranks of the team
  int64_t rows = 0;          // GEMM rows of one block (one rank's rows, times any batch axes;
                             // an all-reduce's: every row, which every rank computes)
  int64_t k = 0, n = 0;      // the GEMM's contraction and output widths (this device's)
  int64_t block_bytes = 0;   // bytes of one block on the link (an all-reduce's: its whole input)
  bool ring_ok = true;       // whether the pair has a ring (not a reduce-scatter by max or min)
  auto operator<=>(const PairShape&) const = default;  // (choices kept by shape)
};

struct PipelineChoice {
  enum class Variant { off, chunks, ring } variant = Variant::off;
  int chunks = 0;            // for Variant::chunks
  std::string why;           // the choice, every candidate's time, and the machine's numbers
};

// The model's time in microseconds of each candidate, cheapest choice first in `choose_pipeline`.
double gemm_us(const MachineCosts& costs, double rows, const PairShape& shape);
double off_us(const MachineCosts& costs, const PairShape& shape);
double chunks_us(const MachineCosts& costs, const PairShape& shape, int chunks);
double ring_us(const MachineCosts& costs, const PairShape& shape);
// A ring all-reduce of `bytes` (each rank's whole buffer) over `parts` ranks.
double all_reduce_us(const MachineCosts& costs, double bytes, int parts);

// Every candidate of the pair with the model's time: off first, then chunks=1..16 (at most the
// rows), then the ring (teams of several, where the pair has one: never a GEMM -> all-reduce; not
// where the chunks take no SMs).
struct Candidate {
  PipelineChoice choice;
  double us = 0;
  std::string name() const;  // "off", "chunks=N" or "ring"
};
std::vector<Candidate> pipeline_candidates(const MachineCosts& costs, const PairShape& shape);

// The cheapest of the candidates (pipeline_candidates).
PipelineChoice choose_pipeline(const MachineCosts& costs, const PairShape& shape);

}  // namespace alloy::host_ir
