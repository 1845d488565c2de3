"""A rank of an mpirun job that leaves between two runs of a sharded fusion (an uncaught exception,
sys.exit with a failure, or its script ending while the others run again) ends the whole job,
with a failing status, instead of leaving the
others waiting for it in a collective while its own MPI_Finalize waits for them (a hang). The job
runs in a child process, as a user's would."""
import os
import shutil
import subprocess
import sys

import pytest

import alloy.distributed

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "rank_leaves.py")


@pytest.mark.skipif(shutil.which("mpirun") is None or not alloy._alloy.have_mpi() or alloy.distributed.world_size() > 1,
                    reason="needs mpirun and Alloy built with MPI (and runs from one process)")
@pytest.mark.parametrize("how, status", [("raise", 1), ("exit", 3), ("end", 1)])
def test_a_rank_leaving_between_runs_ends_the_job(how, status):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for name in [k for k in env if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "PMI_"))]:
        del env[name]  # (a job of its own, not this process's)
    child = subprocess.run(["mpirun", "--oversubscribe", "-n", "2", sys.executable, SCRIPT, how], capture_output=True,
                           text=True, timeout=120, env=env)
    assert "rank 0: first run done" in child.stdout and "rank 1: first run done" in child.stdout, child.stdout + child.stderr
    assert child.returncode == status, child.stdout + child.stderr
    if how == "raise":
        assert "RuntimeError: rank 1 leaves" in child.stderr, child.stderr
    if how == "end":  # (its script ended normally: the rank running again fails, not waits)
        assert "rank 1 of the mesh left the job (its script ended) before this run" in child.stderr, child.stderr
