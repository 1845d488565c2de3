"""A script that runs fusions on torch tensors (CUDA where there is a GPU) exits without a word on
stderr (issue 26: nanobind once reported leaked instances at exit). The script runs in a child
process, as a user's would."""
import os
import subprocess
import sys

import pytest

GPU_REQUIRED = os.environ.get("ALLOY_REQUIRE_GPU") == "1"
if not GPU_REQUIRED:
    pytest.importorskip("torch")

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "exit_clean.py")


def test_script_exits_cleanly():
    child = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert child.returncode == 0, child.stderr
    assert "exit_clean: ran on" in child.stdout
    if GPU_REQUIRED:
        assert "ran on cuda" in child.stdout
    assert child.stderr.strip() == "", "stderr at exit:\n" + child.stderr
