// MPI: the job (process info, agreement, abort) and the communicator for host tensors. A build
// without MPI runs jobs of one process: the team of one copies.
#include "alloy/multidevice/mpi_communicator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "alloy/common/error.h"

#if ALLOY_HAVE_MPI
#include <mpi.h>
#endif

namespace alloy::multidevice {
namespace {

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var)) return true;
  return false;
}

size_t bytes_of(const Tensor& t) { return size_t(t.numel()) * size_t(dtype_size(t.dtype())); }

#if ALLOY_HAVE_MPI
void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  internal_error("MPI: ", what, " failed: ", std::string(text, size_t(length)));
}

bool mpi_started() {
  int started = 0, ended = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  return started && !ended;
}

// Reductions of 16-bit floats go through f32 (MPI has no such types): sum in f32, rounded once.
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f64: return MPI_DOUBLE;
    case DType::f32: case DType::bf16: case DType::f16: return MPI_FLOAT;
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    case DType::boolean: return MPI_UNSIGNED_CHAR;
  }
  internal_error("mpi_type: bad dtype");
}

MPI_Op mpi_op(PartialReduce r) {
  switch (r) {
    case PartialReduce::sum: return MPI_SUM;
    case PartialReduce::max: return MPI_MAX;
    case PartialReduce::min: return MPI_MIN;
  }
  internal_error("mpi_op: bad reduction");
}

bool narrow_float(DType t) { return t == DType::bf16 || t == DType::f16; }

// `t` as an MPI reduction reads it: itself, or an f32 copy of a 16-bit float tensor.
Tensor widened(const Tensor& t) {
  if (!narrow_float(t.dtype())) return t;
  Tensor w = Tensor::empty(DType::f32, t.sizes());
  for (int64_t i = 0; i < t.numel(); ++i) store_double(w.data(), DType::f32, i, load_as_double(t.data(), t.dtype(), i));
  return w;
}

void narrow_into(const Tensor& wide, const Tensor& out) {
  if (wide.data() == out.data()) return;
  for (int64_t i = 0; i < out.numel(); ++i) store_double(out.data(), out.dtype(), i, load_as_double(wide.data(), DType::f32, i));
}

int count_of(int64_t n, const char* what) {
  if (n > int64_t(INT32_MAX)) user_error_at("MPI " + std::string(what), n, " elements is more than MPI's int counts carry");
  return int(n);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size) : Communicator(rank, size), comm_(comm) {}
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD && mpi_started()) MPI_Comm_free(&comm_);
  }
  std::string name() const override { return "mpi"; }

  void all_gather(const Tensor& in, const Tensor& out) override {
    int n = count_of(int64_t(bytes_of(in)), "all_gather");
    check(MPI_Allgather(in.data(), n, MPI_BYTE, out.data(), n, MPI_BYTE, comm_), "all_gather");
  }
  void reduce_scatter(const Tensor& in, const Tensor& out, PartialReduce op) override {
    Tensor w_in = widened(in), w_out = narrow_float(out.dtype()) ? Tensor::empty(DType::f32, out.sizes()) : out;
    int n = count_of(out.numel(), "reduce_scatter");
    check(MPI_Reduce_scatter_block(w_in.data(), w_out.data(), n, mpi_type(in.dtype()), mpi_op(op), comm_), "reduce_scatter");
    narrow_into(w_out, out);
  }
  void all_reduce(const Tensor& in, const Tensor& out, PartialReduce op) override {
    Tensor w_in = widened(in), w_out = narrow_float(out.dtype()) ? Tensor::empty(DType::f32, out.sizes()) : out;
    int n = count_of(out.numel(), "all_reduce");
    check(MPI_Allreduce(w_in.data(), w_out.data(), n, mpi_type(in.dtype()), mpi_op(op), comm_), "all_reduce");
    narrow_into(w_out, out);
  }
  void all_to_all(const Tensor& in, const Tensor& out) override {
    int n = count_of(int64_t(bytes_of(in)) / size(), "all_to_all");
    check(MPI_Alltoall(in.data(), n, MPI_BYTE, out.data(), n, MPI_BYTE, comm_), "all_to_all");
  }
  void broadcast(const Tensor& buffer, int root) override {
    check(MPI_Bcast(buffer.data(), count_of(int64_t(bytes_of(buffer)), "broadcast"), MPI_BYTE, root, comm_), "broadcast");
  }
  void send(const Tensor& in, int peer) override {
    check(MPI_Send(in.data(), count_of(int64_t(bytes_of(in)), "send"), MPI_BYTE, peer, 0, comm_), "send");
  }
  void recv(const Tensor& out, int peer) override {
    check(MPI_Recv(out.data(), count_of(int64_t(bytes_of(out)), "recv"), MPI_BYTE, peer, 0, comm_, MPI_STATUS_IGNORE), "recv");
  }
  void send_recv(const Tensor& in, int to, const Tensor& out, int from) override {
    check(MPI_Sendrecv(in.data(), count_of(int64_t(bytes_of(in)), "send_recv"), MPI_BYTE, to, 1, out.data(),
                       count_of(int64_t(bytes_of(out)), "send_recv"), MPI_BYTE, from, 1, comm_, MPI_STATUS_IGNORE),
          "send_recv");
  }

 private:
  MPI_Comm comm_;
};
#endif

