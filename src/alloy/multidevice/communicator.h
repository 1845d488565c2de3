// Processes and communicators. One process per device: rank and world size come from MPI
// (`mpirun -n N`); a process started without a launcher is a job of one. A Communicator moves
// the buffers of one team (the devices of a mesh) with collectives; three kinds:
//   - MPI, for host tensors (and the team of one, where every collective is a copy);
//   - NCCL, for device tensors, reached at run time (dlopen) as the CUDA driver is, its unique id
//     sent over MPI; collectives are enqueued on the calling thread's current stream and the host
//     does not wait for them;
//   - staged, for device tensors where NCCL cannot serve (no libnccl, or ranks sharing one GPU,
//     which NCCL refuses): through host memory and MPI, slowly but correctly; said once on stderr.
// Buffers handed to a collective are contiguous; the parts of a team are rank-major (part r of
// an all-gather's output is team rank r's input). Team rank r is the device at position r of
// the mesh. The NCCL communicator of GPUs of one host that reach each other moves the pipelined
// loops' chunked collectives with the copy engines instead (copy_engine_communicator.h), and
// lets a loop read the chunks of an all-gather, and the other ranks' parts of a reduce-scatter,
// where they land (all_gather_landed, reduce_scatter_parts_landed).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/host_ir/device_runtime.h"
#include "alloy/ir/fusion.h"
#include "alloy/tensor/tensor.h"

namespace alloy::multidevice {

// Where a chunked all-gather left every rank's chunk (Communicator::all_gather_landed): parts[r]
// is team rank r's, on this device; or what a reduce-scatter's landing leaves to add to this
// rank's part (reduce_scatter_parts_landed: a part per other rank, or their one sum). `call`
// names the landing to give back with release_landed (0: nothing to give back, the parts are
// views of the caller's buffers). Where the parts arrive one by one (Communicator::waits_by_part),
// `sources[i]` is the team rank parts[i] came from (this rank's own: nothing to wait for).
struct LandedParts {
  std::vector<Tensor> parts;
  uint64_t call = 0;
  std::vector<int> sources;
};

struct ProcessInfo {
  int rank = 0;        // in the job (MPI_COMM_WORLD)
  int size = 1;        // processes in the job
  int local_rank = 0;  // among the processes of this host: picks the GPU
};

// This process's place in the job; initializes MPI on first use when the process was started by
// an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK). In a job another
// framework started (join_external_job), that job's place.
const ProcessInfo& process();

class Communicator;
// Makes the host team of `mesh` (device ids, which are ranks of the job): called by every rank of
// the job together, with `position` this rank's place in the mesh (-1 outside it, where it
// returns nullptr). Never called for a mesh of one.
using TeamMaker = std::function<std::shared_ptr<Communicator>(const std::vector<int64_t>& mesh, int position)>;

// Joins a job another launcher started (torchrun, through torch.distributed): this process is
// `info.rank` of `info.size`, and host tensors move through the teams `make_team` makes (device
// tensors use NCCL with its unique id sent over them, or are staged through them). Call it on
// every rank before any fusion with a mesh runs; a user error in an MPI job of several processes,
// once a team of several has been made, or with a place that is not in the job.
void join_external_job(const ProcessInfo& info, TeamMaker make_team);
// Whether this process is in a job joined through join_external_job.
bool in_external_job();
// Whether this build can run jobs of several processes (it was built with MPI).
bool have_mpi();

// A host-side agreement every rank of the job reaches: each says whether it failed; returns the
// lowest failing rank, or -1 when none did. Cheap for a job of one.
int first_failing_rank(bool failed);
// Every rank of the job sends `bytes` bytes and receives every rank's, rank-major, into `all`
// (size() * bytes; `bytes` a multiple of 8): a host collective over the whole job (MPI_COMM_WORLD, or the joined job's
// team of everyone). A copy in a job of one.
void job_all_gather(const void* mine, size_t bytes, void* all);
// Ends MPI (before a tool exits). Safe to call when MPI was never started.
void finalize();
// Ends every process of the job with `code`: for a tool whose rank failed after the ranks agreed
// to communicate, so no other rank waits in a collective for it. Never called by the library.
[[noreturn]] void abort_job(int code);
// Ends every process of the job with `code` where this process started MPI in a job of several
// (a Python rank leaving on an uncaught exception: the others may wait in a collective for it,
// and its own MPI_Finalize at exit would wait for them); else nothing.
void abort_mpi_job_if_started(int code);
// Whether this process started MPI itself in a job of several (mpirun), MPI not yet ended.
bool in_mpi_job_of_several();

// A team's collectives (rank() and size() from host_ir::Team, the part a host program's ring uses).
class Communicator : public host_ir::Team {
 public:
  virtual std::string name() const = 0;  // "mpi", "nccl", "staged (host memory + MPI)", "self"

