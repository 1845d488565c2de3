// pipeline_collectives: a Program -> Program pass that hides communication behind compute in
// tensor-parallel layers (issue 13). It rewrites
//   - all-gather -> GEMM (a sequence-parallel column linear: Communicate all_gather(axis=0) of
//     x, then the matmul segment whose activation operand is the gathered x),
//   - GEMM -> reduce-scatter (a row-parallel linear: the matmul segment writing partial sums P,
//     then Communicate reduce_scatter(axis=0) of P, P read by nothing else), and
//   - GEMM -> all-reduce (Megatron's row-parallel linear, and the column-parallel linear's
//     input gradient in the backward: the matmul segment writing partial sums P, then
//     Communicate all_reduce of P, P read by nothing else; issue 25)
// into a ForChunks loop over S chunks of each device's rows. All-gather -> GEMM: the GEMM of the
// device's own block of chunk i runs first, on its own rows (it waits for nothing), while chunk i
// of the other blocks is all-gathered on the communication stream; then the other blocks' GEMMs,
// in the order they arrive. Where the gathered value is read by nothing but that GEMM (not
// returned, no other segment's input), it is never made whole (ChunkedValue::Layout::landed):
// the collective (ChunkPhase::land, Communicator::all_gather_landed) leaves each chunk where it
// arrives, the other blocks' GEMMs read it there, and a Release node after them on the compute
// stream gives the places back (the copy engines' staging slots, which a peer's later chunk
// overwrites), so no same-device copy runs on the communication stream beside the GEMMs; its
// buffer is allocated only where the communicator copies the chunks into one (NCCL, MPI, the
// staged path: Allocate's unless_landed). Where it is read elsewhere, the loop gathers into the
// whole buffer as before (`blocks`). GEMM -> reduce-scatter: the other blocks' GEMMs of chunk i run first
// and their partial sums are sent as soon as they are done (ChunkPhase::send); a sum's landing
// (ChunkPhase::land, Communicator::reduce_scatter_parts_landed) leaves the other ranks' parts of
// this rank's chunk where they arrive, and the own block's GEMM, waiting for them on its compute
// stream (the pool's other stream runs chunk i + 1's GEMMs meanwhile), adds them as it writes
// the output (Launch::adds: cuBLASLt's C with beta = 1, no add kernel behind the GEMMs; a Release
// after it gives the places back). Max and min keep the finish after the own GEMM
// (ChunkPhase::finish). One GEMM per block of rows, written in place into the whole output; the
// epilogue (bias, GELU) stays in each chunk's GEMM (the bias after C: a row-parallel linear's
// bias / n on each rank, localize_shards, still sums to one bias).
// GEMM -> all-reduce has no blocks (every rank computes partial sums of every row): iteration i
// runs the GEMM of rows chunk i (with its epilogue: a row-parallel linear's bias is bias / n on
// each rank, localize_shards, so each row still sums to the bias once) on the compute pool, then
// the all-reduce of those rows of P into the same rows of the output on the communication stream,
// beside the GEMM of chunk i + 1: only the last chunk's all-reduce is exposed. Every rank has
// every row, so every rank makes the same all-reduce calls in the same order. Whole
// buffers are allocated before the loop on the run's stream, the communication stream and the
// compute streams (a pool of two, alternating) wait for it, and the run's stream waits for every
// one of them after the loop: the host never blocks.
// The ring variant (--pipeline ring) runs one step per rank instead, with a send/recv between
// neighbours per step and no gathered buffer: all-gather -> GEMM multiplies the block a rank
// holds while passing it on; GEMM -> reduce-scatter adds the running sum received from the
// previous rank to its partial product of the same block and passes it on (SendRecv and
// Accumulate nodes; see ForChunks::Schedule::ring in program.h). A pair whose gathered value
// another segment reads (or the fusion returns), whose reduce-scatter is by max or min, or that
// all-reduces, has no ring: it stays as lowered, with a note in the dump. So does a GEMM ->
// all-reduce whose P another segment reads too (conservatively: the loop does leave P whole).
// The choice comes from the options: off, chunks=N, ring, or auto: on the CPU off (nothing
// overlaps there); on CUDA a Choose node holding off, chunks (1 to 16) and ring (where the pair
// has one), one of which the cost model (host_ir/cost_model.h) picks per run from the run's sizes
// and the machine's measured rates — except a GEMM -> all-reduce, which auto leaves as lowered
// (with a note: its overlap with NCCL's kernels measured too small to risk, session 35). A chunk count larger than a device's rows is cut to the rows at run time; rows
// that S does not divide give chunks that differ by one row.
// Precondition: a lowered program (side_streams may have run). Postcondition: the same values
// computed; Communicate and Launch nodes outside the rewritten pairs unchanged.
#pragma once

#include "alloy/host_ir/program.h"

namespace alloy::host_ir {

Program pipeline_collectives(Program program, const ProgramPassOptions& options);

}  // namespace alloy::host_ir
