#!/usr/bin/env python3
"""Host time of Alloy's Python call path, against PyTorch in the same run (issue 15).

1. Host time of one cached call on a tiny fusion (y = x * 2 + 1 on a CUDA tensor of 1024 f32):
   alloy's fd.execute, the same as a torch eager expression, and as a torch.compile'd function.
   Each sample is the wall time of one call (perf_counter_ns); the device is synchronized every
   100 calls, outside the timed calls, so the launch queue never fills. Median and min of many.
2. A large fusion (examples/mlp.fusion, the nanoGPT MLP in bf16) as whole runs that wait for the
   device: fd.execute + torch.cuda.synchronize() from Python, against `alloy run --bench` (the
   command line's median of whole runs) when the alloy program is found, and torch eager.

Needs torch with CUDA and the alloy module (pip install . or PYTHONPATH=build/python); without
a GPU it says so and exits 0.

    python3 bench/python_host_time.py [--samples 20000] [--alloy build/alloy] [--B 8 --S 1024]
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def host_times(fn, samples, sync, warmup=200):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for i in range(samples):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1000.0)
        if i % 100 == 99:
            sync()
    sync()
    return statistics.median(times), min(times)


def whole_runs(fn, runs, sync, warmup=10):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        sync()
        times.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(times), min(times)


def cli_bench(alloy_bin, B, S, runs):
    cmd = [str(alloy_bin), "run", str(ROOT / "examples" / "mlp.fusion"), "--bind", f"B={B}", "--bind", f"S={S}",
           "--device", "cuda", "--bench", str(runs)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"bench median_us=([0-9.]+) min_us=([0-9.]+)", out.stdout)
    if out.returncode != 0 or not m:
        return None, " ".join(cmd) + ": " + (out.stderr.strip() or out.stdout.strip())[-300:]
    return (float(m.group(1)), float(m.group(2))), " ".join(cmd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=50, help="whole runs of the large fusion")
    parser.add_argument("--alloy", default=os.environ.get("ALLOY_CLI", str(ROOT / "build" / "alloy")))
    parser.add_argument("--B", type=int, default=8)
    parser.add_argument("--S", type=int, default=1024)
    args = parser.parse_args()
    if args.samples < 1 or args.runs < 1:
        parser.error("--samples and --runs must be at least 1")

    try:
        import torch
    except ImportError:
        print("python_host_time: skipped: torch is not installed")
        return 0
    import alloy

    if not (torch.cuda.is_available() and alloy.cuda_available()):
        print("python_host_time: skipped: no CUDA GPU usable by torch and Alloy"
              f" ({alloy._alloy.cuda_unavailable_reason() or 'torch.cuda.is_available() is False'})")
        return 0
    device = torch.cuda.get_device_name()
    sync = torch.cuda.synchronize

    # ---- 1. host time of a cached call on a tiny fusion ----
    with alloy.FusionDefinition("tiny") as fd:
        x = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        fd.add_output(fd.ops.add(fd.ops.mul(x, 2.0), 1.0))
    t = torch.randn(1024, device="cuda")
    inputs = [t]

    def eager(a):
        return a * 2.0 + 1.0

    compiled = torch.compile(eager)
    rows = [
        ("alloy fd.execute([x])", host_times(lambda: fd.execute(inputs), args.samples, sync)),
        ("torch eager x * 2 + 1", host_times(lambda: eager(t), args.samples, sync)),
        ("torch.compile'd x * 2 + 1", host_times(lambda: compiled(t), args.samples, sync)),
    ]
    print(f"# Host time of one cached call, CUDA f32[1024] in and out ({device}, {args.samples} samples)")
    print(f"{'case':<32} {'median_us':>10} {'min_us':>8}")
    for name, (median, best) in rows:
        print(f"{name:<32} {median:>10.2f} {best:>8.2f}")
    print(f"alloy plans built: {fd.compile_count} (one for all {args.samples} calls)")

    # ---- 2. a large fusion, whole runs ----
    mlp = alloy.load(ROOT / "examples" / "mlp.fusion")
    shapes = [[{"B": args.B, "S": args.S}.get(d, d) if isinstance(d, str) else d for d in v.shape] for v in mlp.inputs]
    big = [torch.randn(s, device="cuda", dtype=torch.bfloat16) * 0.1 for s in shapes]

    def torch_mlp():
        x, w_fc, b_fc, w_proj, b_proj = big
        h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w_fc, b_fc), approximate="tanh")
        return torch.nn.functional.linear(h, w_proj, b_proj)

    print(f"\n# Whole runs (each waits for the device) of examples/mlp.fusion at B={args.B}, S={args.S}, bf16 ({args.runs} runs)")
    print(f"{'case':<32} {'median_us':>10} {'min_us':>8}")
    py = whole_runs(lambda: mlp.execute(big), args.runs, sync)
    print(f"{'alloy from Python':<32} {py[0]:>10.1f} {py[1]:>8.1f}")
    alloy_bin = pathlib.Path(args.alloy)
    if alloy_bin.exists():
        cli, cmd = cli_bench(alloy_bin, args.B, args.S, args.runs)
        if cli:
            print(f"{'alloy run --bench':<32} {cli[0]:>10.1f} {cli[1]:>8.1f}   Python/CLI = {py[0] / cli[0]:.3f}")
        else:
            print(f"alloy run --bench failed: {cmd}")
    else:
        print(f"(no alloy program at {alloy_bin}: --alloy PATH to compare with the command line)")
    eager_mlp = whole_runs(torch_mlp, args.runs, sync)
    print(f"{'torch eager':<32} {eager_mlp[0]:>10.1f} {eager_mlp[1]:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
