"""A script as a user writes one (issue 26): fusions defined at module level, run on torch tensors
(CUDA where there is a GPU, else the CPU), on a side stream, with an in-place update; then the
interpreter exits. tests/test_exit.py runs it in a child process and asserts that nothing is
printed on stderr at exit (nanobind's "leaked instances" report among others).
ALLOY_EXIT_PARTS picks parts (side_stream, stream_arg, inplace, dlpack, error, trace; default all)
to narrow a report."""
import os

import torch

import alloy

parts = set(os.environ.get("ALLOY_EXIT_PARTS", "side_stream,stream_arg,inplace,dlpack,error,trace").split(","))
device = "cuda" if torch.cuda.is_available() and alloy.cuda_available() else "cpu"

with alloy.FusionDefinition("scale") as scale:
    x = scale.define_tensor(shape=[-1, -1], dtype=alloy.float32)
    scale.add_output(scale.ops.relu(x * 2.0))

with alloy.FusionDefinition("sgd") as sgd:
    p = sgd.define_tensor(shape=[-1], dtype=alloy.float32)
    g = sgd.define_tensor(shape=[-1], dtype=alloy.float32)
    sgd.add_output(p - g * 0.5, alias_input=p)

x_t = torch.randn(64, 32, device=device)
(y_t,) = scale.execute([x_t])
assert torch.allclose(y_t, torch.relu(x_t * 2))

if "side_stream" in parts and device == "cuda":
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (z_t,) = scale.execute([x_t])
        total = z_t.sum()
    side.synchronize()
    assert torch.allclose(total, torch.relu(x_t * 2).sum())

if "stream_arg" in parts and device == "cuda":
    other = torch.cuda.Stream()
    (w_t,) = scale.execute([x_t], stream=other)
    other.synchronize()
    assert torch.allclose(w_t, torch.relu(x_t * 2))

if "error" in parts:  # an error raised and caught keeps its traceback's frames until it goes
    try:
        scale.execute([torch.randn(3, device=device)])
    except alloy.Error as e:
        kept_error = e

if "trace" in parts:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        scale.execute([x_t], trace=os.path.join(d, "t.json"))
        assert os.path.getsize(os.path.join(d, "t.json")) > 0

if "inplace" in parts:
    p_t = torch.ones(1000, device=device)
    g_t = torch.full((1000,), 2.0, device=device)
    sgd.execute([p_t, g_t])
    assert torch.all(p_t == 0.0)

if "dlpack" in parts:
    kept = [scale.execute([torch.randn(8, 8, device=device)])[0] for _ in range(5)]
    assert all(k.shape == (8, 8) for k in kept)
print("exit_clean: ran on", device)
