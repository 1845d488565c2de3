"""The torch exchange path (torch._C._to_dlpack in, a DLPack capsule out through
torch._C._from_dlpack, torch's current stream) exercised where torch is not installed: a
subprocess registers a stand-in `torch` module built on NumPy, so CI checks the C++ side of the
path. On a machine with torch, test_torch.py tests the real one."""
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import sys, types
    import numpy as np

    class Tensor(np.ndarray):
        pass

    calls = {"to": 0, "from": 0}
    VERSIONED = sys.argv[1] == "versioned"

    def to_dlpack(t):
        calls["to"] += 1
        return np.asarray(t).__dlpack__(max_version=(1, 0)) if VERSIONED else np.asarray(t).__dlpack__()

    class Capsule:
        def __init__(self, capsule):
            self.capsule = capsule
        def __dlpack__(self, **kwargs):
            return self.capsule
        def __dlpack_device__(self):
            return (1, 0)

    def from_dlpack(capsule):
        calls["from"] += 1
        assert type(capsule).__name__ == "PyCapsule"
        return np.from_dlpack(Capsule(capsule)).view(Tensor)

    torch = types.ModuleType("torch")
    torch.Tensor = Tensor
    torch._C = types.SimpleNamespace(_from_dlpack=from_dlpack)
    setattr(torch._C, "_to_dlpack_versioned" if VERSIONED else "_to_dlpack", to_dlpack)
    sys.modules["torch"] = torch

    import alloy
    fd = alloy.parse("fusion f(a: f32[N]) {\\n  c = exp(a)\\n  d = segment_set(a)\\n  return c, d\\n}")
    a = np.arange(3, dtype=np.float32).view(Tensor)
    c, d = fd.execute([a])
    assert isinstance(c, Tensor) and isinstance(d, Tensor), (type(c), type(d))
    assert np.allclose(c, np.exp(np.arange(3))), c
    assert np.shares_memory(d, a)
    assert calls == {"to": 1, "from": 2}, calls
    print("ok")
""")


@pytest.mark.parametrize("exporter", ["versioned", "legacy"])
def test_torch_path_with_a_stand_in_module(exporter):
    result = subprocess.run([sys.executable, "-c", SCRIPT, exporter], capture_output=True, text=True, env=os.environ.copy())
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"
