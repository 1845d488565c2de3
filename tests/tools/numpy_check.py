#!/usr/bin/env python3
"""Cross-checks `alloy run` against NumPy on the examples.

For each example: draws inputs with NumPy and saves them as .npy, runs
`alloy run FILE --input NAME=PATH ... --save-outputs DIR`, loads the outputs and compares
them with a NumPy implementation written here independently of Alloy. bf16 values are given
to Alloy as f32 holding bf16-representable numbers, and the NumPy side rounds each op's
result to the op's dtype as the fusion declares it, so only accumulation order differs.

Usage: numpy_check.py --alloy build/alloy [--examples examples] [--device auto|cpu|cuda]
Exit status: 0 all passed, 1 a check failed, 77 NumPy is missing (CTest: skipped).
Where ALLOY_REQUIRE_GPU=1 (scripts/gpu-check), --device auto means cuda, and a missing NumPy or
mpirun is a failure instead of a skip.
"""
import argparse
import os
import subprocess
import sys
import tempfile

GPU_REQUIRED = os.environ.get("ALLOY_REQUIRE_GPU") == "1"
try:
    import numpy as np
except ImportError:
    print("numpy_check: NumPy is not installed; " + ("failing: ALLOY_REQUIRE_GPU=1" if GPU_REQUIRED else "skipping"))
    sys.exit(1 if GPU_REQUIRED else 77)


