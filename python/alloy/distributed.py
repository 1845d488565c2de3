"""Alloy on several devices from Python: one process per device, each running the fusion on its
own part of every tensor.

A fusion has a mesh when its inputs are laid over one (``define_tensor(..., mesh=[0, 1],
placement=alloy.Shard(0))`` or ``@mesh[0, 1] shard(axis=0)`` in the text). Device id K is the
process of rank K. Start one process per device:

- ``mpirun -n 2 python train.py``: Alloy communicates through MPI (host tensors) and NCCL
  (device tensors); nothing to set up.
- ``torchrun --nproc-per-node 2 train.py`` with ``torch.distributed.init_process_group`` called:
  Alloy joins torch's job on the first run of a fusion with a mesh (or at ``alloy.distributed.init()``);
  host bytes, and NCCL's unique id, move through a gloo group of torch.distributed.

``fd.execute`` then takes this rank's part of each input (``fd.local_inputs(whole_inputs)``
cuts them) and returns this rank's part of each output; or it takes
``torch.distributed.tensor.DTensor`` inputs (redistributed to the fusion's placements where
they differ) and returns DTensors. A rank outside the mesh gets no outputs.
"""

from __future__ import annotations

import atexit as _atexit
import os as _os
import re as _re
import sys as _sys

from . import _alloy

__all__ = ["Shard", "Replicate", "rank", "world_size", "local_rank", "init", "is_initialized", "TorchTeam"]


class Shard:
    """Split evenly along ``dim`` over the mesh (as ``torch.distributed.tensor.Shard``)."""

    def __init__(self, dim):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise _alloy.Error(f"Shard: the axis must be an int >= 0, found {dim!r}")
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate:
    """A whole copy on every device of the mesh (as ``torch.distributed.tensor.Replicate``)."""

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __repr__(self):
        return "Replicate()"


def placement_axis(placement, where="placement"):
    """The shard axis a placement names (None: replicated). Takes alloy's and torch's Shard and
    Replicate, and the text's "replicated" / "shard(axis=K)"."""
    if isinstance(placement, str):
        text = placement.replace(" ", "")
        if text in ("replicated", "replicate", "Replicate()"):
            return None
        m = _re.fullmatch(r"shard\((?:axis|dim)=(\d+)\)|Shard\((?:dim=)?(\d+)\)", text)
        if m:
            return int(m.group(1) or m.group(2))
    else:
        kind = type(placement).__name__
        if kind == "Replicate":
            return None
        if kind == "Shard" and isinstance(getattr(placement, "dim", None), int):
            return placement.dim
    raise _alloy.Error(f"{where}: expected Shard(k), Replicate(), \"replicated\" or \"shard(axis=K)\", found {placement!r}")


def rank():
    """This process's rank in its job (0 in a job of one)."""
    return _alloy.process_info()[0]


def world_size():
    """The processes in this job (1 without a launcher)."""
    return _alloy.process_info()[1]


def local_rank():
    """This process's rank among those of its host: picks its GPU."""
    return _alloy.process_info()[2]


def is_initialized():
    """Whether this process is in a job of several (MPI's, or one joined with init)."""
    return world_size() > 1


def _torch_dist():
    import sys
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def init(group=None):
    """Joins the job of torch.distributed (which must be initialized: torchrun and
    ``init_process_group``). Every rank calls it, or lets the first run of a fusion with a mesh
    call it. Not needed (and refused) under mpirun, where Alloy uses MPI itself."""
    if _alloy.in_external_job():
        return
    dist = _torch_dist()
    if dist is None:
        raise _alloy.Error("alloy.distributed.init: torch.distributed is not initialized; call "
                           "torch.distributed.init_process_group() first (or start with mpirun)")
    if group is not None and group is not dist.group.WORLD:
        raise _alloy.Error("alloy.distributed.init: only the default (world) group can be joined; mesh ids are its ranks")
    size = dist.get_world_size()
    me = dist.get_rank()
    local = int(_os.environ.get("LOCAL_RANK", me))
    _alloy.join_external_job(me, size, local, _make_torch_team)


def _maybe_join_torch():
    """Before the first run of a fusion with a mesh: join torch's job where it runs one."""
    if _alloy.in_external_job() or world_size() > 1:
        return
    dist = _torch_dist()
    if dist is not None and dist.get_world_size() > 1:
        init()


