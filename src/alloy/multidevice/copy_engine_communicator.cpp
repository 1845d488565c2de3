// The chunked collectives of the pipelined loops moved by the GPUs' copy engines (issue 25): no
// kernel of the transfer occupies an SM while the GEMMs of the other chunks run.
//
// How: every rank of the team allocates, once, a small block of flags and a staging buffer, and
// opens its peers' through CUDA IPC (the handles travel over the host team). A transfer is a
// peer-to-peer cudaMemcpyAsync into the peer's staging buffer, then a 32-bit write into the peer's
// flags (cuStreamWriteValue32, which fences the copy before it); the receiver's stream waits on
// its own flag (cuStreamWaitValue32) and copies out of its staging buffer, or adds from it, or
// (all_gather_landed, reduce_scatter_parts_landed) leaves it there for the loop's GEMMs to read. Every call that moves bytes
// is an epoch e (1, 2, ..., as 32 bits; ranks call in the same order, as their programs are the
// same):
//   flags[arrived + s]          = e   rank s's data of epoch e is in my staging slot (s, e % 2)
//   flags[freed + (e % 2) n + p] = e   rank p is done reading what I put in its slot (me, e % 2) at
//                                      epoch e (n = kMaxRanks: one word per slot parity and peer)
// A sender waits for freed(e % 2) >= e - 2 before writing slot (me, e % 2) again: two slots a
// peer, so epoch e's transfer never waits for the receiver to finish epoch e - 1 (the first two
// calls wait for nothing). The comparisons are cyclic (the driver's GEQ), so the 32-bit epoch may
// wrap. Calls are ordered on the device too (each waits for the previous call's event), whichever
// streams they are made on, so arrived only grows.
// Who frees a slot: a copy out or an add frees it on the communication stream right after, in
// call order. A landed chunk (all_gather_landed: the loop's GEMMs of the other blocks read the
// slots themselves; reduce_scatter_parts_landed: the own block's GEMM reads the peers' partial
// sums as its C; so no same-device copy or add waits for SMs the GEMMs hold, issue 25) is freed
// by release_landed on the stream of its last GEMM, after it; that is not in call order (the loop's
// compute streams alternate), which is why freed has a word per slot parity: the release of epoch
// e of a slot comes after the receiver waited for epoch e's arrival, which the sender wrote after
// it saw the release of epoch e - 2 of the same slot, so each word only grows too. The release
// stays out of the calls' order (it waits for no call's event, and no call's event covers it), so
// this rank's communication stream never waits for its own GEMMs; a peer's push of epoch e waits,
// through its flag, for this rank's GEMMs of epoch e - 2 only. One landed epoch is held at a
// time: it is released (enqueued) before the next call.
//
// Where: ranks of one host whose GPUs can reach each other (peer access), ALLOY_NO_COPY_ENGINES
// not set. The probe at creation (a signal around the team) must complete within seconds, else
// every rank falls back to NCCL's kernels. Everything else (the unchunked collectives, rings,
// max/min reductions) goes to the NCCL communicator it wraps.
#include "alloy/multidevice/copy_engine_communicator.h"

#if ALLOY_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#endif

#include "alloy/common/error.h"
#include "alloy/common/settings.h"

namespace alloy::multidevice {

#if ALLOY_HAVE_CUDA
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) internal_error("copy engines: ", what, " failed: ", cudaGetErrorString(e));
}

struct StreamMemOps {
  PFN_cuStreamWaitValue32_v11070 wait = nullptr;
  PFN_cuStreamWriteValue32_v11070 write = nullptr;
  bool ok() const { return wait && write; }
};

const StreamMemOps& mem_ops() {
  static const StreamMemOps ops = [] {
    StreamMemOps o;
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      o.wait = reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(p);
    p = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      o.write = reinterpret_cast<PFN_cuStreamWriteValue32_v11070>(p);
    cudaGetLastError();
    return o;
  }();
  return ops;
}

size_t bytes_of(const Tensor& t) { return size_t(t.numel()) * size_t(dtype_size(t.dtype())); }

// What each rank tells the others at creation.
struct Card {
  char host[64];
  char bus[32];
  cudaIpcMemHandle_t memory;  // the flags at creation; the staging buffer when it grows
  int32_t usable;  // this rank can do its part (stream memory operations, IPC)
  int32_t pad;
};

