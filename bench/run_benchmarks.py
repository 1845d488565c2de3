#!/usr/bin/env python3
"""Runs Alloy's GPU benchmarks and PyTorch's (eager and torch.compile) on the same cases, in one
job on one GPU, and prints two tables:
- memory-bound cases: median times, ratios, and bandwidth as a share of a device-to-device copy
  measured in the same run (bench/results/<date>-<gpu>-memory-bound.{md,json});
- matmul cases (issue 4): linear + bias + GELU(tanh) against PyTorch eager, its fused
  torch._addmm_activation, torch.compile and the bare GEMM x @ w.t(); the MLP backward against
  eager autograd; times, TFLOP/s and ratios (bench/results/<date>-<gpu>-matmul.{md,json}).

- the MLP backward against eager autograd in alternating rounds, both timings each
  (bench/results/<date>-<gpu>-mlp-backward-rounds.{md,json}).

usage: bench/run_benchmarks.py BUILD_DIR [RUNS] [SECTIONS]   (SECTIONS: memory,matmul,rounds; default all)
BENCH_CASES=a,b (environment): only the memory-bound cases whose name contains one of these strings;
BENCH_TAG=name: their table is written as <date>-<gpu>-<name>.{md,json} instead of -memory-bound.
"""
import datetime
import json
import os
import subprocess
import sys
import time


def runs_argument():
    """RUNS from the command line (default 100); 0, negative or not a number is a usage error,
    checked before anything is imported or timed."""
    try:
        runs = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    except ValueError:
        runs = 0
    if runs < 1:
        print(f"usage: bench/run_benchmarks.py BUILD_DIR [RUNS] [SECTIONS]: RUNS must be a whole number >= 1, "
              f"got {sys.argv[2]!r}", file=sys.stderr)
        sys.exit(2)
    return runs


RUNS = runs_argument() if __name__ == "__main__" else 100

import torch  # noqa: E402  (after the usage check: a bad RUNS fails without loading torch)
import torch.nn.functional as F  # noqa: E402


BATCH = 10  # calls per timed sample, enqueued back to back (as alloy_bench's kBatch)