def _make_torch_team(ranks, position):
    # called by every rank together, as torch.distributed.new_group wants
    team = TorchTeam(ranks)
    return team if position >= 0 else None


_NARROW = ("bf16", "f16")


class TorchTeam:
    """A host team over torch.distributed: the byte buffers of Alloy's host tensors move through a
    gloo group of the team's ranks (any world backend: NCCL's process groups take no CPU tensors).
    Reductions of 16-bit floats run in f32 and are rounded once, as Alloy's MPI team does."""

    def __init__(self, ranks):
        import torch
        import torch.distributed as dist
        self._torch = torch
        self._dist = dist
        self.ranks = [int(r) for r in ranks]
        self.group = dist.new_group(self.ranks, backend="gloo")
        self._dtypes = {
            "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
            "i64": torch.int64, "i32": torch.int32, "bool": torch.bool,
        }
        self._ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}

    def _bytes(self, array):
        return self._torch.from_numpy(array)

    def _typed(self, array, dtype):
        return self._bytes(array).view(self._dtypes[dtype])

    def _wide(self, array, dtype):
        t = self._typed(array, dtype)
        return t.float() if dtype in _NARROW else t.clone()

    def all_gather(self, inp, out, dtype):
        o = self._bytes(out)
        self._dist.all_gather(list(o.chunk(len(self.ranks))), self._bytes(inp), group=self.group)

    def all_reduce(self, inp, out, dtype, op):
        w = self._wide(inp, dtype)
        self._dist.all_reduce(w, op=self._ops[op], group=self.group)
        self._typed(out, dtype).copy_(w)

    def reduce_scatter(self, inp, out, dtype, op):
        # gloo has no reduce-scatter: reduce the whole buffer, keep this rank's part
        w = self._wide(inp, dtype)
        self._dist.all_reduce(w, op=self._ops[op], group=self.group)
        me = self.ranks.index(self._dist.get_rank())
        self._typed(out, dtype).copy_(w.chunk(len(self.ranks))[me])

    def all_to_all(self, inp, out, dtype):
        self._dist.all_to_all_single(self._bytes(out), self._bytes(inp), group=self.group)

    def broadcast(self, buffer, dtype, root):
        self._dist.broadcast(self._bytes(buffer), src=self.ranks[root], group=self.group)

    def send(self, buffer, dtype, peer):
        self._dist.send(self._bytes(buffer), dst=self.ranks[peer], group=self.group)

    def recv(self, buffer, dtype, peer):
        self._dist.recv(self._bytes(buffer), src=self.ranks[peer], group=self.group)

    def send_recv(self, send, receive, dtype, to, source):
        # a ring step: every rank sends and receives at once, so neither may wait for the other
        ops = [self._dist.P2POp(self._dist.isend, self._bytes(send), self.ranks[to], group=self.group),
               self._dist.P2POp(self._dist.irecv, self._bytes(receive), self.ranks[source], group=self.group)]
        for request in self._dist.batch_isend_irecv(ops):
            request.wait()


# ---- parts of tensors and DTensors ------------------------------------------------------------

def _is_dtensor(x):
    return type(x).__name__ == "DTensor" and hasattr(x, "to_local") and hasattr(x, "placements")


def local_part(tensor, mesh, axis, where="input"):
    """This rank's part of a whole ``tensor`` laid over ``mesh`` (sharded along ``axis``, or
    replicated when None): a view where the tensor kind has them."""
    if axis is None:
        return tensor
    n = len(mesh)
    size = int(tensor.shape[axis])
    if size % n:
        raise _alloy.Error(f"{where}: axis {axis} has {size} elements, which do not split evenly over a mesh of {n} devices")
    me = rank()
    if me not in mesh:
        return tensor  # a rank outside the mesh has no part: execute does not read it
    part = size // n
    p = mesh.index(me)
    index = (slice(None),) * axis + (slice(p * part, (p + 1) * part),)
    return tensor[index]


def dtensor_to_local(x, mesh, axis, where):
    """The local tensor of DTensor ``x`` in the placement the fusion wants (redistributed by torch
    where it differs)."""
    device_mesh = x.device_mesh
    if device_mesh.ndim != 1:
        raise _alloy.Error(f"{where}: a DTensor on a {device_mesh.ndim}-D device mesh; Alloy's meshes are 1-D")
    ranks = [int(r) for r in device_mesh.mesh.flatten().tolist()]
    if ranks != list(mesh):
        raise _alloy.Error(f"{where}: the DTensor's device mesh has ranks {ranks}; the fusion's mesh is {list(mesh)}")
    from torch.distributed.tensor import Replicate as TorchReplicate, Shard as TorchShard
    want = TorchReplicate() if axis is None else TorchShard(axis)
    have = x.placements[0]
    if type(have).__name__ != type(want).__name__ or getattr(have, "dim", None) != getattr(want, "dim", None):
        x = x.redistribute(device_mesh, [want])
    return x.to_local(), device_mesh


