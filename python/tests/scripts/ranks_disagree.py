"""Run under mpirun (test_job_exit.py): the last rank differs from the others in argv[1] (its
definition's pipeline or agreement option, or its local part's shape) and every rank runs the
sharded fusion once, its error uncaught."""
import sys

import numpy as np

import alloy
from alloy import distributed

rank, size = distributed.rank(), distributed.world_size()
last = rank == size - 1
options = {"pipeline": "off"}
if sys.argv[1] == "pipeline" and last:
    options["pipeline"] = "ring"
if sys.argv[1] == "agreement" and last:
    options["agreement"] = "on_change"
with alloy.FusionDefinition("row_sums", options=options) as fd:
    x = fd.define_tensor(shape=[4, -1], dtype=alloy.float32, mesh=list(range(size)), placement=alloy.Shard(1))
    fd.add_output(fd.ops.sum(x, dims=[1]))
columns = 3 if sys.argv[1] == "shape" and last else 2
fd.execute([np.ones((4, columns), dtype=np.float32)])
