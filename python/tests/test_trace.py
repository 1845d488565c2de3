"""fd.execute(..., trace=PATH): the run's timeline as a Chrome trace-event file (a span per node on
its stream, the host's track), the same outputs as an untraced run, and mistakes as alloy.Error.
The GPU variant runs where Alloy sees a GPU (under ALLOY_REQUIRE_GPU=1 it must)."""
import json
import os

import numpy as np
import pytest

import alloy

HOST_TID = 1000  # runtime/trace_file.h
GPU_REQUIRED = os.environ.get("ALLOY_REQUIRE_GPU") == "1"


def define_exp_sum():
    with alloy.FusionDefinition("exp_sum") as fd:
        x = fd.define_tensor(["N", 8], alloy.float32, name="x")
        e = fd.ops.exp(x)
        fd.add_output(fd.ops.sum(e, dims=[1]))
    return fd


def complete_events(path):
    with open(path) as f:
        trace = json.load(f)
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    return [e for e in events if e["ph"] == "X"], names


def test_a_traced_run_writes_a_span_per_op_on_its_stream_and_the_hosts(tmp_path):
    fd = define_exp_sum()
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    (expected,) = fd.execute([x], device="cpu")
    (y,) = fd.execute([x], device="cpu", trace=tmp_path / "t.json")  # a PathLike
    np.testing.assert_array_equal(y, expected)
    events, threads = complete_events(tmp_path / "t.json")
    on_stream = [e["name"] for e in events if e["tid"] == 0]
    assert on_stream[:1] == ["exp t0"] and len(on_stream) == 2 and on_stream[1].startswith("sum ")
    assert all(e["cat"] == "compute" and e["pid"] == 0 for e in events if e["tid"] == 0)
    host = [e["name"] for e in events if e["tid"] == HOST_TID]
    assert "run exp_sum" in host and "exp t0" in host
    assert threads[(0, 0)] == "stream 0 (run)" and threads[(0, HOST_TID)] == "host"
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in events)


@pytest.mark.parametrize("trace, message", [
    (3, "trace: expected a file path (str or os.PathLike), found int"),
    ("", "trace: expected a non-empty file path"),
])
def test_a_trace_that_is_not_a_path_is_an_error(trace, message):
    fd = define_exp_sum()
    with pytest.raises(alloy.Error, match=message.replace("(", r"\(").replace(")", r"\)")):
        fd.execute([np.ones((2, 8), np.float32)], trace=trace)


def test_a_trace_file_that_cannot_be_written_is_an_error_naming_it(tmp_path):
    fd = define_exp_sum()
    path = str(tmp_path / "no" / "such" / "t.json")
    with pytest.raises(alloy.Error, match="trace file .*t.json"):
        fd.execute([np.ones((2, 8), np.float32)], trace=path)


@pytest.mark.skipif(not GPU_REQUIRED and not alloy.cuda_available(), reason="no CUDA GPU (the GPU variant runs on the GPU machine)")
def test_a_traced_gpu_run_times_its_kernels_on_the_device(tmp_path):
    with alloy.FusionDefinition("gpu_mlp") as fd:
        x = fd.define_tensor(["T", 1024], alloy.bfloat16, name="x")
        w = fd.define_tensor([4096, 1024], alloy.bfloat16, name="w")
        h = fd.ops.linear(x, w)
        fd.add_output(fd.ops.gelu(h, approximate="tanh"))
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((2048, 1024)).astype(np.float32), rng.standard_normal((4096, 1024)).astype(np.float32)]
    fd.execute(inputs, device="cuda")  # compiles: the traced run is a warm one
    fd.execute(inputs, device="cuda", trace=str(tmp_path / "gpu.json"))
    events, _ = complete_events(tmp_path / "gpu.json")
    gemms = [e for e in events if e["tid"] == 0 and e["cat"] == "compute"]
    assert gemms, events
    assert any(e["dur"] > 0 for e in gemms), gemms