def bf16(x):
    """Rounds float values to the nearest bf16 (ties to even), returned as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def is_bf16(x):
    return np.all((np.asarray(x, dtype=np.float32).view(np.uint32) & 0xFFFF) == 0)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def linear(x, w, b):
    return x.astype(np.float64) @ w.astype(np.float64).T + b


# Each case: the file, extra alloy arguments, its inputs, and the expected outputs with
# (rtol, atol as a fraction of the expected values' RMS, whether the output is bf16).
def mlp_case(rng):
    x = bf16(rng.standard_normal((2, 8, 768)))
    w_fc, b_fc = bf16(rng.standard_normal((3072, 768)) * 0.03), bf16(rng.standard_normal(3072) * 0.1)
    w_proj, b_proj = bf16(rng.standard_normal((768, 3072)) * 0.02), bf16(rng.standard_normal(768) * 0.1)
    h = bf16(linear(x, w_fc, b_fc))
    g = bf16(gelu_tanh(h.astype(np.float64)))
    y = bf16(linear(g, w_proj, b_proj))
    inputs = dict(x=x, w_fc=w_fc, b_fc=b_fc, w_proj=w_proj, b_proj=b_proj)
    return "mlp.fusion", inputs, {"y": (y, 2e-2, 1e-2, True)}


def layer_norm_case(rng):
    x = bf16(rng.standard_normal((16, 128, 1600)) * 2 + 0.5)
    weight, bias = bf16(rng.standard_normal(1600)), bf16(rng.standard_normal(1600))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=2, keepdims=True)
    rstd = 1.0 / np.sqrt(x64.var(axis=2, keepdims=True) + 1e-5)
    y = bf16((x64 - mean) * rstd * weight + bias)
    expected = {"y": (y, 2e-2, 1e-2, True), "mean_b": (mean.astype(np.float32), 1e-5, 1e-6, False),
                "rstd": (rstd.astype(np.float32), 1e-5, 1e-6, False)}
    return "layer_norm.fusion", dict(x=x, weight=weight, bias=bias), expected


def softmax_case(rng):
    scores = bf16(rng.standard_normal((8, 12, 128, 128)) * 8)
    scaled = scores.astype(np.float64) * 0.125  # exact in bf16: a power of two
    e = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    probs = bf16(e / e.sum(axis=-1, keepdims=True))
    return "softmax.fusion", dict(scores=scores), {"probs": (probs, 2e-2, 1e-2, True)}


def rms_norm_case(rng):
    x, residual = bf16(rng.standard_normal((4, 128, 2048))), bf16(rng.standard_normal((4, 128, 2048)))
    weight = bf16(rng.standard_normal(2048))
    h = bf16(x.astype(np.float64) + residual)
    h64 = h.astype(np.float64)
    y = bf16(h64 / np.sqrt((h64**2).mean(axis=-1, keepdims=True) + 1e-6) * weight)
    return "rms_norm.fusion", dict(x=x, residual=residual, weight=weight), {
        "y": (y, 2e-2, 1e-2, True), "h": (h, 0, 0, True)}


def masked_mean_case(rng):
    h = rng.standard_normal((3, 7, 40)).astype(np.float32)
    mask = rng.random((3, 7)) < 0.5
    mask[2, :] = False  # an empty mask divides by max(count, 1)
    keep = mask.astype(np.float64)
    pooled = (h * keep[:, :, None]).sum(axis=1) / np.maximum(keep.sum(axis=1, keepdims=True), 1.0)
    return "masked_mean.fusion", dict(h=h, mask=mask), {"pooled": (pooled.astype(np.float32), 1e-5, 1e-6, False)}


def adam_step_case(rng):
    n = 4099  # not a whole number of vectors
    p, g, m = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype(np.float32)
    lr, wd, t = 1e-3, 0.01, 3
    bc1, bc2 = 1 - 0.9**t, 1 - 0.999**t
    p64, g64 = p.astype(np.float64), g.astype(np.float64)
    m2 = 0.9 * m + 0.1 * g64
    v2 = 0.999 * v + 0.001 * g64 * g64
    p2 = p64 * (1 - lr * wd) - lr * (m2 / bc1) / (np.sqrt(v2 / bc2) + 1e-8)
    scalars = {name: np.array(value, np.float32) for name, value in dict(lr=lr, wd=wd, bc1=bc1, bc2=bc2).items()}
    return "adam_step.fusion", dict(p=p, g=g, m=m, v=v, **scalars), {
        "p2": (p2.astype(np.float32), 1e-5, 1e-6, False), "m2": (m2.astype(np.float32), 1e-5, 1e-6, False),
        "v2": (v2.astype(np.float32), 1e-5, 1e-6, False)}


def sgd_momentum_case(rng):
    n = 1027
    p, g, buf = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    lr, wd = 0.05, 1e-4
    buf2 = 0.9 * buf.astype(np.float64) + g + wd * p.astype(np.float64)
    p2 = p - lr * buf2
    return "sgd_momentum.fusion", dict(p=p, g=g, buf=buf, lr=np.array(lr, np.float32), wd=np.array(wd, np.float32)), {
        "p2": (p2.astype(np.float32), 1e-5, 1e-6, False), "buf2": (buf2.astype(np.float32), 1e-5, 1e-6, False)}


# The sharded examples run under `mpirun -n 2` (one process per mesh device): every rank reads
# the same global inputs, and rank 0 saves the global outputs.
MPI_RANKS = {"tp_mlp.fusion": 2, "tp_mlp_sequence_parallel.fusion": 2, "tp_mlp_backward.fusion": 2,
             "sharded_layer_norm.fusion": 2}


def tp_mlp_inputs(rng, t):
    return dict(x=rng.standard_normal((t, 256)).astype(np.float32),
                w_fc=(rng.standard_normal((1024, 256)) * 0.06).astype(np.float32),
                b_fc=(rng.standard_normal(1024) * 0.1).astype(np.float32),
                w_proj=(rng.standard_normal((256, 1024)) * 0.03).astype(np.float32),
                b_proj=(rng.standard_normal(256) * 0.1).astype(np.float32))


def tp_mlp_forward(i):
    h = linear(i["x"], i["w_fc"], i["b_fc"])
    return linear(gelu_tanh(h), i["w_proj"], i["b_proj"])


def tp_mlp_case(rng):
    i = tp_mlp_inputs(rng, 12)
    return "tp_mlp.fusion", i, {"y": (tp_mlp_forward(i), 1e-4, 1e-5, False)}


def tp_mlp_sequence_parallel_case(rng):
    i = tp_mlp_inputs(rng, 16)
    return "tp_mlp_sequence_parallel.fusion", i, {"y": (tp_mlp_forward(i), 1e-4, 1e-5, False)}


def gelu_tanh_backward(dy, h):
    th = np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h**3))
    return dy * (0.5 * (1 + th) + 0.5 * h * (1 - th**2) * np.sqrt(2.0 / np.pi) * (1 + 3 * 0.044715 * h**2))


def mlp_backward_expected(i, round_to):
    """The MLP backward in float64, each op's result rounded by `round_to` (bf16 or nothing)."""
    d = {k: v.astype(np.float64) for k, v in i.items()}
    dh = round_to(gelu_tanh_backward(round_to(d["dy"] @ d["w_proj"]), d["h"]))
    return {"dx": round_to(dh @ d["w_fc"]), "dw_fc": round_to(dh.T @ d["x"]), "db_fc": round_to(dh.sum(0)),
            "dw_proj": round_to(d["dy"].T @ d["g"]), "db_proj": round_to(d["dy"].sum(0))}


