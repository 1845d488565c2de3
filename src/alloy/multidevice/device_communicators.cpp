// Communicators for device tensors: NCCL, reached at run time (dlopen "libnccl.so.2"), so a build
// made with CUDA still runs where NCCL is absent; and the staged path through host memory and
// MPI, where NCCL cannot serve. Builds without CUDA have no device tensors.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "alloy/common/error.h"
#include "alloy/common/settings.h"
#include "alloy/multidevice/copy_engine_communicator.h"
#include "alloy/multidevice/mpi_communicator.h"

#if ALLOY_HAVE_CUDA
#include <cuda_runtime.h>
#include <dlfcn.h>
// nccl.h, where the build finds it, only for ncclConfig_t (ALLOY_NCCL_MAX_CTAS); the calls go
// through dlopen either way
#if __has_include(<nccl.h>)
#include <nccl.h>
#define ALLOY_HAVE_NCCL_CONFIG 1
#endif
#endif

namespace alloy::multidevice {

#if ALLOY_HAVE_CUDA
namespace {

// NCCL's C ABI (nccl.h, stable since NCCL 2.0), declared here so the build needs no NCCL headers.
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = struct NcclCommOpaque*;
using NcclResult = int;
enum NcclType : int { nccl_uint8 = 1, nccl_int32 = 2, nccl_int64 = 4, nccl_f16 = 6, nccl_f32 = 7, nccl_f64 = 8, nccl_bf16 = 9 };
enum NcclOp : int { nccl_sum = 0, nccl_max = 2, nccl_min = 3 };

struct Nccl {
  NcclResult (*get_unique_id)(NcclUniqueId*) = nullptr;
  NcclResult (*comm_init_rank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  // NCCL 2.14 and later (a communicator's config); optional
  NcclResult (*comm_init_rank_config)(NcclComm*, int, NcclUniqueId, int, void*) = nullptr;
  NcclResult (*comm_destroy)(NcclComm) = nullptr;
  const char* (*error_string)(NcclResult) = nullptr;
  NcclResult (*all_gather)(const void*, void*, size_t, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*reduce_scatter)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*broadcast)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*reduce)(const void*, void*, size_t, int, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*send)(const void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*recv)(void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*group_start)() = nullptr;
  NcclResult (*group_end)() = nullptr;
  std::string missing;  // why NCCL cannot be used, or empty

  void check(NcclResult r, const char* what) const {
    if (r != 0) internal_error("NCCL ", what, " failed: ", error_string ? error_string(r) : "unknown error");
  }
};

const Nccl& nccl() {
  static const Nccl lib = [] {
    Nccl n;
    std::string name = settings::text("ALLOY_NCCL_LIBRARY");
    void* handle = dlopen(name.empty() ? "libnccl.so.2" : name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      n.missing = std::string("libnccl.so.2 not found (") + dlerror() + ")";
      return n;
    }
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
      if (!fn && n.missing.empty()) n.missing = std::string("libnccl.so.2 lacks ") + symbol;
    };
    get(n.get_unique_id, "ncclGetUniqueId");
    get(n.comm_init_rank, "ncclCommInitRank");
    get(n.comm_destroy, "ncclCommDestroy");
    get(n.error_string, "ncclGetErrorString");
    get(n.all_gather, "ncclAllGather");
    get(n.reduce_scatter, "ncclReduceScatter");
    get(n.all_reduce, "ncclAllReduce");
    get(n.broadcast, "ncclBroadcast");
    get(n.reduce, "ncclReduce");
    get(n.send, "ncclSend");
    get(n.recv, "ncclRecv");
    get(n.group_start, "ncclGroupStart");
    get(n.group_end, "ncclGroupEnd");
    n.comm_init_rank_config =
        reinterpret_cast<decltype(n.comm_init_rank_config)>(dlsym(handle, "ncclCommInitRankConfig"));
    return n;
  }();
  return lib;
}