def time_torch(fn, args, runs):
    """Median us per call over `runs` samples of BATCH back-to-back calls (CUDA events)."""
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(BATCH):
            fn(*args)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0 / BATCH)
    times.sort()
    return times[len(times) // 2]


HOLD_MS = 2.0  # as alloy_bench's kHoldMs


def time_torch_isolated(fn, args, runs):
    """Median us of `runs` single calls, each enqueued while a sleep kernel holds the stream for
    about HOLD_MS: the launch path is hidden and the GPU starts each call at its full clock, off its
    power limit (alloy_bench's isolated_us, which holds the stream with a sleeping host function)."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, slowest_launch_ms = [], 0.0
    cycles = hold_cycles()
    for _ in range(runs):
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        start.record()
        fn(*args)
        stop.record()
        slowest_launch_ms = max(slowest_launch_ms, (time.perf_counter() - t0) * 1e3)
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)
    if slowest_launch_ms > 0.8 * HOLD_MS:
        print(f"warning: enqueueing a call took {slowest_launch_ms:.2f} ms, near the {HOLD_MS:g} ms hold: "
              "the isolated timing may include host time", file=sys.stderr)
    times.sort()
    return times[len(times) // 2]


_hold_cycles = None


def hold_cycles():
    """Cycles of torch.cuda._sleep for at least HOLD_MS at the fastest clock seen: timed a few times
    (the clock may still be rising), and never under HOLD_MS at 2 GHz (a short hold would let
    the host launch path show in the timings again)."""
    global _hold_cycles
    if _hold_cycles is None:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fastest_ms = float("inf")
        for _ in range(5):
            a.record()
            torch.cuda._sleep(1_000_000)
            b.record()
            b.synchronize()
            fastest_ms = min(fastest_ms, a.elapsed_time(b))
        _hold_cycles = max(int(1_000_000 * HOLD_MS / max(fastest_ms, 1e-3)), int(HOLD_MS * 2e6))
    return _hold_cycles


def torch_cases():
    dev, bf = "cuda", torch.bfloat16
    big = 8192

    def ln_trace(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def rms(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def chain(a, b, c):
        return F.gelu(a * b + c)

    def gelu_backward_bgrad(g, x):
        d = torch.ops.aten.gelu_backward(g, x, approximate="tanh")
        return d, d.sum(0)

    def qkv_rope(qkv, cos, sin):
        q, k, v = qkv.split(5120, dim=-1)
        q = q.view(2, 4096, 40, 128).permute(0, 2, 1, 3)
        k = k.view(2, 4096, 40, 128).permute(0, 2, 1, 3)

        def rotate_half(x):
            return torch.cat((-x[..., 64:], x[..., :64]), dim=-1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    def adam_step(p, g, m, v):
        # examples/adam_step.fusion in place (step 1: bc1 = 0.1, bc2 = 0.001; lr 1e-3, wd 0.01)
        m.mul_(0.9).add_(g, alpha=0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        p.mul_(1 - 1e-3 * 0.01).addcdiv_(m / 0.1, (v / 0.001).sqrt_().add_(1e-8), value=-1e-3)
        return p, m, v

    def norm_bwd(rms):
        def math(dy, x, *rest):
            # the fusion's formula (bench/alloy_bench.cpp norm_backward_fusion) for eager and torch.compile
            (rstd, w) = rest if rms else rest[1:]
            dy32, x32, r = dy.float(), x.float(), rstd[:, None]
            xhat = x32 * r if rms else (x32 - rest[0][:, None]) * r
            g = dy32 * w.float()
            t = g - xhat * (g * xhat).mean(1, keepdim=True)
            if not rms:
                t = t - g.mean(1, keepdim=True)
            dx, dw = (t * r).to(bf), (dy32 * xhat).sum(0).to(bf)
            return (dx, dw) if rms else (dx, dw, dy32.sum(0).to(bf))

        def op(dy, x, *rest):
            # PyTorch's own backward kernels (what autograd runs eagerly)
            d = x.shape[-1]
            if rms:
                rstd, w = rest
                return torch.ops.aten._fused_rms_norm_backward(dy, x, [d], rstd[:, None], w, [True, True])
            mean, rstd, w = rest
            return torch.ops.aten.native_layer_norm_backward(dy, x, [d], mean[:, None], rstd[:, None], w, w, [True, True, True])

        def make(n, d):
            def inputs():
                dy, x = torch.randn(n, d, device=dev, dtype=bf), torch.randn(n, d, device=dev, dtype=bf)
                stats = ([] if rms else [torch.randn(n, device=dev)]) + [torch.rand(n, device=dev) + 0.5]
                return (dy, x, *stats, torch.randn(d, device=dev, dtype=bf))
            return inputs
        return math, op, make

    def ce_fwd(logits, target):
        return F.cross_entropy(logits.float(), target, reduction="none")

    def ce_bwd(logits, target, lse, g):
        onehot = F.one_hot(target, logits.shape[1]).float()
        return ((torch.exp(logits.float() - lse[:, None]) - onehot) * g[:, None]).to(bf)

    def ce_inputs(t, v, backward):
        def inputs():
            logits, target = torch.randn(t, v, device=dev, dtype=bf), torch.randint(0, v, (t,), device=dev)
            if not backward:
                return logits, target
            return logits, target, torch.logsumexp(logits.float(), 1), torch.randn(t, device=dev)
        return inputs

    def fused_adamw(p, g, m, v):
        # torch._fused_adamw_ on the same tensors (the step's own counter; the bias corrections differ
        # from the fusion's constants, the work does not)
        torch._fused_adamw_([p], [g], [m], [v], [], [fused_adamw.step], lr=1e-3, beta1=0.9, beta2=0.999,
                            weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
        return p, m, v
    fused_adamw.step = torch.ones((), device=dev)

    n = 1 << 28
    t, h = 8192, 6400
    training = {}
    for rms in (False, True):
        math, op, make = norm_bwd(rms)
        shapes = [(8192, 4096), (32768, 768)]
        # ALLOY_BENCH_NORM_SHAPES=layer:4096x16384,rms:8192x12288 (alloy_bench reads it too)
        for entry in filter(None, os.environ.get("ALLOY_BENCH_NORM_SHAPES", "").split(",")):
            kind, size = entry.split(":")
            if (kind == "rms") == rms:
                shapes.append(tuple(int(v) for v in size.split("x")))
        for rows, d in shapes:
            training[f"{'rms' if rms else 'layer'}_norm_backward_{rows}x{d}"] = (math, make(rows, d), op)
    # ALLOY_BENCH_SOFTMAX_SHAPES=bf16:2048x50257,f32:2048x32000 (alloy_bench reads it too)
    for entry in filter(None, os.environ.get("ALLOY_BENCH_SOFTMAX_SHAPES", "").split(",")):
        dtype, size = entry.split(":")
        rows, width = (int(v) for v in size.split("x"))
        tdtype = {"bf16": bf, "f16": torch.float16, "f32": torch.float32}[dtype]
        training[f"softmax_{dtype}_{rows}x{width}"] = (
            lambda x: torch.softmax(x, 1), lambda rows=rows, width=width, tdtype=tdtype: (torch.randn(rows, width, device=dev, dtype=tdtype),))
    for v in (32000, 50257, 128256):
        training[f"cross_entropy_fwd_8192x{v}"] = (ce_fwd, ce_inputs(8192, v, False),
                                                   lambda x, t: F.cross_entropy(x, t, reduction="none"))
        training[f"cross_entropy_bwd_8192x{v}"] = (ce_bwd, ce_inputs(8192, v, True))
    training["swiglu_slices_8192x11008"] = (lambda gu: F.silu(gu[:, :11008]) * gu[:, 11008:],
                                            lambda: (torch.randn(8192, 22016, device=dev, dtype=bf),))

    def gpt2_shapes():
        # GPT-2 small's parameters as nanoGPT lists them (alloy_bench's adam_step_gpt2: 148 tensors)
        c = 768
        layer = [(c,), (c,), (3 * c, c), (3 * c,), (c, c), (c,), (c,), (c,), (4 * c, c), (4 * c,), (c, 4 * c), (c,)]
        return [(50257, c), (1024, c)] + layer * 12 + [(c,), (c,)]

    def fused_adamw_list(ps, gs, ms, vs, steps):
        # the same step as adam_step_2e28 over every parameter at once: AdamW (decoupled weight decay),
        # lr 1e-3, wd 0.01, step 1 (bc1 = 0.1, bc2 = 0.001), PyTorch's multi-tensor kernel
        torch._fused_adamw_(ps, gs, ms, vs, [], steps, lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                            amsgrad=False, maximize=False)
        return ps

    def gpt2_adam_state():
        shapes = gpt2_shapes()
        return ([torch.randn(s, device=dev) for s in shapes], [torch.randn(s, device=dev) for s in shapes],
                [torch.randn(s, device=dev) for s in shapes], [torch.randn(s, device=dev).abs_() for s in shapes],
                [torch.ones((), device=dev) for _ in shapes])

    def adam_loop(ps, gs, ms, vs, steps):
        # eager and torch.compile: adam_step_2e28's update, tensor by tensor
        for p, g, m, v in zip(ps, gs, ms, vs):
            adam_step(p, g, m, v)
        return ps

    training["adam_step_gpt2_150"] = (adam_loop, gpt2_adam_state, fused_adamw_list)

    def fused_adamw_two_groups(ps, gs, ms, vs, steps):
        # PyTorch's usual setup: one fused call per parameter group, the matrices with weight decay,
        # the biases and norm weights without (alloy_bench's adam_step_gpt2_two_groups_150)
        for decay in (True, False):
            idx = [i for i, p in enumerate(ps) if (p.dim() >= 2) == decay]
            torch._fused_adamw_([ps[i] for i in idx], [gs[i] for i in idx], [ms[i] for i in idx], [vs[i] for i in idx], [],
                                [steps[i] for i in idx], lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.01 if decay else 0.0,
                                eps=1e-8, amsgrad=False, maximize=False)
        return ps

    training["adam_step_gpt2_two_groups_150"] = (adam_loop, gpt2_adam_state, fused_adamw_two_groups)
    return training | {
        "adam_step_2e28": (adam_step, lambda: (torch.randn(n, device=dev), torch.randn(n, device=dev), torch.randn(n, device=dev),
                                               torch.randn(n, device=dev).abs_()), fused_adamw),
        "qkv_rope_llama13b": (qkv_rope, lambda: (torch.randn(2, 4096, 15360, device=dev, dtype=bf),
                                                 torch.randn(4096, 128, device=dev, dtype=bf), torch.randn(4096, 128, device=dev, dtype=bf))),
        "layer_norm_nanogpt": (ln_trace, lambda: (torch.randn(16, 128, 1600, device=dev, dtype=bf),
                                                  torch.randn(1600, device=dev, dtype=bf), torch.randn(1600, device=dev, dtype=bf))),
        "layer_norm_8192": (ln_trace, lambda: (torch.randn(big, big, device=dev, dtype=bf),
                                               torch.randn(big, device=dev, dtype=bf), torch.randn(big, device=dev, dtype=bf))),
        "softmax_8192": (lambda x: torch.softmax(x, -1), lambda: (torch.randn(big, big, device=dev, dtype=bf),)),
        "rms_norm_8192": (rms, lambda: (torch.randn(big, big, device=dev, dtype=bf), torch.randn(big, device=dev, dtype=bf))),
        "gelu_chain_2e28": (chain, lambda: tuple(torch.randn(n, device=dev, dtype=bf) for _ in range(3))),
        "transpose_add_8192": (lambda x, z: x + z.t() * 2, lambda: (torch.randn(big, big, device=dev, dtype=bf),
                                                                   torch.randn(big, big, device=dev, dtype=bf))),
        "layer_norm_permuted_4096x8192": (lambda x, w, b: F.layer_norm(x.t(), (4096,), w, b, 1e-5),
                                          lambda: (torch.randn(4096, big, device=dev, dtype=bf), torch.randn(4096, device=dev, dtype=bf),
                                                   torch.randn(4096, device=dev, dtype=bf))),
        "logsumexp_8192x50257": (lambda x: torch.logsumexp(x, -1), lambda: (torch.randn(big, 50257, device=dev, dtype=bf),)),
        "gelu_chain_1e8p3": (chain, lambda: tuple(torch.randn(100000003, device=dev, dtype=bf) for _ in range(3))),
        "grad_norm_1e8": (lambda x: torch.linalg.vector_norm(x, dtype=torch.float32),
                          lambda: (torch.randn(100_000_000, device=dev, dtype=bf),)),
        "var_mean_rows_4x25m": (lambda x: torch.var_mean(x, dim=1, correction=0),
                                lambda: (torch.randn(4, 25_000_000, device=dev, dtype=bf),)),
        "column_sum_8192x6400": (lambda x: x.sum(0), lambda: (torch.randn(t, h, device=dev, dtype=bf),)),
        "gelu_backward_bgrad_8192x6400": (gelu_backward_bgrad, lambda: (torch.randn(t, h, device=dev, dtype=bf),
                                                                         torch.randn(t, h, device=dev, dtype=bf))),
    }


def linear_gelu_torch(m, k, n):
    """The PyTorch contenders for y = gelu(linear(x, w, b), tanh), bf16."""
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(m, k, device=dev, dtype=bf)
    w = torch.randn(n, k, device=dev, dtype=bf)
    b = torch.randn(n, device=dev, dtype=bf)

    def eager(x, w, b):
        return F.gelu(F.linear(x, w, b), approximate="tanh")

    def addmm_activation(x, w, b):
        return torch._addmm_activation(b, x, w.t(), use_gelu=True)

    def bare(x, w, b):
        return x @ w.t()

    return (x, w, b), {"eager": eager, "addmm_act": addmm_activation, "compile": torch.compile(eager), "bare_gemm": bare}


def mlp_backward_torch(t, c, h):
    """Eager autograd of the MLP (linear, GELU tanh, linear) at [T, C], hidden H: the backward only."""
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(t, c, device=dev, dtype=bf, requires_grad=True)
    w_fc = torch.randn(h, c, device=dev, dtype=bf, requires_grad=True)
    b_fc = torch.randn(h, device=dev, dtype=bf, requires_grad=True)
    w_proj = torch.randn(c, h, device=dev, dtype=bf, requires_grad=True)
    b_proj = torch.randn(c, device=dev, dtype=bf, requires_grad=True)
    y = F.linear(F.gelu(F.linear(x, w_fc, b_fc), approximate="tanh"), w_proj, b_proj)
    dy = torch.randn_like(y)
    params = [x, w_fc, b_fc, w_proj, b_proj]

    def backward(dy):
        return torch.autograd.grad(y, params, dy, retain_graph=True)

    return (dy,), {"eager": backward}


def mlp_backward_gemms_torch(t, c, h):
    """The MLP backward's GEMMs one at a time, as eager autograd runs them."""
    dev, bf = "cuda", torch.bfloat16
    dy, x = torch.randn(t, c, device=dev, dtype=bf), torch.randn(t, c, device=dev, dtype=bf)
    g, hh, dh = (torch.randn(t, h, device=dev, dtype=bf) for _ in range(3))
    w_fc, w_proj = torch.randn(h, c, device=dev, dtype=bf), torch.randn(c, h, device=dev, dtype=bf)
    return {
        "bwd_gemm_dw_proj": lambda: ((dy, g), {"eager": lambda a, b: a.t() @ b}),
        "bwd_gemm_dg": lambda: ((dy, w_proj), {"eager": lambda a, b: a @ b}),
        "bwd_gemm_dg_dgelu": lambda: ((dy, w_proj, hh),
                                      {"eager": lambda a, b, p: torch.ops.aten.gelu_backward(a @ b, p, approximate="tanh")}),
        "bwd_gemm_dw_fc": lambda: ((dh, x), {"eager": lambda a, b: a.t() @ b}),
        "bwd_gemm_dx": lambda: ((dh, w_fc), {"eager": lambda a, b: a @ b}),
    }


def matmul_cases():
    cases = {}
    for m, k, n in [(2048, 1600, 6400), (8192, 4096, 11008), (16384, 8192, 8192)]:
        cases[f"linear_gelu_{m}x{k}x{n}"] = lambda m=m, k=k, n=n: linear_gelu_torch(m, k, n)
    cases["mlp_backward_8192x1600x6400"] = lambda: mlp_backward_torch(8192, 1600, 6400)
    cases.update(mlp_backward_gemms_torch(8192, 1600, 6400))
    return cases


FAILED = []  # the alloy_bench runs that failed (the memory table goes on without them)


def alloy_bench(build, runs, cases, fatal=True):
    """Alloy's timings of `cases` (comma-separated names) from alloy_bench, by case name. A failed
    run is an error, or (fatal=False) said on stderr, kept in FAILED and its rows dropped."""
    out = subprocess.run([os.path.join(build, "alloy_bench"), str(runs), cases], capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    rows = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["case"]] = row
    if out.returncode != 0:
        # a negative code is the signal that ended it (its stdout, unflushed, is lost)
        why = f"alloy_bench {cases} failed: exit code {out.returncode}" + (" (a signal)" if out.returncode < 0 else "")
        print(out.stdout)
        if fatal:
            sys.exit(why)
        print(why, file=sys.stderr)
        FAILED.append(why)
        return {}
    return rows


def matmul_table(build, runs):
    rows = []
    for name, make in matmul_cases().items():
        # Alloy's run right before PyTorch's: the same GPU state (clocks, temperature) for both
        a = alloy_bench(build, runs, name).get(name)
        if a is None:
            print(f"alloy_bench has no case {name}", file=sys.stderr)
            continue
        args, contenders = make()
        row = {"case": name, "alloy_us": a["alloy_us"], "flops": a["flops"],
               "alloy_TFLOPs": a["flops"] / a["alloy_us"] / 1e6, "alloy_isolated_us": a.get("isolated_us", float("nan"))}
        for label, fn in contenders.items():
            try:
                us = time_torch(fn, args, runs)
            except Exception as e:  # noqa: BLE001 - report, do not hide
                print(f"{label} failed on {name}: {e}", file=sys.stderr)
                us = float("nan")
            row[f"{label}_us"] = us
            row[f"{label}_TFLOPs"] = a["flops"] / us / 1e6
            row[f"{label}_over_alloy"] = us / a["alloy_us"]
        row["eager_isolated_us"] = time_torch_isolated(contenders["eager"], args, runs)
        row["eager_over_alloy_isolated"] = row["eager_isolated_us"] / row["alloy_isolated_us"]
        rows.append(row)
        del args, contenders
        torch.cuda.empty_cache()
    labels = ["eager", "addmm_act", "compile", "bare_gemm"]
    lines = ["| case | alloy us | alloy TFLOP/s | " + " | ".join(f"{l} us (TFLOP/s)" for l in labels) + " | " +
             " | ".join(f"{l}/alloy" for l in labels) + " | isolated: alloy us | eager us | eager/alloy |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in labels) + " | " + " | ".join("---:" for _ in labels) +
             " | ---: | ---: | ---: |"]
    for r in rows:
        cells = [f"{r[l + '_us']:.1f} ({r[l + '_TFLOPs']:.0f})" if l + "_us" in r else "-" for l in labels]
        ratios = [f"{r[l + '_over_alloy']:.3f}x" if l + "_us" in r else "-" for l in labels]
        lines.append(f"| {r['case']} | {r['alloy_us']:.1f} | {r['alloy_TFLOPs']:.0f} | " + " | ".join(cells) + " | " +
                     " | ".join(ratios) + f" | {r['alloy_isolated_us']:.1f} | {r['eager_isolated_us']:.1f} | "
                     f"{r['eager_over_alloy_isolated']:.3f}x |")
    return rows, lines


def write_results(stem, text, payload):
    os.makedirs("bench/results", exist_ok=True)
    for folder in ["bench/results"] + ([os.environ["OUT"]] if os.environ.get("OUT") else []):
        with open(os.path.join(folder, f"{stem}.md"), "w") as f:
            f.write(text)
        with open(os.path.join(folder, f"{stem}.json"), "w") as f:
            json.dump(payload, f, indent=1)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    runs = RUNS
    sections = sys.argv[3].split(",") if len(sys.argv) > 3 else ["memory", "matmul", "rounds"]
    device = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    slug = device.replace(" ", "_").replace("/", "_")
    if "memory" in sections:
        memory_table(build, runs, device, date, slug)
    if "matmul" in sections:
        matmul_rows, matmul_lines = matmul_table(build, runs)
        text = "\n".join([f"# Alloy matmul + epilogue benchmarks, {device}, {date}", "",
                          f"bf16; median of {runs} samples of {BATCH} back-to-back calls each, CUDA events; TFLOP/s from 2*M*N*K per GEMM; "
                          "x/alloy > 1 means Alloy is faster. Back to back, long compute-bound runs reach the GPU's power limit and "
                          f"its clock drops. 'isolated': median of {runs} single calls, each enqueued behind a {HOLD_MS:g} ms hold of "
                          "the stream (launch path hidden, the GPU idle before each call, at its full clock).", ""] + matmul_lines) + "\n"
        print(text)
        write_results(f"{date}-{slug}-matmul", text, {"device": device, "date": date, "rows": matmul_rows})
    if "rounds" in sections:
        mlp_backward_rounds(build, runs, device, date, slug)


def mlp_backward_rounds(build, runs, device, date, slug, rounds=3):
    """The MLP backward, Alloy then eager autograd, `rounds` times in turn: how much the ratio moves."""
    name = "mlp_backward_8192x1600x6400"
    args, contenders = mlp_backward_torch(8192, 1600, 6400)
    rows = []
    for r in range(rounds):
        a = alloy_bench(build, runs, name)[name]
        eager = time_torch(contenders["eager"], args, runs)
        eager_isolated = time_torch_isolated(contenders["eager"], args, runs)
        rows.append({"round": r, "alloy_us": a["alloy_us"], "eager_us": eager, "alloy_isolated_us": a["isolated_us"],
                     "eager_isolated_us": eager_isolated})
    lines = [f"# The MLP backward [T=8192, C=1600, H=6400] against eager autograd, {device}, {date}", "",
             f"bf16; rounds in turn, Alloy then eager; back to back: median of {runs} samples of {BATCH} calls; isolated: "
             f"median of {runs} single calls, each behind a {HOLD_MS:g} ms hold of the stream", "",
             "| round | back to back: alloy us | eager us | eager/alloy | isolated: alloy us | eager us | eager/alloy |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['alloy_us']:.1f} | {r['eager_us']:.1f} | {r['eager_us'] / r['alloy_us']:.3f}x | "
                     f"{r['alloy_isolated_us']:.1f} | {r['eager_isolated_us']:.1f} | "
                     f"{r['eager_isolated_us'] / r['alloy_isolated_us']:.3f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_results(f"{date}-{slug}-mlp-backward-rounds", text, {"device": device, "date": date, "rows": rows})


def memory_table(build, runs, device, date, slug):
    alloy = alloy_bench(build, runs, "host_latency")
    copy_bw = alloy["copy"]["bytes"] / alloy["copy"]["alloy_us"] / 1e3  # GB/s
    rows = []
    only = [c for c in os.environ.get("BENCH_CASES", "").split(",") if c]
    for name, (fn, make, *best) in torch_cases().items():
        if only and not any(c in name for c in only):
            continue
        # Alloy's run right before PyTorch's: the same GPU state (clocks, temperature) for both
        alloy.update(alloy_bench(build, runs, name, fatal=False))
        args = make()
        eager = time_torch(fn, args, runs)
        eager_alone = time_torch_isolated(fn, args, runs)
        try:
            compiled_fn = torch.compile(fn)
            compiled = time_torch(compiled_fn, args, runs)
            compiled_alone = time_torch_isolated(compiled_fn, args, runs)
        except Exception as e:  # noqa: BLE001 - report, do not hide
            print(f"torch.compile failed on {name}: {e}", file=sys.stderr)
            compiled = compiled_alone = float("nan")
        # the case's best PyTorch op where it names one (native_layer_norm_backward, _fused_adamw_, ...)
        op = float("nan")
        if best:
            try:
                op = time_torch(best[0], args, runs)
            except Exception as e:  # noqa: BLE001 - report, do not hide
                print(f"the PyTorch op of {name} failed: {e}", file=sys.stderr)
        a = alloy.get(name)
        if a is None:
            continue
        bw = a["bytes"] / a["alloy_us"] / 1e3
        rows.append({"case": name, "alloy_us": a["alloy_us"], "eager_us": eager, "compile_us": compiled, "op_us": op,
                     "vs_eager": eager / a["alloy_us"], "vs_compile": compiled / a["alloy_us"], "vs_op": op / a["alloy_us"],
                     "alloy_GBps": bw, "share_of_copy": bw / copy_bw,
                     "alloy_isolated_us": a.get("isolated_us", float("nan")), "eager_isolated_us": eager_alone,
                     "compile_isolated_us": compiled_alone})
        # each row as it is measured (a job cut off at its time limit keeps what it had)
        print(f"row {name}: alloy {a['alloy_us']:.1f} us, eager {eager:.1f}, compile {compiled:.1f}, op {op:.1f}, "
              f"{100 * bw / copy_bw:.0f}% of copy", file=sys.stderr, flush=True)
        del args
        torch.cuda.empty_cache()
    lines = [f"# Alloy benchmarks, {device}, {date}", "",
             f"device-to-device copy: {copy_bw:.0f} GB/s (bytes read + written); median of {runs} samples of {BATCH} back-to-back "
             "calls each (CUDA events; host launch time overlaps, measured apart below). 'alone': median of single calls, "
             f"each enqueued behind a {HOLD_MS:g} ms hold of the stream: the device time of one call with the launch path "
             "hidden (for small fusions the back-to-back time is the host's)", "",
             "| case | alloy us | eager us | compile us | eager/alloy | compile/alloy | op/alloy | alloy GB/s | share of copy "
             "| alone: alloy us | eager us | compile us |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['alloy_us']:.1f} | {r['eager_us']:.1f} | {r['compile_us']:.1f} | {r['vs_eager']:.2f}x | "
                     f"{r['vs_compile']:.2f}x | {r['vs_op']:.2f}x | {r['alloy_GBps']:.0f} | {100 * r['share_of_copy']:.0f}% | "
                     f"{r['alloy_isolated_us']:.1f} | {r['eager_isolated_us']:.1f} | {r['compile_isolated_us']:.1f} |")
    lat = alloy.get("host_latency")
    if lat:
        lines.append("")
        lines.append(f"host latency of a cached run of a tiny fusion (C++): median {lat['alloy_us']:.2f} us, min {lat['min_us']:.2f} us")
    for why in FAILED:
        lines.append("")
        lines.append(f"FAILED: {why}")
    text = "\n".join(lines) + "\n"
    print(text)
    write_results(f"{date}-{slug}-{os.environ.get('BENCH_TAG') or 'memory-bound'}", text,
                  {"device": device, "date": date, "copy_GBps": copy_bw, "rows": rows, "alloy_raw": alloy})


if __name__ == "__main__":
    main()