def mlp_backward_case(rng):
    t = 16
    f = lambda *shape, s=1.0: bf16(rng.standard_normal(shape) * s)
    i = dict(dy=f(t, 768, s=0.1), x=f(t, 768), h=f(t, 3072), g=f(t, 3072), w_fc=f(3072, 768, s=0.03), w_proj=f(768, 3072, s=0.02))
    # dh is rounded to bf16 inside the fusion and feeds three results: 3e-2 covers a flipped rounding
    return "mlp_backward.fusion", i, {k: (v, 3e-2, 2e-2, True) for k, v in mlp_backward_expected(i, bf16).items()}


def relu_mask(h):
    """relu_mask: bit j of i32 word k of a row is h[..., 32k + j] > 0 (the row padded with zero bits)."""
    bits = np.asarray(h) > 0
    pad = (-bits.shape[-1]) % 32
    bits = np.concatenate([bits, np.zeros(bits.shape[:-1] + (pad,), dtype=bool)], axis=-1)
    return np.packbits(bits, axis=-1, bitorder="little").view("<u4").view(np.int32)


def mlp_relu_case(rng):
    t = 16
    f = lambda *shape, s=1.0: bf16(rng.standard_normal(shape) * s)
    # |x @ w1^T| stays well under |b1| >= 0.5, so no h is near 0, where the GEMM's f32 sum and
    # NumPy's f64 one could disagree on the sign: the mask is compared exactly
    x, w1, w2, b2 = f(t, 768), f(3072, 768, s=0.003), f(768, 3072, s=0.02), f(768, s=0.1)
    b1 = bf16(np.where(rng.random(3072) < 0.5, -1, 1) * (0.5 + np.abs(rng.standard_normal(3072)) * 0.5))
    h = bf16(linear(x, w1, b1))
    a = np.maximum(h, 0)
    y = bf16(linear(a, w2, b2))
    expected = {"y": (y, 2e-2, 1e-2, True), "a": (a, 2e-2, 1e-2, True), "mask": (relu_mask(h), 0, 0, False)}
    return "mlp_relu.fusion", dict(x=x, w1=w1, b1=b1, w2=w2, b2=b2), expected