  // `out` holds size() parts of `in`'s elements, part r from team rank r.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // `in` holds size() parts; this rank's `out` is the reduction of every rank's part rank().
  virtual void reduce_scatter(const Tensor& in, const Tensor& out, PartialReduce op) = 0;
  // Every rank's `in` reduced into each rank's `out` (the same sizes). Both may be views at an
  // offset into larger buffers: rows [a, b) of a whole contiguous tensor, as a pipelined GEMM ->
  // all-reduce loop hands them (host_ir/pipeline_collectives.h); every implementation reads and
  // writes from data() (MPI, NCCL on the current stream, the staged path through host memory,
  // the Python team's byte views).
  virtual void all_reduce(const Tensor& in, const Tensor& out, PartialReduce op) = 0;
  // `in` holds size() parts, part r sent to team rank r; `out` receives part rank() of every rank.
  virtual void all_to_all(const Tensor& in, const Tensor& out) = 0;
  virtual void broadcast(const Tensor& buffer, int root) = 0;
  virtual void send(const Tensor& in, int peer) = 0;
  virtual void recv(const Tensor& out, int peer) = 0;
  // Sends `in` to team rank `to` while receiving `out` from team rank `from`, one step of a ring
  // (host_ir/pipeline_collectives.h): every rank calls it at once, so it must not wait for its
  // send before receiving. The default orders the two by rank parity (even ranks send first),
  // which cannot deadlock on any ring but serializes the hops; MPI (MPI_Sendrecv), NCCL (one
  // group) and the staged path override it.
  void send_recv(const Tensor& in, int to, const Tensor& out, int from) override;

  // The chunked forms a pipelined loop uses (host_ir/pipeline_collectives.h): `parts` is
  // [size(), ...], each part contiguous, the parts at any stride (chunk i of every rank's block
  // of a whole buffer). The defaults go through a packed host buffer (host tensors).
  virtual void all_gather_into_parts(const Tensor& in, const Tensor& parts);
  virtual void reduce_scatter_parts(const Tensor& parts, const Tensor& out, PartialReduce op);
  // reduce_scatter_parts in two halves, so that the parts bound for other ranks move while this
  // rank still computes its own: `send` may move every part but part rank(), `finish` adds the
  // other ranks' parts to `out`, which holds this rank's own part by then (part rank() of `parts`
  // is not read: the loop computed it into `out`). Called in that order, once each, with the
  // same parts. The defaults: nothing, then `out` copied into part rank() and reduce_scatter_parts.
  virtual void reduce_scatter_parts_send(const Tensor& parts, PartialReduce op);
  // reduce_scatter_parts_send where each part is made by a GEMM of its own: `ready(p)` enqueues on
  // the current stream a wait for part p's. A communicator that sends part by part (the copy
  // engines) calls it just before part p's transfer, so the first part made moves while the next
  // are computed; the default calls it for every other rank's part, then sends them all.
  virtual void reduce_scatter_parts_send_when_ready(const Tensor& parts, PartialReduce op, const std::function<void(int)>& ready);
  virtual void reduce_scatter_parts_finish(const Tensor& parts, const Tensor& out, PartialReduce op);