int nccl_type(DType t) {
  switch (t) {
    case DType::f64: return nccl_f64;
    case DType::f32: return nccl_f32;
    case DType::f16: return nccl_f16;
    case DType::bf16: return nccl_bf16;
    case DType::i64: return nccl_int64;
    case DType::i32: return nccl_int32;
    case DType::boolean: return nccl_uint8;
  }
  internal_error("nccl_type: bad dtype");
}

int nccl_op(PartialReduce r) { return r == PartialReduce::sum ? nccl_sum : r == PartialReduce::max ? nccl_max : nccl_min; }

size_t bytes_of(const Tensor& t) { return size_t(t.numel()) * size_t(dtype_size(t.dtype())); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const Communicator& host, int device, const host_ir::DeviceRuntime& runtime)
      : Communicator(host.rank(), host.size()), device_(device), runtime_(runtime) {
    const Nccl& n = nccl();
    NcclUniqueId id{};
    if (rank() == 0) n.check(n.get_unique_id(&id), "ncclGetUniqueId");
    Tensor id_bytes = Tensor::borrow(&id, Device{}, DType::boolean, {int64_t(sizeof id)}, {1});
    const_cast<Communicator&>(host).broadcast(id_bytes, 0);
    cudaSetDevice(device);
    // ALLOY_NCCL_MAX_CTAS: NCCL's kernels held to that many CTAs (the SMs they take from GEMMs
    // running beside them)
    const int max_ctas = int(settings::integer("ALLOY_NCCL_MAX_CTAS"));
#if ALLOY_HAVE_NCCL_CONFIG
    if (max_ctas > 0 && n.comm_init_rank_config) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.maxCTAs = max_ctas;
      n.check(n.comm_init_rank_config(&comm_, size(), id, rank(), &config), "ncclCommInitRankConfig");
      return;
    }