def mlp_relu_backward_case(rng):
    t = 16
    f = lambda *shape, s=1.0: bf16(rng.standard_normal(shape) * s)
    dy, x, h = f(t, 768, s=0.1), f(t, 768), f(t, 3072)
    w1, w2 = f(3072, 768, s=0.03), f(768, 3072, s=0.02)
    a, mask = np.maximum(h, 0), relu_mask(h)
    d = {k: v.astype(np.float64) for k, v in dict(dy=dy, x=x, a=a, w1=w1, w2=w2).items()}
    dh = bf16(np.where(h > 0, bf16(d["dy"] @ d["w2"]), 0)).astype(np.float64)
    expected = {"dx": bf16(dh @ d["w1"]), "dw1": bf16(dh.T @ d["x"]), "db1": bf16(dh.sum(0)),
                "dw2": bf16(d["dy"].T @ d["a"]), "db2": bf16(d["dy"].sum(0))}
    inputs = dict(dy=dy, x=x, a=a, mask=mask, w1=w1, w2=w2)
    return "mlp_relu_backward.fusion", inputs, {k: (v, 3e-2, 2e-2, True) for k, v in expected.items()}


def tp_mlp_backward_case(rng):
    t = 10
    f = lambda *shape, s=1.0: (rng.standard_normal(shape) * s).astype(np.float32)
    i = dict(dy=f(t, 256), x=f(t, 256), h=f(t, 1024), g=f(t, 1024), w_fc=f(1024, 256, s=0.06), w_proj=f(256, 1024, s=0.03))
    expected = mlp_backward_expected(i, lambda v: v)
    return "tp_mlp_backward.fusion", i, {k: (v, 1e-4, 1e-5, False) for k, v in expected.items()}


