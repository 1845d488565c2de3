"""Run under mpirun: every rank runs a sharded fusion once, then the last rank leaves (an
uncaught exception, sys.exit(3), the builtin exit(3), or its script ending) while the others run it again
(test_job_exit.py); argv[2], where given, is the definition's agreement option."""
import sys

import numpy as np

import alloy
from alloy import distributed

rank, size = distributed.rank(), distributed.world_size()
options = {"agreement": sys.argv[2]} if len(sys.argv) > 2 else None
with alloy.FusionDefinition("row_sums", options=options) as fd:
    x = fd.define_tensor(shape=[4, 2 * size], dtype=alloy.float32, mesh=list(range(size)), placement=alloy.Shard(1))
    fd.add_output(fd.ops.sum(x, dims=[1]))
whole = np.arange(8 * size, dtype=np.float32).reshape(4, 2 * size)
fd.execute(fd.local_inputs([whole]))
print(f"rank {rank}: first run done", flush=True)
if rank == size - 1:
    if sys.argv[1] == "raise":
        raise RuntimeError(f"rank {rank} leaves")
    if sys.argv[1] == "exit":
        sys.exit(3)
    if sys.argv[1] == "builtin_exit":
        exit(3)  # noqa: F821 (the interpreter's builtin, as a script calls it)
else:
    fd.execute(fd.local_inputs([whole]))