def to_dtensor(local, device_mesh, placement_text):
    """``local`` (this rank's part of an output) as a DTensor of the placement Alloy gives it."""
    from torch.distributed.tensor import DTensor, Replicate as TorchReplicate, Shard as TorchShard
    if placement_text == "replicated":
        placement = TorchReplicate()
    elif placement_text.startswith("shard"):
        placement = TorchShard(placement_axis(placement_text))
    else:  # partial(sum|max|min): a pending reduction over the mesh
        from torch.distributed.tensor import Partial
        placement = Partial(_re.fullmatch(r"partial\((\w+)\)", placement_text).group(1))
    return DTensor.from_local(local, device_mesh, [placement], run_check=False)


# A rank that leaves on an uncaught exception or through sys.exit with a failure ends the job (as
# `python -m mpi4py` does): the other ranks may be waiting for it in a collective, and an
# MPI_Finalize at its exit would wait for them, so the job would hang. The traceback is printed
# first. An error every rank of the job raised at one agreement (a rank's failure, the others'
# "rank 1 failed", a disagreement) ends no job: every rank is leaving at that point, and they meet
# at their exit, where the lowest rank that leaves on it uncaught prints it (told once, even where
# the rank that failed caught its own). Otherwise MPI, when Alloy started it in this process
# (mpirun), ends with the interpreter.
_previous_excepthook = _sys.excepthook
_previous_exit = _sys.exit
_failed_exit = [None]  # the failing sys.exit code this process is leaving with


_untold = [None]  # an agreed error this rank leaves on, printed at exit where it is the job's one to print


def _abort_job_on_uncaught(kind, value, traceback):
    if isinstance(value, _alloy.Error) and _alloy.agreed_failure_teller(str(value)) >= 0:
        _untold[0] = (kind, value, traceback)  # (printed at exit, by one rank: _end_mpi_at_exit)
        return
    _previous_excepthook(kind, value, traceback)
    _sys.stderr.flush()
    _alloy.abort_mpi_job_if_started(1)


def _note_exit(code):
    _failed_exit[0] = None if code is None or code == 0 else (code if isinstance(code, int) else 1)


def _exit_noting_failure(code=None):
    _note_exit(code)
    _previous_exit(code)


def _end_mpi_at_exit():
    if _failed_exit[0] is not None:
        _sys.stdout.flush()
        _sys.stderr.flush()
        _alloy.abort_mpi_job_if_started(_failed_exit[0])
    # (a rank still running meets it in its next agreement: an error, not a wait; the ranks ending
    # together learn which of them prints an agreed error: the lowest that has one uncaught, so the
    # job tells it once even where the rank the agreement named caught its own)
    first = _alloy.leave_job(_untold[0] is not None)
    if _untold[0] is not None:
        kind, value, traceback = _untold[0]
        if first == rank() or (first == -2 and _alloy.agreed_failure_teller(str(value)) == rank()):
            _previous_excepthook(kind, value, traceback)
            _sys.stderr.flush()
    _alloy.finalize_mpi()


class _QuitterNotingFailure:
    """The interpreter's `exit` and `quit` builtins, noting a failing code as sys.exit does (a bare
    `raise SystemExit(code)` is not seen: the other ranks are told this one left the job)."""

    def __init__(self, quitter):
        self._quitter = quitter

    def __repr__(self):
        return repr(self._quitter)

    def __call__(self, code=None):
        _note_exit(code)
        self._quitter(code)


_sys.excepthook = _abort_job_on_uncaught
_sys.exit = _exit_noting_failure
import builtins as _builtins  # noqa: E402
for _name in ("exit", "quit"):
    if hasattr(_builtins, _name) and not isinstance(getattr(_builtins, _name), _QuitterNotingFailure):
        setattr(_builtins, _name, _QuitterNotingFailure(getattr(_builtins, _name)))
_atexit.register(_end_mpi_at_exit)
