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
@pytest.mark.parametrize("how, status, agreement", [("raise", 1, None), ("exit", 3, None), ("builtin_exit", 3, None), ("end", 1, None),
                                                   ("end", 1, "on_change")])
def test_a_rank_leaving_between_runs_ends_the_job(how, status, agreement):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for name in [k for k in env if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "PMI_"))]:
        del env[name]  # (a job of its own, not this process's)
    child = subprocess.run(["mpirun", "--oversubscribe", "-n", "2", sys.executable, SCRIPT, how] + ([agreement] if agreement else []),
                           capture_output=True, text=True, timeout=120, env=env)
    assert "rank 0: first run done" in child.stdout and "rank 1: first run done" in child.stdout, child.stdout + child.stderr
    assert child.returncode == status, child.stdout + child.stderr
    if how == "raise":
        assert "RuntimeError: rank 1 leaves" in child.stderr, child.stderr
    if how == "end":  # (its script ended normally: the rank running again fails, not waits; on_change's first
        # gather, of the same record as every_run's, meets the leaving rank's: it was a gather of one word)
        assert "rank 1 of the mesh left the job (its script ended) before this run" in child.stderr, child.stderr
        assert child.stderr.count("left the job") == 1, child.stderr
        assert "MPI_ABORT" not in child.stderr and "TRUNCATE" not in child.stderr, child.stderr


DISAGREE = os.path.join(os.path.dirname(__file__), "scripts", "ranks_disagree.py")


@pytest.mark.skipif(shutil.which("mpirun") is None or not alloy._alloy.have_mpi() or alloy.distributed.world_size() > 1,
                    reason="needs mpirun and Alloy built with MPI (and runs from one process)")
@pytest.mark.parametrize("what, told", [("pipeline", "disagree on the pipeline: rank 2 has ring, rank 0 off"),
                                        ("agreement", "disagree on the agreement option: rank 2 has on_change, rank 0 every_run"),
                                        ("shape", "disagree on the bound sizes: rank 2 has"),
                                        ("swap", "disagree on the fusion: rank 2 has"),
                                        ("caught", "rank 2 of the mesh failed before communicating"),
                                        ("own", "expected dtype f32 (declared f32[4, ?/3]), found f64"),
                                        ("validate", "disagree on the call: rank 2 has validate, rank 0 run")])
def test_ranks_that_disagree_are_told_once_and_the_job_exits_1(what, told):
    """Three ranks, the last given another option or input shape, or running another definition
    under on_change, or validating where the others execute: every rank raises the same agreed
    error, and one rank prints it at exit (one traceback, not three: the failing rank's own, with
    its cause; where it caught its own, the others' "failed"), and the job
    exits 1 without MPI_ABORT (the agreement option differing was a gather of two sizes:
    MPI_ERR_TRUNCATE; the swapped definitions were skipped, and summed wrong)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for name in [k for k in env if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "PMI_"))]:
        del env[name]
    child = subprocess.run(["mpirun", "--oversubscribe", "-n", "3", sys.executable, DISAGREE, what], capture_output=True, text=True,
                           timeout=120, env=env)
    assert child.returncode == 1, child.stdout + child.stderr
    assert told in child.stderr, child.stderr
    assert child.stderr.count("Traceback") == 1, child.stderr
    assert child.stderr.count("alloy._alloy.Error") == 1, child.stderr
    assert "MPI_ABORT" not in child.stderr and "TRUNCATE" not in child.stderr, child.stderr