// The team of one: every collective is a copy (or nothing, in place).
class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator() : Communicator(0, 1) {}
  std::string name() const override { return "self"; }
  void all_gather(const Tensor& in, const Tensor& out) override { copy(in, out); }
  void reduce_scatter(const Tensor& in, const Tensor& out, PartialReduce) override { copy(in, out); }
  void all_reduce(const Tensor& in, const Tensor& out, PartialReduce) override { copy(in, out); }
  void all_to_all(const Tensor& in, const Tensor& out) override { copy(in, out); }
  void broadcast(const Tensor&, int) override {}
  void send(const Tensor&, int) override { internal_error("send in a team of one"); }
  void recv(const Tensor&, int) override { internal_error("recv in a team of one"); }
  void send_recv(const Tensor& in, int to, const Tensor& out, int from) override {
    ALLOY_CHECK(to == 0 && from == 0, "send_recv in a team of one with ranks ", to, " and ", from);
    copy(in, out);
  }

 private:
  static void copy(const Tensor& in, const Tensor& out) {
    if (in.data() != out.data()) std::memcpy(out.data(), in.data(), bytes_of(in));
  }
};

// The MPI job (or the job of one).
const ProcessInfo& mpi_process() {
  static const ProcessInfo info = [] {
    ProcessInfo p;
#if ALLOY_HAVE_MPI
    if (!launched_by_mpi()) return p;
    int provided = 0;
    if (!mpi_started()) check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init");
    MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p.size);
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &local), "split by host");
    MPI_Comm_rank(local, &p.local_rank);
    MPI_Comm_free(&local);
#else
    if (launched_by_mpi())
      std::fprintf(stderr, "alloy: started by an MPI launcher, but this build has no MPI: every process runs alone\n");
#endif
    return p;
  }();
  return info;
}

// A job another framework started: set once, kept for the life of the process.
struct ExternalJob {
  ProcessInfo info;
  TeamMaker make_team;
  std::shared_ptr<Communicator> world;  // the whole job's host team, for agreements (made on first use)
};
std::atomic<ExternalJob*> external_job{nullptr};
std::atomic<bool> made_a_team_of_several{false};

}  // namespace

const ProcessInfo& process() {
  if (ExternalJob* job = external_job.load(std::memory_order_acquire)) return job->info;
  return mpi_process();
}

void join_external_job(const ProcessInfo& info, TeamMaker make_team) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (info.size < 1 || info.rank < 0 || info.rank >= info.size || info.local_rank < 0)
    user_error_at("join_external_job", "rank ", info.rank, " of ", info.size, " processes (local rank ", info.local_rank,
                  ") is not a place in a job; expected 0 <= rank < size");
  if (!make_team) user_error_at("join_external_job", "no maker of teams was given");
  ExternalJob* current = external_job.load();
  if (current) {
    if (current->info.rank == info.rank && current->info.size == info.size) return;  // joined already
    user_error_at("join_external_job", "this process already joined a job as rank ", current->info.rank, " of ", current->info.size,
                  "; it cannot join another as rank ", info.rank, " of ", info.size);
  }
  if (mpi_process().size > 1)
    user_error_at("join_external_job", "this process was started by mpirun as rank ", mpi_process().rank, " of ", mpi_process().size,
                  ", and Alloy communicates through MPI there; another launcher's job cannot be joined");
  if (made_a_team_of_several.load())
    user_error_at("join_external_job", "a fusion with a mesh of several devices already ran in this process; join the job first");
  external_job.store(new ExternalJob{info, std::move(make_team), nullptr}, std::memory_order_release);  // kept to the end
}

bool in_external_job() { return external_job.load(std::memory_order_acquire) != nullptr; }

bool have_mpi() { return ALLOY_HAVE_MPI != 0; }

namespace {
// The joined job's team of every rank, made on first use (collectively: every rank reaches its
// first agreement together).
Communicator& external_world(ExternalJob& job) {
  if (!job.world) {
    std::vector<int64_t> everyone(size_t(job.info.size));
    for (int r = 0; r < job.info.size; ++r) everyone[size_t(r)] = r;
    job.world = host_communicator(everyone);
  }
  return *job.world;
}
}  // namespace