  // The chunked all-gather of a loop whose gathered value nothing but the loop's GEMMs reads
  // (ChunkPhase::land): returns where each rank's chunk can be read, so nothing is copied into a
  // gathered buffer. Where lands_in_place() (the copy engines), part rank() is `in` itself, every
  // other part is where that peer's chunk arrived, `parts` is not used (it may be undefined), and
  // the places stay the caller's until release_landed, which the caller enqueues on the stream of
  // the last reader, after it, before its next call on this communicator (a peer's later chunk
  // overwrites them once that stream gets there). The default copies the chunks into `parts`
  // (all_gather_into_parts) and returns its parts; release_landed then does nothing.
  virtual bool lands_in_place() const { return false; }
  virtual LandedParts all_gather_landed(const Tensor& in, const Tensor& parts);
  virtual void release_landed(const LandedParts& landed);
  // Where the parts of a landing arrive one after another (the copy engines: a peer's push at a
  // time, the nearest first), a reader may wait for its own part alone: wait_landed_part enqueues
  // on the current stream a wait until landed.parts[part] has arrived, so the GEMM of the first
  // part to land starts before the last one is there (an all-gather's: the part of the rank a
  // block's GEMM reads; a reduce-scatter's: each addend of the own GEMM as it is added). Without
  // it (the default), the landing's stream, past every arrival, is what a reader waits for.
  virtual bool waits_by_part() const { return false; }
  virtual void wait_landed_part(const LandedParts& landed, int part);

  // The landed form of a sum reduce-scatter's finish (ChunkPhase::land; after
  // reduce_scatter_parts_send of the same parts, in its place of reduce_scatter_parts_finish):
  // returns what is to be added to this rank's part, which the caller has not computed yet (the
  // loop's own GEMM adds them as it writes it: cuBLASLt's C). Where lands_in_place(), one part per
  // other rank (nearest first), where that rank's part arrived, held until release_landed as
  // all_gather_landed's; `sum` is not used (it may be undefined). The default reduces `parts` into
  // `sum` (part rank() of `parts` holds zeros: the caller's term) with reduce_scatter_parts and
  // returns {sum}, nothing to give back.
  virtual LandedParts reduce_scatter_parts_landed(const Tensor& parts, const Tensor& sum);

 protected:
  Communicator(int rank, int size) : Team(rank, size) {}
};

// Part r of a [parts, ...] tensor.
Tensor part_of(const Tensor& parts, int r);

// Runs `step`, which must not communicate, on every rank of the host team `team` and agrees on
// its outcome before any rank goes on to a collective: a rank whose step threw rethrows its own
// error, and every other rank throws PeerError with `what` and the lowest failing team rank (as
// `name_rank` names it). Where no rank failed it returns on every rank.
void agree_on_step(Communicator& team, const std::function<void()>& step, const std::string& what,
                   const std::function<std::string(int)>& name_rank = {});

// The communicator of `mesh` (device ids, which are ranks) for tensors on `device`'s kind, made
// on first use and kept. Every rank of the job calls it together (making one is collective);
// a rank outside the mesh gets nullptr. A mesh larger than the job is a user error. Device
// tensors (`device` not the CPU) move through `runtime`, that device kind's runtime.
std::shared_ptr<Communicator> communicator_for(const std::vector<int64_t>& mesh, Device device,
                                               const host_ir::DeviceRuntime* runtime = nullptr);

// The user error for a mesh this job cannot hold, naming the launch that would: nullopt when the
// mesh fits (every device id below the job's size).
std::optional<std::string> mesh_misfit(const std::vector<int64_t>& mesh);

}  // namespace alloy::multidevice
