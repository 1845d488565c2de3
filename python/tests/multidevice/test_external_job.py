"""A job Alloy joins instead of starting (join_external_job, as under torchrun): two processes
with a host team written in Python (external_worker.py), each running a sharded fusion on its
parts against NumPy. Runs in python_tests, in a process that is not itself part of a job."""
import os
import socket
import subprocess
import sys

import pytest

from alloy import distributed

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(distributed.world_size() > 1, reason="spawns its own job; this process is already a rank of one")
@pytest.mark.parametrize("size", [2, 3])
def test_a_joined_job_runs_sharded_fusions_through_the_given_teams(size):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PMIX"))}
    port = free_port()
    workers = [subprocess.Popen([sys.executable, os.path.join(HERE, "external_worker.py"), str(r), str(size), str(port)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(size)]
    outputs = []
    for w in workers:
        try:
            out, _ = w.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for v in workers:
                v.kill()
            raise
        outputs.append((w.returncode, out))
    for r, (code, out) in enumerate(outputs):
        assert code == 0 and f"rank {r}: ok" in out, f"rank {r} exited {code}:\n{out}"