class CopyEngineCommunicator final : public Communicator {
 public:
  // Collective over the team; `usable` says whether it can serve (else the caller keeps `inner`).
  CopyEngineCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<Communicator> host, int device,
                         const host_ir::DeviceRuntime& runtime)
      : Communicator(inner->rank(), inner->size()), inner_(std::move(inner)), host_(std::move(host)), device_(device), runtime_(runtime) {}

  ~CopyEngineCommunicator() override {
    // at process exit the driver may be gone: errors here are ignored
    cudaSetDevice(device_);
    for (char* p : peer_staging_)
      if (p) cudaIpcCloseMemHandle(p);
    for (uint32_t* p : peer_flags_)
      if (p) cudaIpcCloseMemHandle(p);
    if (staging_) cudaFree(staging_);
    if (flags_) cudaFree(flags_);
    if (last_) cudaEventDestroy(last_);
    cudaGetLastError();
  }

  // Exchanges the cards, opens the peers' flags and probes the signalling; every rank returns the
  // same answer, and the reason where it is false.
  bool open(std::string& why) {
    const int n = size();
    Card mine{};
    gethostname(mine.host, sizeof mine.host - 1);
    mine.usable = mem_ops().ok() ? 1 : 0;
    check(cudaSetDevice(device_), "cudaSetDevice");
    if (cudaDeviceGetPCIBusId(mine.bus, sizeof mine.bus, device_) != cudaSuccess) mine.usable = 0;
    if (mine.usable && cudaMalloc(reinterpret_cast<void**>(&flags_), kFlagWords * sizeof(uint32_t)) == cudaSuccess &&
        cudaMemset(flags_, 0, kFlagWords * sizeof(uint32_t)) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
        cudaIpcGetMemHandle(&mine.memory, flags_) == cudaSuccess) {
    } else {
      mine.usable = 0;
    }
    cudaGetLastError();
    std::vector<Card> cards = exchange(mine);
    for (int p = 0; p < n; ++p) {
      if (!cards[size_t(p)].usable) return refuse(why, "rank " + std::to_string(p) + " cannot use stream memory operations or CUDA IPC");
      if (std::strncmp(cards[size_t(p)].host, cards[0].host, sizeof mine.host) != 0) return refuse(why, "the team spans hosts");
    }
    // peer access from this process to every peer's GPU, and the peers' flags opened
    int32_t ok = 1;
    peer_flags_.assign(size_t(n), nullptr);
    peer_staging_.assign(size_t(n), nullptr);
    for (int p = 0; p < n && ok; ++p) {
      if (p == rank()) continue;
      int ordinal = -1, can = 0;
      if (cudaDeviceGetByPCIBusId(&ordinal, cards[size_t(p)].bus) != cudaSuccess ||
          (ordinal != device_ && (cudaDeviceCanAccessPeer(&can, device_, ordinal) != cudaSuccess || !can)))
        ok = 0;
      void* opened = nullptr;
      if (ok && cudaIpcOpenMemHandle(&opened, cards[size_t(p)].memory, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess)
        peer_flags_[size_t(p)] = static_cast<uint32_t*>(opened);
      else
        ok = 0;
    }
    cudaGetLastError();
    if (!all_agree(ok)) return refuse(why, "peer access or CUDA IPC between the team's GPUs is unavailable");
    check(cudaEventCreateWithFlags(&last_, cudaEventDisableTiming), "cudaEventCreate");
    if (!all_agree(probe() ? 1 : 0)) return refuse(why, "a signal around the team did not arrive within 5 s");
    return true;
  }

  std::string name() const override { return inner_->name() + " + copy engines"; }

  void all_gather(const Tensor& in, const Tensor& out) override { inner_->all_gather(in, out); }
  void reduce_scatter(const Tensor& in, const Tensor& out, PartialReduce op) override { inner_->reduce_scatter(in, out, op); }
  void all_reduce(const Tensor& in, const Tensor& out, PartialReduce op) override { inner_->all_reduce(in, out, op); }
  void all_to_all(const Tensor& in, const Tensor& out) override { inner_->all_to_all(in, out); }
  void broadcast(const Tensor& buffer, int root) override { inner_->broadcast(buffer, root); }
  void send(const Tensor& in, int peer) override { inner_->send(in, peer); }
  void recv(const Tensor& out, int peer) override { inner_->recv(out, peer); }
  void send_recv(const Tensor& in, int to, const Tensor& out, int from) override { inner_->send_recv(in, to, out, from); }

  bool lands_in_place() const override { return true; }

  // `in` pushed to every peer's slot; the peers' blocks left in this rank's slots, the stream
  // past their arrival (the nearest rank first: it pushes to this one first). No copy on this
  // device: part rank() is `in`, and `parts` is not used.
  LandedParts all_gather_landed(const Tensor& in, const Tensor&) override {
    const size_t bytes = bytes_of(in);
    LandedParts landed{std::vector<Tensor>(size_t(size()), in), 0, {}};
    if (bytes == 0) return landed;  // empty chunks (a rank without rows): nothing to move or hold
    for (int q = 0; q < size(); ++q) landed.sources.push_back(q);
    Tensor packed = runtime_.contiguous(in);
    Calls call(*this, bytes);
    const uint32_t e = call.epoch;
    for (int j = 1; j < size(); ++j) push((rank() + j) % size(), packed.data(), bytes, e, call.fresh_slots, call.stream);
    for (int j = 1; j < size(); ++j) {
      int q = (rank() - j + size()) % size();
      arrive(q, e, call.stream);
      landed.parts[size_t(q)] = Tensor::borrow(slot(rank(), q, e), in.device(), in.dtype(), in.sizes(), contiguous_strides(in.sizes()));
    }
    landed.call = landed_ = call.number;
    return landed;
  }

  // Part q of a landing: its sender's push of that epoch arrived (the flag the landing's stream
  // waited for too; a stream memory operation, no SM).
  bool waits_by_part() const override { return true; }
  void wait_landed_part(const LandedParts& landed, int part) override {
    ALLOY_CHECK(landed.call != 0 && landed.call == landed_ && part >= 0 && size_t(part) < landed.sources.size(), name(),
                ": a wait for part ", part, " of landing ", landed.call, " (held: ", landed_, ")");
    const int q = landed.sources[size_t(part)];
    if (q == rank()) return;  // this rank's own rows
    check(cudaSetDevice(device_), "cudaSetDevice");
    arrive(q, uint32_t(landed.call), reinterpret_cast<cudaStream_t>(runtime_.current_stream(device_)));
  }

  // The slots of the landed epoch freed for their senders, on the current stream (the last
  // reader's), outside the calls' order.
  void release_landed(const LandedParts& landed) override {
    if (landed.call == 0) return;
    ALLOY_CHECK(landed.call == landed_, name(), ": release of the landing of call ", landed.call, ", but the one held is ",
                landed_ ? std::to_string(landed_) : std::string("none"));
    check(cudaSetDevice(device_), "cudaSetDevice");
    auto stream = reinterpret_cast<cudaStream_t>(runtime_.current_stream(device_));
    for (int j = 1; j < size(); ++j) release((rank() - j + size()) % size(), uint32_t(landed.call), stream);
    landed_ = 0;
  }

  // Part rank() copied in place; `in` pushed to every peer's slot, the peers' blocks copied out of
  // this rank's slots as they arrive (the nearest rank first: it pushes to this one first).
  void all_gather_into_parts(const Tensor& in, const Tensor& parts) override {
    const size_t bytes = bytes_of(in);
    Tensor packed = runtime_.contiguous(in);
    Calls call(*this, bytes);
    const uint32_t e = call.epoch;
    Tensor own = part_of(parts, rank());
    ALLOY_CHECK(own.is_contiguous() && bytes_of(own) == bytes, name(), ": all_gather part ", own.str(), " for ", in.str());
    copy(own.data(), packed.data(), bytes, call.stream);
    for (int j = 1; j < size(); ++j) push((rank() + j) % size(), packed.data(), bytes, e, call.fresh_slots, call.stream);
    for (int j = 1; j < size(); ++j) {
      int q = (rank() - j + size()) % size();
      Tensor dst = part_of(parts, q);
      ALLOY_CHECK(dst.is_contiguous(), name(), ": all_gather part ", q, " of ", parts.str(), " is not contiguous");
      arrive(q, e, call.stream);
      copy(dst.data(), slot(rank(), q, e), bytes, call.stream);
      release(q, e, call.stream);
    }
  }

  void reduce_scatter_parts(const Tensor& parts, const Tensor& out, PartialReduce op) override {
    if (op != PartialReduce::sum) return inner_->reduce_scatter_parts(parts, out, op);
    reduce_scatter_parts_send(parts, op);
    runtime_.copy(out, part_of(parts, rank()));
    reduce_scatter_parts_finish(parts, out, op);
  }

  // Every part but this rank's pushed to its owner.
  void reduce_scatter_parts_send(const Tensor& parts, PartialReduce op) override {
    if (op != PartialReduce::sum) return;  // max and min: NCCL's, whole, in finish
    send_parts(parts, nullptr);
  }
  // The same, each part pushed once its GEMM is done (the next rank's first: its GEMM ran first).
  void reduce_scatter_parts_send_when_ready(const Tensor& parts, PartialReduce op, const std::function<void(int)>& ready) override {
    if (op != PartialReduce::sum) return Communicator::reduce_scatter_parts_send_when_ready(parts, op, ready);
    send_parts(parts, &ready);
  }

  // The peers' parts for this rank left in its slots (the stream past their arrival, the nearest
  // rank first), for the loop's own GEMM to add; freed by release_landed after that GEMM. No add
  // kernel on this device, and `sum` is not used.
  LandedParts reduce_scatter_parts_landed(const Tensor& parts, const Tensor&) override {
    ALLOY_CHECK(sending_, name(), ": reduce_scatter landed without its send");
    const uint32_t e = sent_;
    sending_ = false;
    LandedParts landed;
    Tensor own = part_of(parts, rank());
    if (bytes_of(own) == 0) return landed;  // empty chunks (a rank without rows): nothing moved, nothing to add
    Calls call(*this, 0);
    for (int j = 1; j < size(); ++j) {
      int q = (rank() - j + size()) % size();
      arrive(q, e, call.stream);
      landed.parts.push_back(Tensor::borrow(slot(rank(), q, e), own.device(), own.dtype(), own.sizes(), contiguous_strides(own.sizes())));
      landed.sources.push_back(q);
    }
    landed.call = landed_ = sent_call_;
    return landed;
  }

  // out (this rank's part) += what every peer pushed for it.
  void reduce_scatter_parts_finish(const Tensor& parts, const Tensor& out, PartialReduce op) override {
    if (op != PartialReduce::sum) return inner_->reduce_scatter_parts_finish(parts, out, op);
    ALLOY_CHECK(sending_, name(), ": reduce_scatter finished without its send");
    const uint32_t e = sent_;
    sending_ = false;
    ALLOY_CHECK(out.is_contiguous() && bytes_of(out) == bytes_of(part_of(parts, rank())), name(), ": reduce_scatter into ", out.str());
    Calls call(*this, 0);
    std::vector<Tensor> staged;
    for (int j = 1; j < size(); ++j) {
      int q = (rank() - j + size()) % size();
      arrive(q, e, call.stream);
      staged.push_back(Tensor::borrow(slot(rank(), q, e), out.device(), out.dtype(), out.sizes(), contiguous_strides(out.sizes())));
    }
    runtime_.accumulate(out, staged);  // one pass over every peer's part
    for (int j = 1; j < size(); ++j) release((rank() - j + size()) % size(), e, call.stream);
  }

 private:
  static constexpr int kMaxRanks = 64;
  // arrived[kMaxRanks], freed[2][kMaxRanks] (by slot parity), probe
  static constexpr size_t kArrived = 0, kFreed = kMaxRanks, kProbe = 3 * kMaxRanks, kFlagWords = 3 * kMaxRanks + 1;
  static size_t freed_word(uint32_t e, int rank) { return kFreed + size_t(e % 2) * kMaxRanks + size_t(rank); }

  // One call: its epoch (a new one where `bytes` > 0), on the current stream, after the previous
  // call; the staging slots at least `bytes`.
  struct Calls {
    CopyEngineCommunicator& c;
    cudaStream_t stream;
    uint32_t epoch = 0;
    uint64_t number = 0;       // the call's count (its epoch's 64 bits; 0 where it moves nothing)
    bool fresh_slots = false;  // the first two calls: no earlier epoch used the slots
    Calls(CopyEngineCommunicator& comm, size_t bytes) : c(comm) {
      // a held landing is released before the next call (a peer's call may wait for it)
      ALLOY_CHECK(c.landed_ == 0, c.name(), ": a call while the chunk of call ", c.landed_, " is still landed (not released)");
      check(cudaSetDevice(c.device_), "cudaSetDevice");
      if (bytes > c.slot_bytes_) c.grow(bytes);
      stream = reinterpret_cast<cudaStream_t>(c.runtime_.current_stream(c.device_));
      check(cudaStreamWaitEvent(stream, c.last_, 0), "cudaStreamWaitEvent");
      if (bytes > 0) {
        number = ++c.calls_;
        epoch = uint32_t(number);
        fresh_slots = number <= 2;
      }
    }
    ~Calls() { cudaEventRecord(c.last_, stream); }
  };

  std::vector<Card> exchange(const Card& mine) {
    std::vector<Card> all(static_cast<size_t>(size()));
    Tensor in = Tensor::borrow(const_cast<Card*>(&mine), Device{}, DType::boolean, {int64_t(sizeof(Card))}, {1});
    Tensor out = Tensor::borrow(all.data(), Device{}, DType::boolean, {int64_t(sizeof(Card)) * size()}, {1});
    host_->all_gather(in, out);
    return all;
  }
  bool all_agree(int32_t ok) {
    int32_t lowest = 0;
    host_->all_reduce(Tensor::borrow(&ok, Device{}, DType::i32, {1}, {1}), Tensor::borrow(&lowest, Device{}, DType::i32, {1}, {1}),
                      PartialReduce::min);
    return lowest == 1;
  }
  bool refuse(std::string& why, std::string reason) {
    why = std::move(reason);
    return false;
  }

  char* slot(int owner, int source, uint32_t e) const {
    char* base = owner == rank() ? staging_ : peer_staging_[size_t(owner)];
    return base + (size_t(e % 2) * size_t(size()) + size_t(source)) * slot_bytes_;
  }
  void copy(void* dst, const void* src, size_t bytes, cudaStream_t s) {
    if (bytes > 0 && dst != src) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  }
  void wait_flag(uint32_t* flag, uint32_t value, cudaStream_t s) {
    if (mem_ops().wait(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
      internal_error("copy engines: cuStreamWaitValue32 failed");
  }
  void write_flag(uint32_t* flag, uint32_t value, cudaStream_t s) {
    if (mem_ops().write(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WRITE_VALUE_DEFAULT) !=
        CUDA_SUCCESS)
      internal_error("copy engines: cuStreamWriteValue32 failed");
  }
  // A reduce-scatter's parts for the other ranks pushed to them (the next rank's first), each
  // after `ready` (where given) of it.
  void send_parts(const Tensor& parts, const std::function<void(int)>* ready) {
    const size_t bytes = bytes_of(part_of(parts, 0));
    Calls call(*this, bytes);
    for (int j = 1; j < size(); ++j) {
      int p = (rank() + j) % size();
      Tensor part = part_of(parts, p);
      ALLOY_CHECK(part.is_contiguous(), name(), ": reduce_scatter part ", p, " of ", parts.str(), " is not contiguous");
      if (ready) (*ready)(p);
      push(p, part.data(), bytes, call.epoch, call.fresh_slots, call.stream);
    }
    sent_ = call.epoch;
    sent_call_ = call.number;
    sending_ = true;
  }

  // `bytes` at `src` into peer p's slot for this rank, once p has read that slot's previous epoch.
  void push(int p, const void* src, size_t bytes, uint32_t e, bool fresh_slots, cudaStream_t s) {
    if (!fresh_slots) wait_flag(flags_ + freed_word(e, p), e - 2, s);
    copy(slot(p, rank(), e), src, bytes, s);
    write_flag(peer_flags_[size_t(p)] + kArrived + rank(), e, s);
  }
  void arrive(int q, uint32_t e, cudaStream_t s) { wait_flag(flags_ + kArrived + q, e, s); }
  void release(int q, uint32_t e, cudaStream_t s) { write_flag(peer_flags_[size_t(q)] + freed_word(e, rank()), e, s); }

  // Larger staging slots on every rank (each reaches the same call with the same size): the device
  // idle and every rank past that point before the old buffers go.
  void grow(size_t bytes) {
    size_t want = size_t(1) << 20;
    while (want < bytes) want *= 2;
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    all_agree(1);  // a barrier: no peer still writes into the old buffer
    for (char*& p : peer_staging_)
      if (p) {
        cudaIpcCloseMemHandle(p);
        p = nullptr;
      }
    if (staging_) check(cudaFree(staging_), "cudaFree");
    staging_ = nullptr;
    int32_t ok = cudaMalloc(reinterpret_cast<void**>(&staging_), 2 * size_t(size()) * want) == cudaSuccess ? 1 : 0;
    Card mine{};
    if (ok && cudaIpcGetMemHandle(&mine.memory, staging_) != cudaSuccess) ok = 0;
    cudaGetLastError();
    mine.usable = ok;
    std::vector<Card> cards = exchange(mine);
    for (const Card& c : cards)
      if (!c.usable) user_error_at("copy engines", "cannot allocate staging buffers of ", 2 * size() * want, " bytes on every GPU");
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      void* opened = nullptr;
      check(cudaIpcOpenMemHandle(&opened, cards[size_t(p)].memory, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
      peer_staging_[size_t(p)] = static_cast<char*>(opened);
    }
    slot_bytes_ = want;
  }

  // Each rank signals the next and waits for the previous one's signal, on a stream of its own.
  bool probe() {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return false;
    int next = (rank() + 1) % size();
    bool ok = mem_ops().write(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(peer_flags_[size_t(next)] + kProbe), 1,
                              CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS &&
              mem_ops().wait(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flags_ + kProbe), 1, CU_STREAM_WAIT_VALUE_GEQ) ==
                  CUDA_SUCCESS;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    cudaError_t state = cudaErrorNotReady;
    while (ok && (state = cudaStreamQuery(s)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ok = ok && state == cudaSuccess;
    if (ok) cudaStreamDestroy(s);  // a stream still waiting is left to the process's end
    cudaGetLastError();
    return ok;
  }

  std::shared_ptr<Communicator> inner_, host_;
  int device_;
  const host_ir::DeviceRuntime& runtime_;
  uint32_t* flags_ = nullptr;
  std::vector<uint32_t*> peer_flags_;
  char* staging_ = nullptr;
  std::vector<char*> peer_staging_;
  size_t slot_bytes_ = 0;
  uint64_t calls_ = 0;  // calls that moved bytes: the epoch is its low 32 bits
  uint64_t landed_ = 0;  // the call whose chunk is landed and not yet released (0: none)
  uint32_t sent_ = 0;   // the epoch of the reduce-scatter sent and not yet finished
  uint64_t sent_call_ = 0;  // its call's count
  bool sending_ = false;
  cudaEvent_t last_ = nullptr;
};

}  // namespace

std::shared_ptr<Communicator> with_copy_engines(std::shared_ptr<Communicator> nccl, std::shared_ptr<Communicator> host, int device,
                                                const host_ir::DeviceRuntime& runtime) {
  if (nccl->size() < 2 || nccl->size() > 64 || settings::flag("ALLOY_NO_COPY_ENGINES")) return nccl;
  auto ce = std::make_shared<CopyEngineCommunicator>(nccl, std::move(host), device, runtime);
  std::string why;
  if (ce->open(why)) return ce;
  if (nccl->rank() == 0) std::fprintf(stderr, "alloy: pipelined transfers use NCCL's kernels, not the copy engines: %s\n", why.c_str());
  return nccl;
}

#else

std::shared_ptr<Communicator> with_copy_engines(std::shared_ptr<Communicator> nccl, std::shared_ptr<Communicator>, int,
                                                const host_ir::DeviceRuntime&) {
  return nccl;
}

#endif

}  // namespace alloy::multidevice