#endif
    if (max_ctas > 0) {
      static std::once_flag said;
      std::call_once(said, [] {
        std::fprintf(stderr, "alloy: ALLOY_NCCL_MAX_CTAS is ignored: this NCCL or this build has no communicator config\n");
      });
    }
    n.check(n.comm_init_rank(&comm_, size(), id, rank()), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_) nccl().comm_destroy(comm_);
  }
  std::string name() const override { return "nccl"; }

  void all_gather(const Tensor& in, const Tensor& out) override {
    nccl().check(nccl().all_gather(in.data(), out.data(), size_t(in.numel()), nccl_type(in.dtype()), comm_, stream()), "all_gather");
  }
  void reduce_scatter(const Tensor& in, const Tensor& out, PartialReduce op) override {
    nccl().check(nccl().reduce_scatter(in.data(), out.data(), size_t(out.numel()), nccl_type(in.dtype()), nccl_op(op), comm_, stream()),
                 "reduce_scatter");
  }
  void all_reduce(const Tensor& in, const Tensor& out, PartialReduce op) override {
    nccl().check(nccl().all_reduce(in.data(), out.data(), size_t(in.numel()), nccl_type(in.dtype()), nccl_op(op), comm_, stream()),
                 "all_reduce");
  }
  void all_to_all(const Tensor& in, const Tensor& out) override {
    const Nccl& n = nccl();
    size_t part = bytes_of(in) / size_t(size());
    auto* send_base = static_cast<const char*>(in.data());
    auto* recv_base = static_cast<char*>(out.data());
    n.check(n.group_start(), "ncclGroupStart");
    for (int peer = 0; peer < size(); ++peer) {
      n.check(n.send(send_base + part * size_t(peer), part, nccl_uint8, peer, comm_, stream()), "ncclSend");
      n.check(n.recv(recv_base + part * size_t(peer), part, nccl_uint8, peer, comm_, stream()), "ncclRecv");
    }
    n.check(n.group_end(), "ncclGroupEnd");
  }
  void broadcast(const Tensor& buffer, int root) override {
    nccl().check(nccl().broadcast(buffer.data(), buffer.data(), bytes_of(buffer), nccl_uint8, root, comm_, stream()), "broadcast");
  }
  // Straight into (and out of) the parts, wherever they are: rank r's chunk is broadcast from r
  // (reduced to r), all in one group.
  void all_gather_into_parts(const Tensor& in, const Tensor& parts) override {
    const Nccl& n = nccl();
    n.check(n.group_start(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r)
      n.check(n.broadcast(in.data(), part_of(parts, r).data(), bytes_of(in), nccl_uint8, r, comm_, stream()), "ncclBroadcast");
    n.check(n.group_end(), "ncclGroupEnd");
  }
  void reduce_scatter_parts(const Tensor& parts, const Tensor& out, PartialReduce op) override {
    const Nccl& n = nccl();
    n.check(n.group_start(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r)
      n.check(n.reduce(part_of(parts, r).data(), out.data(), size_t(out.numel()), nccl_type(out.dtype()), nccl_op(op), r, comm_, stream()),
              "ncclReduce");
    n.check(n.group_end(), "ncclGroupEnd");
  }
  void reduce_scatter_parts_finish(const Tensor& parts, const Tensor& out, PartialReduce op) override {
    runtime_.copy(part_of(parts, rank()), out);
    reduce_scatter_parts(parts, out, op);
  }
  void send(const Tensor& in, int peer) override {
    nccl().check(nccl().send(in.data(), bytes_of(in), nccl_uint8, peer, comm_, stream()), "ncclSend");
  }
  void recv(const Tensor& out, int peer) override {
    nccl().check(nccl().recv(out.data(), bytes_of(out), nccl_uint8, peer, comm_, stream()), "ncclRecv");
  }
  // Both in one group, so neither waits for the other (a ring step: every rank calls it at once).
  void send_recv(const Tensor& in, int to, const Tensor& out, int from) override {
    const Nccl& n = nccl();
    n.check(n.group_start(), "ncclGroupStart");
    n.check(n.send(in.data(), bytes_of(in), nccl_uint8, to, comm_, stream()), "ncclSend");
    n.check(n.recv(out.data(), bytes_of(out), nccl_uint8, from, comm_, stream()), "ncclRecv");
    n.check(n.group_end(), "ncclGroupEnd");
  }

 private:
  cudaStream_t stream() const { return reinterpret_cast<cudaStream_t>(runtime_.current_stream(device_)); }
  int device_;
  const host_ir::DeviceRuntime& runtime_;
  NcclComm comm_ = nullptr;
};

// Device buffers through host memory: copy down (waiting for the stream), MPI, copy back up.
class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::shared_ptr<Communicator> host, int device, const host_ir::DeviceRuntime& runtime)
      : Communicator(host->rank(), host->size()), host_(std::move(host)), device_(device), runtime_(runtime) {}
  std::string name() const override { return "staged (host memory + MPI)"; }

  void all_gather(const Tensor& in, const Tensor& out) override {
    through_host(out, [&](const Tensor& h) { host_->all_gather(down(in), h); });
  }
  void reduce_scatter(const Tensor& in, const Tensor& out, PartialReduce op) override {
    through_host(out, [&](const Tensor& h) { host_->reduce_scatter(down(in), h, op); });
  }
  void all_reduce(const Tensor& in, const Tensor& out, PartialReduce op) override {
    through_host(out, [&](const Tensor& h) { host_->all_reduce(down(in), h, op); });
  }
  void all_to_all(const Tensor& in, const Tensor& out) override {
    through_host(out, [&](const Tensor& h) { host_->all_to_all(down(in), h); });
  }
  void broadcast(const Tensor& buffer, int root) override {
    through_host(buffer, [&](const Tensor& h) {
      Tensor mine = down(buffer);
      std::copy_n(static_cast<const char*>(mine.data()), bytes_of(mine), static_cast<char*>(h.data()));
      host_->broadcast(h, root);
    });
  }
  void all_gather_into_parts(const Tensor& in, const Tensor& parts) override {
    Tensor h = Tensor::empty(parts.dtype(), parts.sizes());
    host_->all_gather(down(in), h);
    Tensor up = runtime_.to_device(h, device_);
    for (int r = 0; r < size(); ++r) runtime_.copy(part_of(parts, r), part_of(up, r));
  }
  void reduce_scatter_parts(const Tensor& parts, const Tensor& out, PartialReduce op) override {
    through_host(out, [&](const Tensor& h) { host_->reduce_scatter(down(parts), h, op); });
  }
  void reduce_scatter_parts_finish(const Tensor& parts, const Tensor& out, PartialReduce op) override {
    runtime_.copy(part_of(parts, rank()), out);
    reduce_scatter_parts(parts, out, op);
  }
  void send(const Tensor& in, int peer) override { host_->send(down(in), peer); }
  void recv(const Tensor& out, int peer) override {
    through_host(out, [&](const Tensor& h) { host_->recv(h, peer); });
  }
  void send_recv(const Tensor& in, int to, const Tensor& out, int from) override {
    Tensor sent = down(in);
    through_host(out, [&](const Tensor& h) { host_->send_recv(sent, to, h, from); });
  }

 private:
  Tensor down(const Tensor& t) const { return runtime_.to_host(t); }
  template <class Fn>
  void through_host(const Tensor& out, Fn&& fill) {
    Tensor h = Tensor::empty(out.dtype(), out.sizes());
    fill(h);
    runtime_.copy(out, runtime_.to_device(h, device_));
  }

  std::shared_ptr<Communicator> host_;
  int device_;
  const host_ir::DeviceRuntime& runtime_;
};

