// Multi-device from Python. Under mpirun the job is MPI's (nothing to do here). Under another
// launcher (torchrun) the Python side joins the job (alloy.distributed.init) and hands in a maker
// of host teams written in Python over torch.distributed; a PythonTeam is one such team as the
// runtime's Communicator: each collective calls the team's method with the buffers as NumPy
// byte arrays viewing Alloy's memory (no copies), holding the GIL for the call.
#include "distributed.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "alloy/common/error.h"
#include "alloy/multidevice/agreement.h"
#include "alloy/multidevice/communicator.h"

namespace alloy::python {
namespace {

using namespace nb::literals;

using multidevice::Communicator;

const char* reduce_name(PartialReduce op) {
  switch (op) {
    case PartialReduce::sum: return "sum";
    case PartialReduce::max: return "max";
    case PartialReduce::min: return "min";
  }
  return "sum";
}

class PythonTeam final : public Communicator {
 public:
  PythonTeam(nb::object team, int rank, int size)
      : Communicator(rank, size), team_(std::move(team)), name_(nb::type_name(team_.type()).c_str()) {}
  ~PythonTeam() override {
    if (Py_IsInitialized()) {
      nb::gil_scoped_acquire gil;
      team_.reset();
    } else {
      team_.release();  // the interpreter is gone: nothing to release it to
    }
  }
  std::string name() const override { return name_; }

  // Each collective is team.METHOD(buffers..., dtype name[, reduction name | root | peer]).
  void all_gather(const Tensor& in, const Tensor& out) override {
    nb::gil_scoped_acquire gil;
    team_.attr("all_gather")(bytes_of(in), bytes_of(out), std::string(dtype_name(in.dtype())));
  }
  void reduce_scatter(const Tensor& in, const Tensor& out, PartialReduce op) override {
    nb::gil_scoped_acquire gil;
    team_.attr("reduce_scatter")(bytes_of(in), bytes_of(out), std::string(dtype_name(in.dtype())), reduce_name(op));
  }
  void all_reduce(const Tensor& in, const Tensor& out, PartialReduce op) override {
    nb::gil_scoped_acquire gil;
    team_.attr("all_reduce")(bytes_of(in), bytes_of(out), std::string(dtype_name(in.dtype())), reduce_name(op));
  }
  void all_to_all(const Tensor& in, const Tensor& out) override {
    nb::gil_scoped_acquire gil;
    team_.attr("all_to_all")(bytes_of(in), bytes_of(out), std::string(dtype_name(in.dtype())));
  }
  void broadcast(const Tensor& buffer, int root) override {
    nb::gil_scoped_acquire gil;
    team_.attr("broadcast")(bytes_of(buffer), std::string(dtype_name(buffer.dtype())), root);
  }
  void send(const Tensor& in, int peer) override {
    nb::gil_scoped_acquire gil;
    team_.attr("send")(bytes_of(in), std::string(dtype_name(in.dtype())), peer);
  }
  void recv(const Tensor& out, int peer) override {
    nb::gil_scoped_acquire gil;
    team_.attr("recv")(bytes_of(out), std::string(dtype_name(out.dtype())), peer);
  }
  // team.send_recv(send, receive, dtype, to, from) where the team has one (TorchTeam: isend and
  // irecv together); else the default's parity order of send and recv.
  void send_recv(const Tensor& in, int to, const Tensor& out, int from) override {
    {
      nb::gil_scoped_acquire gil;
      if (nb::hasattr(team_, "send_recv")) {
        team_.attr("send_recv")(bytes_of(in), bytes_of(out), std::string(dtype_name(in.dtype())), to, from);
        return;
      }
    }
    Communicator::send_recv(in, to, out, from);
  }

 private:
  // A contiguous host buffer as a 1-D uint8 NumPy array over its bytes (made with the GIL held;
  // it owns nothing: the team uses it during the call only).
  static nb::object bytes_of(const Tensor& t) {
    ALLOY_CHECK(t.device().kind == DeviceKind::cpu && t.is_contiguous(), "a host team was handed ", t.str());
    size_t shape[1] = {size_t(t.numel()) * size_t(dtype_size(t.dtype()))};
    return nb::cast(nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(t.data(), 1, shape, nb::handle()), nb::rv_policy::reference);
  }

  nb::object team_;
  std::string name_;
};

}  // namespace

void bind_distributed(nb::module_& m) {
  m.def(
      "process_info",
      [] {
        const multidevice::ProcessInfo& p = multidevice::process();
        return std::make_tuple(p.rank, p.size, p.local_rank);
      },
      "(rank, size, local rank) of this process in its job: MPI's under mpirun, the joined job's, or (0, 1, 0).");
  m.def("in_external_job", &multidevice::in_external_job);
  m.def("have_mpi", &multidevice::have_mpi);
  m.def("finalize_mpi", &multidevice::finalize, "Ends MPI where Alloy started it (at the interpreter's exit).");
  m.def("leave_job", &multidevice::leave_job, nb::arg("untold") = false,
        "At exit: meets the other ranks' next agreement as a rank that left (they fail, not wait); the lowest rank leaving "
        "with an agreed error not yet printed (untold), -1 if none, -2 where nothing was gathered.");
  m.def("agreed_failure_teller", &multidevice::agreed_failure_teller, nb::arg("message"),
        "The rank that tells the failure of this message every rank of the job learnt of at one agreement, or -1.");
  m.def("abort_mpi_job_if_started", &multidevice::abort_mpi_job_if_started,
        "Ends every process of the job (MPI_Abort) where Alloy started MPI in a job of several; else nothing.");
  m.def(
      "join_external_job",
      [](int rank, int size, int local_rank, nb::object make_team) {
        if (!PyCallable_Check(make_team.ptr())) user_error_at("alloy.distributed.init", "make_team must be callable");
        multidevice::ProcessInfo info{rank, size, local_rank};
        // kept by the job for the life of the process (never destroyed: no GIL is needed at exit)
        auto* maker = new nb::object(std::move(make_team));
        multidevice::join_external_job(info, [maker](const std::vector<int64_t>& mesh, int position) -> std::shared_ptr<Communicator> {
          nb::gil_scoped_acquire gil;
          nb::list ranks;
          for (int64_t d : mesh) ranks.append(d);
          nb::object team = (*maker)(ranks, position);
          if (position < 0) return nullptr;
          if (team.is_none()) internal_error("the Python team maker returned None for mesh position ", position);
          return std::make_shared<PythonTeam>(std::move(team), position, int(mesh.size()));
        });
      },
      "rank"_a, "size"_a, "local_rank"_a, "make_team"_a,
      "Joins a job another launcher started. make_team(mesh_ranks, position) is called by every rank together "
      "and returns the team object (None outside the mesh).");
}

}  // namespace alloy::python