void job_all_gather(const void* mine, size_t bytes, void* all) {
  const ProcessInfo& p = process();
  if (p.size == 1) {
    std::memcpy(all, mine, bytes);
    return;
  }
  if (ExternalJob* job = external_job.load()) {
    ALLOY_CHECK(bytes % 8 == 0, "job_all_gather of ", bytes, " bytes: a multiple of 8 moves as i64");
    Tensor in = Tensor::borrow(const_cast<void*>(mine), Device{}, DType::i64, {int64_t(bytes / 8)}, {1});
    Tensor out = Tensor::borrow(all, Device{}, DType::i64, {int64_t(p.size) * int64_t(bytes / 8)}, {1});
    external_world(*job).all_gather(in, out);
    return;
  }
#if ALLOY_HAVE_MPI
  check(MPI_Allgather(mine, count_of(int64_t(bytes), "job_all_gather"), MPI_BYTE, all, count_of(int64_t(bytes), "job_all_gather"),
                      MPI_BYTE, MPI_COMM_WORLD),
        "job agreement");
#else
  internal_error("a job of several processes in a build without MPI");
#endif
}

int first_failing_rank(bool failed) {
  const ProcessInfo& p = process();
  if (p.size == 1) return failed ? 0 : -1;
  if (ExternalJob* job = external_job.load()) {
    external_world(*job);
    int32_t mine = failed ? p.rank : p.size, lowest = p.size;
    job->world->all_reduce(Tensor::borrow(&mine, Device{}, DType::i32, {1}, {1}), Tensor::borrow(&lowest, Device{}, DType::i32, {1}, {1}),
                           PartialReduce::min);
    return lowest == p.size ? -1 : lowest;
  }
#if ALLOY_HAVE_MPI
  int mine = failed ? p.rank : p.size, lowest = p.size;
  check(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "agreement");
  return lowest == p.size ? -1 : lowest;
#else
  return failed ? 0 : -1;
#endif
}

void finalize() {
#if ALLOY_HAVE_MPI
  if (mpi_started()) MPI_Finalize();
#endif
}

bool in_mpi_job_of_several() {
#if ALLOY_HAVE_MPI
  return mpi_started() && process().size > 1;
#else
  return false;
#endif
}

void abort_mpi_job_if_started(int code) {
#if ALLOY_HAVE_MPI
  if (mpi_started() && process().size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  (void)code;
}

void abort_job(int code) {
#if ALLOY_HAVE_MPI
  if (mpi_started() && process().size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

std::optional<std::string> mesh_misfit(const std::vector<int64_t>& mesh) {
  int size = process().size;
  int64_t highest = 0;
  for (int64_t d : mesh) highest = std::max(highest, d);
  if (highest < size) return std::nullopt;
  auto plural = [](int64_t n, const char* noun, const char* nouns) { return std::to_string(n) + " " + (n == 1 ? noun : nouns); };
  // a device id is a rank of the job: ids 0 .. size-1 (a huge id is named, never added to)
  std::string text = "the mesh has " + plural(int64_t(mesh.size()), "device", "devices") + " but the job has " +
                     plural(size, "process", "processes");
  if (int64_t(mesh.size()) <= size) text += " (device id " + std::to_string(highest) + " is not a rank of the job)";
  bool launchable = highest < (int64_t(1) << 20);
  std::string n = launchable ? std::to_string(highest + 1) : "N";
  if (!launchable)
    text += "; device ids are the job's ranks, 0 to " + std::to_string(size - 1) + ", and " + std::to_string(highest) +
            " is no rank any job has";
  else if (in_external_job())
    text += "; launch one process per device, e.g. `torchrun --nproc-per-node " + n + " ...`";
  else
    text += "; launch one process per device, e.g. `mpirun -n " + n + " alloy run ...`, or `mpirun -n " + n + " python3 script.py` for a Python script";
  if (!in_external_job() && !have_mpi()) text += " (this build has no MPI: rebuild with Open MPI installed, scripts/setup-deps)";
  return text;
}

std::shared_ptr<Communicator> host_communicator(const std::vector<int64_t>& mesh) {
  if (auto misfit = mesh_misfit(mesh)) user_error_at("mesh", *misfit);
  const ProcessInfo& p = process();
  int position = -1;
  for (size_t i = 0; i < mesh.size(); ++i)
    if (mesh[i] == p.rank) position = int(i);
  if (mesh.size() == 1) return position == 0 ? std::make_shared<SelfCommunicator>() : nullptr;
  made_a_team_of_several.store(true);
  if (ExternalJob* job = external_job.load()) {
    std::shared_ptr<Communicator> team = job->make_team(mesh, position);
    if (position >= 0 && (!team || team->rank() != position || team->size() != int(mesh.size())))
      internal_error("the team made for mesh position ", position, " of ", mesh.size(), " is ",
                     team ? std::to_string(team->rank()) + " of " + std::to_string(team->size()) : std::string("missing"));
    return position >= 0 ? team : nullptr;
  }
#if ALLOY_HAVE_MPI
  MPI_Comm comm;
  check(MPI_Comm_split(MPI_COMM_WORLD, position >= 0 ? 0 : MPI_UNDEFINED, position, &comm), "split by mesh");
  if (position < 0) return nullptr;
  return std::make_shared<MpiCommunicator>(comm, position, int(mesh.size()));
#else
  internal_error("a mesh of several devices in a build without MPI");
#endif
}

}  // namespace alloy::multidevice