// Whether two ranks of the team use one GPU (NCCL refuses a communicator over them).
bool team_shares_a_gpu(Communicator& host, int device) {
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    cudaGetLastError();
    std::snprintf(bus, sizeof bus, "device %d", device);
  }
  Tensor mine = Tensor::borrow(bus, Device{}, DType::boolean, {int64_t(sizeof bus)}, {1});
  Tensor all = Tensor::empty(DType::boolean, {int64_t(sizeof bus) * host.size()});
  host.all_gather(mine, all);
  auto* ids = static_cast<const char*>(all.data());
  for (int a = 0; a < host.size(); ++a)
    for (int b = a + 1; b < host.size(); ++b)
      if (std::string(ids + a * sizeof bus) == std::string(ids + b * sizeof bus)) return true;
  return false;
}

}  // namespace

std::shared_ptr<Communicator> device_communicator(std::shared_ptr<Communicator> host, int device,
                                                  const host_ir::DeviceRuntime& runtime) {
  bool staged_wanted = settings::flag("ALLOY_STAGED_COMMUNICATION");
  std::string why = staged_wanted ? "ALLOY_STAGED_COMMUNICATION=1" : nccl().missing;
  // every rank takes the same path: the checks below are collective or the same everywhere
  if (why.empty() && host->size() > 1 && team_shares_a_gpu(*host, device)) why = "ranks share a GPU, which NCCL refuses";
  if (why.empty()) return with_copy_engines(std::make_shared<NcclCommunicator>(*host, device, runtime), host, device, runtime);
  static std::once_flag said;
  std::call_once(said, [&] {
    if (host->rank() == 0)
      std::fprintf(stderr, "alloy: device tensors are communicated through host memory and %s (slow): %s\n",
                   host->name().c_str(), why.c_str());
  });
  return std::make_shared<StagedCommunicator>(std::move(host), device, runtime);
}

#else

std::shared_ptr<Communicator> device_communicator(std::shared_ptr<Communicator>, int, const host_ir::DeviceRuntime&) {
  internal_error("device communicators need the CUDA backend");
}

#endif

}  // namespace alloy::multidevice
