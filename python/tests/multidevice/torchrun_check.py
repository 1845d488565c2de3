"""Alloy inside a torch.distributed job: `torchrun --nproc-per-node N torchrun_check.py` (N >= 1;
scripts/gpu-check runs it on the GPU machine, where torch is). Alloy joins torch's job on the first
run of a fusion with a mesh; host bytes move through a gloo group. Checks, against torch computed
on the whole tensors:
  - DTensor inputs on a CPU device mesh give DTensor outputs (an input in another placement than
    the fusion's is redistributed first);
  - local parts on the GPU (NCCL, or staged through the gloo group where ranks share a GPU);
  - a wrong part on one rank fails every rank with alloy.Error, and the job goes on.
Exits 0 when every check passed on this rank."""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import alloy

dist.init_process_group("gloo")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
MESH = list(range(SIZE))
D, F = 64, 64 * SIZE * 2


def define(dtype):
    with alloy.FusionDefinition("tp_mlp") as fd:
        x = fd.define_tensor(name="x", shape=["T", D], dtype=dtype, mesh=MESH)
        w_fc = fd.define_tensor(name="w_fc", shape=[F, D], dtype=dtype, mesh=MESH, placement=Shard(0))
        b_fc = fd.define_tensor(name="b_fc", shape=[F], dtype=dtype, mesh=MESH, placement=Shard(0))
        w_proj = fd.define_tensor(name="w_proj", shape=[D, F], dtype=dtype, mesh=MESH, placement=Shard(1))
        h = fd.ops.gelu(fd.ops.linear(x, w_fc, b_fc), approximate="tanh")
        fd.add_output(fd.ops.linear(h, w_proj))
        fd.add_output(h)
    return fd


def whole_inputs(device, dtype):
    g = torch.Generator().manual_seed(17)
    make = lambda *s, scale=1.0: (torch.randn(*s, generator=g) * scale).to(device=device, dtype=dtype)  # noqa: E731
    return [make(16, D), make(F, D, scale=0.1), make(F), make(D, F, scale=0.1)]


def reference(x, w_fc, b_fc, w_proj):
    h = torch.nn.functional.gelu(torch.nn.functional.linear(x.double(), w_fc.double(), b_fc.double()), approximate="tanh")
    return h @ w_proj.double().T, h


def check(name, got, want, tol):
    err = (got.double() - want).abs().max().item()
    if not err <= tol:
        print(f"rank {RANK}: {name}: max error {err} > {tol}", flush=True)
        sys.exit(1)


# 1. DTensors on a CPU mesh in, DTensors out; x arrives sharded and is redistributed (replicated)
fd = define(torch.float32)
cpu_mesh = init_device_mesh("cpu", (SIZE,))
whole = whole_inputs("cpu", torch.float32)
placements = [Shard(0), Shard(0), Shard(0), Shard(1)]  # x is Shard(0): the fusion wants it replicated
dts = [distribute_tensor(t, cpu_mesh, [p]) for t, p in zip(whole, placements)]
y, h = fd.execute(dts)
assert isinstance(y, DTensor) and isinstance(h, DTensor), (type(y), type(h))
assert y.placements == (Replicate(),) and h.placements == (Shard(1),), (y.placements, h.placements)
assert alloy.distributed.world_size() == SIZE and alloy.distributed.rank() == RANK
want_y, want_h = reference(*whole)
check("DTensor y", y.full_tensor(), want_y, 1e-3)
check("DTensor h", h.full_tensor(), want_h, 1e-3)

# 2. local parts on the GPU (a rank per GPU where there are enough; else ranks share one)
if torch.cuda.is_available():
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", RANK)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    for dtype, tol in ((torch.float32, 2e-3), (torch.bfloat16, 6e-2)):
        fd = define(dtype)
        whole = whole_inputs(device, dtype)
        y, h = fd.execute(fd.local_inputs(whole))
        torch.cuda.synchronize()
        want_y, want_h = reference(*whole)
        check(f"cuda {dtype} y", y, want_y, tol)
        check(f"cuda {dtype} h", h, want_h.chunk(SIZE, dim=1)[RANK], tol)
elif os.environ.get("ALLOY_REQUIRE_GPU") == "1":
    print(f"rank {RANK}: no GPU, but ALLOY_REQUIRE_GPU=1", flush=True)
    sys.exit(1)

# 3. a wrong part on the last rank fails every rank, then the job goes on
if SIZE > 1:
    fd = define(torch.float32)
    whole = whole_inputs("cpu", torch.float32)
    parts = fd.local_inputs(whole)
    if RANK == SIZE - 1:
        parts[3] = whole[3]
    try:
        fd.execute(parts)
        print(f"rank {RANK}: a wrong part did not fail", flush=True)
        sys.exit(1)
    except alloy.Error as e:
        expected = "input 'w_proj'" if RANK == SIZE - 1 else f"rank {SIZE - 1} of the mesh failed"
        if expected not in str(e):
            print(f"rank {RANK}: unexpected error: {e}", flush=True)
            sys.exit(1)
    y, _ = fd.execute(fd.local_inputs(whole))
    check("after a failure", y, reference(*whole)[0], 1e-3)

dist.barrier()
print(f"rank {RANK}: torchrun check ok ({SIZE} processes)", flush=True)
dist.destroy_process_group()
