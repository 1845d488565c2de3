"""Run under mpirun (test_job_exit.py): the last rank differs from the others in argv[1] and every
rank's error goes uncaught, but where said:
  pipeline, agreement: its definition's option;  shape: its local part's shape;
  swap: two definitions under on_change, each agreed once, then the last rank runs the other one
    (each rank's record unchanged since its own last agreement: skipped before, wrong sums);
  caught: its local part in f64 (its own failure before communicating), which it catches (the
    others' "rank 2 failed" is told);
  own: the same failure uncaught (its own message is told, with the cause, not the others');
  validate: it validates where the others execute (the runs inside validate are not paired with
    the others' runs: a disagreement on the call).
"""
import sys

import numpy as np

import alloy
from alloy import distributed

rank, size = distributed.rank(), distributed.world_size()
last = rank == size - 1
how = sys.argv[1]
options = {"pipeline": "off"}
if how == "pipeline" and last:
    options["pipeline"] = "ring"
if how == "agreement" and last:
    options["agreement"] = "on_change"
if how == "swap":
    options["agreement"] = "on_change"


def row_sums(name):
    with alloy.FusionDefinition(name, options=options) as fd:
        x = fd.define_tensor(shape=[4, -1], dtype=alloy.float32, mesh=list(range(size)), placement=alloy.Shard(1))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    return fd


fd = row_sums("row_sums")
if how == "swap":
    other = row_sums("row_sums_again")
    part = np.ones((4, 2), dtype=np.float32)
    fd.execute([part])
    other.execute([part])
    (other if last else fd).execute([part])
    sys.exit(0)
columns = 3 if how == "shape" and last else 2
if how == "caught" and last:
    try:
        fd.execute([np.ones((4, columns), dtype=np.float64)])
    except alloy.Error:
        pass
    sys.exit(0)
if how == "own" and last:
    fd.execute([np.ones((4, columns), dtype=np.float64)])
if how == "validate" and last:
    fd.validate([np.ones((4, columns), dtype=np.float32)])
fd.execute([np.ones((4, columns), dtype=np.float32)])
