"""One process of a job that Alloy joins through alloy._alloy.join_external_job with a host team
written here over sockets (no MPI, no torch): what a framework's launcher (torchrun) does through
torch.distributed. Started by test_external_job.py as `external_worker.py RANK SIZE PORT`; runs
sharded fusions on its parts, checks them against NumPy and exits 0 when every check passed."""
import sys
import time
from multiprocessing.connection import Client, Listener

import numpy as np

import alloy
from alloy import _alloy, distributed

RANK, SIZE, PORT = (int(a) for a in sys.argv[1:4])
AUTH = b"alloy-test"
NUMPY = {"f64": np.float64, "f32": np.float32, "i64": np.int64, "i32": np.int32}
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


class StarTeam:
    """Every collective goes through rank 0 of the job, which gathers every member's buffer,
    computes each member's result and sends it back (collectives are in the same order on every
    rank, so one connection per rank serves them all)."""

    def __init__(self, ranks):
        self.ranks = ranks
        self.calls = 0

    def _exchange(self, payload, combine):
        self.calls += 1
        if RANK == self.ranks[0]:
            gathered = [payload] + [PEERS[r].recv() for r in self.ranks[1:]]
            results = combine(gathered)
            for i, r in enumerate(self.ranks[1:], start=1):
                PEERS[r].send(results[i])
            return results[0]
        ROOT.send(payload)
        return ROOT.recv()

    def all_gather(self, inp, out, dtype):
        out[:] = np.frombuffer(self._exchange(bytes(inp), lambda parts: [b"".join(parts)] * len(parts)), np.uint8)

    def all_reduce(self, inp, out, dtype, op):
        t = NUMPY[dtype]
        whole = self._exchange(inp.view(t).copy(), lambda parts: [REDUCE[op](np.stack(parts), axis=0)] * len(parts))
        out.view(t)[:] = whole

    def reduce_scatter(self, inp, out, dtype, op):
        t = NUMPY[dtype]
        n = len(self.ranks)
        whole = self._exchange(inp.view(t).copy(), lambda parts: list(np.split(REDUCE[op](np.stack(parts), axis=0), n)))
        out.view(t)[:] = whole

    def all_to_all(self, inp, out, dtype):
        n = len(self.ranks)
        out[:] = self._exchange(inp.copy(), lambda parts: [np.concatenate([np.split(p, n)[r] for p in parts]) for r in range(n)])

    def broadcast(self, buffer, dtype, root):
        data = self._exchange(buffer.copy(), lambda parts: [parts[root]] * len(parts))
        buffer[:] = data

    def send(self, buffer, dtype, peer):
        raise NotImplementedError("StarTeam: send")

    def recv(self, buffer, dtype, peer):
        raise NotImplementedError("StarTeam: recv")


TEAMS = []


def make_team(ranks, position):
    assert ranks == sorted(ranks) and ranks[0] == 0, "this test's teams are led by rank 0"
    team = StarTeam(list(ranks))
    TEAMS.append(team)
    return team if position >= 0 else None


if RANK == 0:
    listener = Listener(("127.0.0.1", PORT), authkey=AUTH)
    PEERS = {}
    for _ in range(SIZE - 1):
        conn = listener.accept()
        PEERS[conn.recv()] = conn
else:
    for attempt in range(400):  # until rank 0 listens
        try:
            ROOT = Client(("127.0.0.1", PORT), authkey=AUTH)
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    ROOT.send(RANK)

assert alloy.distributed.world_size() == 1  # a job of one until it joins
_alloy.join_external_job(RANK, SIZE, 0, make_team)
assert (distributed.rank(), distributed.world_size(), distributed.is_initialized()) == (RANK, SIZE, True)
_alloy.join_external_job(RANK, SIZE, 0, make_team)  # joining the same job again changes nothing
try:
    _alloy.join_external_job((RANK + 1) % SIZE, SIZE, 0, make_team)
    raise SystemExit("joining another place did not fail")
except alloy.Error as e:
    assert "already joined a job as rank" in str(e), e

mesh = list(range(SIZE))
with alloy.FusionDefinition("tp_mlp") as fd:
    x = fd.define_tensor(name="x", shape=["T", 32], dtype=alloy.float32, mesh=mesh)
    w_fc = fd.define_tensor(name="w_fc", shape=[96, 32], dtype=alloy.float32, mesh=mesh, placement=alloy.Shard(0))
    w_proj = fd.define_tensor(name="w_proj", shape=[32, 96], dtype=alloy.float32, mesh=mesh, placement=alloy.Shard(1))
    h = fd.ops.relu(fd.ops.linear(x, w_fc))
    fd.add_output(fd.ops.linear(h, w_proj))
rng = np.random.default_rng(2)
whole = [rng.standard_normal((6, 32)).astype(np.float32), rng.standard_normal((96, 32)).astype(np.float32),
         rng.standard_normal((32, 96)).astype(np.float32)]
(y,) = fd.execute(fd.local_inputs(whole))
np.testing.assert_allclose(y, np.maximum(whole[0] @ whole[1].T, 0) @ whole[2].T, rtol=1e-4, atol=1e-4)
assert sum(t.calls for t in TEAMS) > 0, "the run communicated through the team"

# a wrong part on the last rank: it reports its input, every other rank that it failed
parts = fd.local_inputs(whole)
if RANK == SIZE - 1:
    parts[2] = whole[2]
try:
    fd.execute(parts)
    raise SystemExit("a wrong part did not fail")
except alloy.Error as e:
    expected = "input 'w_proj'" if RANK == SIZE - 1 else f"rank {SIZE - 1} of the mesh failed"
    assert expected in str(e), e

# a mesh larger than the job: the hint names a launch of the right size
with alloy.FusionDefinition("too_big") as big:
    z = big.define_tensor(shape=[2 * SIZE + 2], dtype=alloy.float32, mesh=list(range(SIZE + 1)), placement=alloy.Shard(0))
    big.add_output(big.ops.neg(z))
try:
    big.execute([np.zeros(2, np.float32)])
    raise SystemExit("a mesh larger than the job did not fail")
except alloy.Error as e:
    assert f"torchrun --nproc-per-node {SIZE + 1}" in str(e), e
print(f"rank {RANK}: ok")