def sharded_layer_norm_case(rng):
    x = (rng.standard_normal((6, 1024)) * 2 + 0.5).astype(np.float32)
    weight, bias = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    x64 = x.astype(np.float64)
    mean = x64.mean(1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(1, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + 1e-5) * weight + bias
    expected = {"y": (y, 1e-4, 1e-5, False), "total": (x64.sum(1), 1e-4, 1e-5, False), "peak": (x64.max(1), 0, 0, False)}
    return "sharded_layer_norm.fusion", dict(x=x, weight=weight, bias=bias), expected


def mpirun(ranks):
    """The launcher prefix for a job of `ranks` processes, or None where mpirun is missing."""
    import shutil
    if shutil.which("mpirun") is None:
        return None
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return ["mpirun", "-n", str(ranks), "--oversubscribe"]


def rope_case(rng):
    x = bf16(rng.standard_normal((2, 64, 40, 128)))
    angles = np.arange(64)[:, None] * (10000.0 ** (-np.arange(0, 128, 2) / 128.0))[None, :]
    cos = bf16(np.cos(np.concatenate([angles, angles], axis=-1)))
    sin = bf16(np.sin(np.concatenate([angles, angles], axis=-1)))
    rotated = np.concatenate([-x[..., 64:], x[..., :64]], axis=-1)  # exact: a sign and a copy
    x_cos = bf16(x.astype(np.float64) * cos[:, None, :])
    rotated_sin = bf16(rotated.astype(np.float64) * sin[:, None, :])
    y = bf16(x_cos.astype(np.float64) + rotated_sin)
    return "rope.fusion", dict(x=x, cos=cos, sin=sin), {"y": (y, 1e-2, 1e-3, True)}


def cross_entropy_case(rng):
    t, v = 64, 1000
    logits = bf16(rng.standard_normal((t, v)) * 3)
    target = rng.integers(0, v, size=t).astype(np.int64)
    f32 = np.float32
    x = logits.astype(f32)
    m = x.max(axis=1, keepdims=True)
    e = np.exp((x - m).astype(np.float64)).astype(f32)
    s = e.astype(np.float64).sum(axis=1, keepdims=True).astype(f32)
    lse = (np.log(s.astype(np.float64)).astype(f32) + m).astype(f32)
    picked = np.take_along_axis(x, target[:, None], axis=1)  # gather(x, t, dim=1)
    loss = (lse - picked).astype(f32)[:, 0]
    onehot = (np.arange(v, dtype=np.int64)[None, :] == target[:, None]).astype(f32)  # eq(iota(length=V), t)
    dx = bf16((e.astype(np.float64) / s).astype(f32) - onehot)
    return "cross_entropy.fusion", dict(logits=logits, target=target), {
        "loss": (loss, 1e-5, 1e-6, False), "dx": (dx, 2e-2, 1e-2, True)}


def compare(name, got, want, rtol, atol_fraction, bf16_output):
    problems = []
    if got.shape != want.shape:
        return [f"{name}: shape {got.shape}, expected {want.shape}"]
    if bf16_output and got.dtype != np.float32:
        problems.append(f"{name}: a bf16 output should be saved as float32, found {got.dtype}")
    if bf16_output and not is_bf16(got):
        problems.append(f"{name}: a bf16 output holds values that are not bf16")
    want64 = want.astype(np.float64)
    atol = atol_fraction * float(np.sqrt(np.mean(want64**2))) if want.size else 0.0
    err = np.abs(got.astype(np.float64) - want64)
    bad = err > atol + rtol * np.abs(want64)
    if np.any(bad):
        i = np.unravel_index(np.argmax(err - rtol * np.abs(want64)), want.shape)
        problems.append(f"{name}: {int(bad.sum())} of {want.size} values differ; worst at {tuple(int(k) for k in i)}: "
                        f"got {got[i]!r}, expected {want[i]!r}")
    return problems


def run_case(alloy, examples, device, case, rng, workdir):
    file, inputs, expected = case(rng)
    tag = os.path.splitext(file)[0]
    args = [alloy, "run", os.path.join(examples, file), "--device", device, "--save-outputs", os.path.join(workdir, tag)]
    if file in MPI_RANKS:
        launcher = mpirun(MPI_RANKS[file])
        if launcher is None:
            return None  # skipped: no mpirun
        args = launcher + args
    for name, value in inputs.items():
        path = os.path.join(workdir, f"{tag}_{name}.npy")
        np.save(path, value)
        args += ["--input", f"{name}={path}"]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        return [f"alloy exited with {result.returncode}: {result.stderr.strip()}"]
    problems = []
    for name, (want, rtol, atol, is_bf16_output) in expected.items():
        got = np.load(os.path.join(workdir, tag, f"{name}.npy"))
        problems += compare(name, got, want, rtol, atol, is_bf16_output)
    return problems


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alloy", required=True, help="the alloy program")
    parser.add_argument("--examples", default=os.path.join(here, "..", "..", "examples"))
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="passed to alloy run (auto: a GPU where one exists)")
    args = parser.parse_args()
    if GPU_REQUIRED and args.device == "auto":
        args.device = "cuda"  # a GPU that is not usable must fail here, not run the CPU quietly
    cases = [mlp_case, layer_norm_case, softmax_case, rms_norm_case, masked_mean_case, mlp_backward_case, tp_mlp_case,
             tp_mlp_sequence_parallel_case, tp_mlp_backward_case, sharded_layer_norm_case, rope_case, mlp_relu_case,
             mlp_relu_backward_case, cross_entropy_case, adam_step_case, sgd_momentum_case]
    known = {case(np.random.default_rng(0))[0] for case in cases}
    unchecked = sorted(f for f in os.listdir(args.examples) if f.endswith(".fusion") and f not in known)
    if unchecked:
        print(f"FAIL examples without a NumPy check: {', '.join(unchecked)}")
        return 1
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="alloy_numpy_check_") as workdir:
        for case in cases:
            problems = run_case(args.alloy, args.examples, args.device, case, np.random.default_rng(0), workdir)
            label = case.__name__.removesuffix("_case")
            if problems is None and GPU_REQUIRED:
                failed += 1
                print(f"FAIL {label}: mpirun not found, and ALLOY_REQUIRE_GPU=1")
            elif problems is None:
                print(f"skip {label} (mpirun not found)")
            elif problems:
                failed += 1
                print(f"FAIL {label}")
                for p in problems:
                    print(f"  {p}")
            else:
                passed += 1
                print(f"ok   {label}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
