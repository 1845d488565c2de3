#!/usr/bin/env python3
"""The tensor-parallel MLP forward on N GPUs: Alloy (one process per GPU under mpirun, the
sharding written as annotations) against PyTorch with NCCL (torchrun, the Megatron and the
sequence-parallel forms written by hand), in the same job, case by case, Alloy first. Also the
pipelined pairs of issue 13: AG+GEMM and GEMM+RS at M x K x N (default 8192 x 8192 x 28672),
Alloy with --pipeline off, auto and ring against PyTorch's naive sequence and async-TP
(fused_all_gather_matmul / fused_matmul_reduce_scatter, where symmetric memory works).

    python3 bench/tp_mlp_bench.py --alloy build/alloy [--ranks 2] [--tokens 8192] [--runs 50]

Every timing is the median of --runs synchronized calls after warm-up (wall time per call, the
same method as `alloy run --bench`), taken on rank 0. The floor is one GPU's local compute alone:
the same MLP with the local widths (H / N), no communication. With --ranks 1 (a mesh of one) it
is a smoke test on one GPU. Results go to bench/results/DATE-DEVICE-tp-mlp.{md,json}.

With --backward, the Megatron MLP's backward instead (issue 25): Alloy's fusion of the backward
(examples/tp_mlp_backward.fusion's form: dy and the saved h, g in; dx all-reduced, every weight
gradient split where its weight is) against PyTorch autograd of the same sharded forward
(torch.autograd.grad of Megatron's MLP, whose input's gradient is all-reduced by an autograd
function, as Megatron's f operator), and the local floor (the backward of H / N alone). Results
go to bench/results/DATE-DEVICE-tp-mlp-backward-xN.{md,json}.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WIDTHS = [(1600, 6400), (4096, 11008), (8192, 28672)]


def fusion_text(c, h, ranks, form):
    mesh = "@mesh[" + ", ".join(str(r) for r in range(ranks)) + "]"
    if form == "local":  # one GPU's share of the work, no mesh
        hl = h // ranks
        return (f"fusion local_mlp(x: bf16[T, {c}], w_fc: bf16[{hl}, {c}], b_fc: bf16[{hl}],\n"
                f"                 w_proj: bf16[{c}, {hl}], b_proj: bf16[{c}]) {{\n"
                "  h = linear(x, w_fc, b_fc)\n  g = gelu(h, approximate=\"tanh\")\n  y = linear(g, w_proj, b_proj)\n"
                "  return y\n}\n")
    x_shard = "shard(axis=0)" if form == "sequence_parallel" else "replicated"
    y_note = f" {mesh} shard(axis=0)" if form == "sequence_parallel" else ""
    h_note = f" {mesh} shard(axis=1)" if form == "sequence_parallel" else ""
    return (f"fusion tp_mlp(x: bf16[T, {c}] {mesh} {x_shard},\n"
            f"              w_fc: bf16[{h}, {c}] {mesh} shard(axis=0),\n"
            f"              b_fc: bf16[{h}] {mesh} shard(axis=0),\n"
            f"              w_proj: bf16[{c}, {h}] {mesh} shard(axis=1),\n"
            f"              b_proj: bf16[{c}] {mesh} replicated) {{\n"
            f"  h = linear(x, w_fc, b_fc){h_note}\n  g = gelu(h, approximate=\"tanh\")\n"
            f"  y = linear(g, w_proj, b_proj){y_note}\n  return y\n}}\n")


def backward_text(c, h, ranks, local=False):
    """The Megatron MLP's backward at widths c -> h: sharded over `ranks`, or (local) one GPU's
    share alone (h / ranks features, no mesh, no all-reduce)."""
    mesh = "@mesh[" + ", ".join(str(r) for r in range(ranks)) + "]"
    notes = ({"r": "", "s0": "", "s1": ""} if local else
             {"r": f" {mesh} replicated", "s0": f" {mesh} shard(axis=0)", "s1": f" {mesh} shard(axis=1)"})
    hh = h // ranks if local else h
    return (f"fusion tp_mlp_backward(dy: bf16[T, {c}]{notes['r']}, x: bf16[T, {c}]{notes['r']},\n"
            f"    h: bf16[T, {hh}]{notes['s1']}, g: bf16[T, {hh}]{notes['s1']},\n"
            f"    w_fc: bf16[{hh}, {c}]{notes['s0']}, w_proj: bf16[{c}, {hh}]{notes['s1']}) {{\n"
            "  dy_t = permute(dy, dims=[1, 0])\n"
            "  dw_proj = matmul(dy_t, g)\n"
            "  db_proj = sum(dy, dims=[0])\n"
            "  dg = matmul(dy, w_proj)\n"
            "  dh = gelu_backward(dg, h, approximate=\"tanh\")\n"
            "  db_fc = sum(dh, dims=[0])\n"
            "  dh_t = permute(dh, dims=[1, 0])\n"
            "  dw_fc = matmul(dh_t, x)\n"
            "  dx = matmul(dh, w_fc)\n"
            "  return dx, dw_fc, db_fc, dw_proj, db_proj\n}\n")


def pair_text(kind, m, k, n, ranks):
    mesh = "@mesh[" + ", ".join(str(r) for r in range(ranks)) + "]"
    if kind == "ag_gemm":  # x split by rows, all-gathered in front of a column-parallel GEMM
        return (f"fusion ag_gemm(x: bf16[{m}, {k}] {mesh} shard(axis=0), w: bf16[{n}, {k}] {mesh} shard(axis=0)) {{\n"
                f"  y = linear(x, w) {mesh} shard(axis=1)\n  return y\n}}\n")
    if kind == "gemm_ar":  # a row-parallel GEMM whose partial sums are all-reduced (Megatron's fc2)
        return (f"fusion gemm_ar(x: bf16[{m}, {n}] {mesh} shard(axis=1), w: bf16[{k}, {n}] {mesh} shard(axis=1)) {{\n"
                "  y = linear(x, w)\n  return y\n}\n")
    # a row-parallel GEMM (contraction split) whose partial sums are reduce-scattered by rows
    return (f"fusion gemm_rs(x: bf16[{m}, {n}] {mesh} shard(axis=1), w: bf16[{k}, {n}] {mesh} shard(axis=1)) {{\n"
            f"  y = linear(x, w) {mesh} shard(axis=0)\n  return y\n}}\n")


def mpi_env():
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "NCCL_NVLS_ENABLE": "0"})
    return env


def alloy_median_us(alloy, text, tokens, ranks, runs, extra=()):
    with tempfile.NamedTemporaryFile("w", suffix=".fusion", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        binds = ["--bind", f"T={tokens}"] if "[T," in text else []
        cmd = [alloy, "run", path] + binds + ["--bench", str(runs)] + list(extra)
        if ranks > 1:
            cmd = ["mpirun", "-n", str(ranks), "--oversubscribe"] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        m = re.search(r"bench median_us=([0-9.]+)", out.stdout)
        if not m:
            raise RuntimeError(f"no bench line in:\n{out.stdout}")
        return float(m.group(1)), out.stderr.strip()
    finally:
        os.unlink(path)


def torch_worker(args):
    """Runs under torchrun: times PyTorch's Megatron and sequence-parallel forwards."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    torch.manual_seed(0)
    c, h, t = args.c, args.h, args.tokens
    dt = torch.bfloat16
    w_fc = torch.randn(h // world, c, dtype=dt, device="cuda") * 0.02
    b_fc = torch.randn(h // world, dtype=dt, device="cuda")
    w_proj = torch.randn(c, h // world, dtype=dt, device="cuda") * 0.02
    b_proj = torch.randn(c, dtype=dt, device="cuda")
    x_full = torch.randn(t, c, dtype=dt, device="cuda")
    x_part = x_full.chunk(world)[rank].contiguous()
    gathered = torch.empty(t, c, dtype=dt, device="cuda")
    out_part = torch.empty(t // world, c, dtype=dt, device="cuda")

    def megatron():
        y = F.linear(F.gelu(F.linear(x_full, w_fc, b_fc), approximate="tanh"), w_proj)
        dist.all_reduce(y)
        return y + b_proj

    def sequence_parallel():
        dist.all_gather_into_tensor(gathered, x_part)
        y = F.linear(F.gelu(F.linear(gathered, w_fc, b_fc), approximate="tanh"), w_proj)
        dist.reduce_scatter_tensor(out_part, y)
        return out_part + b_proj

    def local():
        return F.linear(F.gelu(F.linear(x_full, w_fc, b_fc), approximate="tanh"), w_proj, b_proj)

    import time
    results = {}
    if args.pair:
        return pair_worker(args, rank, world)
    if args.backward:
        return backward_worker(args, rank, world)
    for name, fn in (("megatron", megatron), ("sequence_parallel", sequence_parallel), ("local", local)):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e6)
        times.sort()
        results[name] = times[len(times) // 2]
    if rank == 0:
        print("TORCH_RESULTS " + json.dumps(results), flush=True)
    dist.destroy_process_group()


def backward_worker(args, rank, world):
    """Runs under torchrun: PyTorch autograd of Megatron's MLP (column-parallel fc1, row-parallel
    fc2; x's gradient all-reduced by an autograd function, the output all-reduced forward), timed
    as torch.autograd.grad over a graph kept across calls; and the local share's backward alone."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    class CopyToTensorParallel(torch.autograd.Function):  # Megatron's f: identity, all-reduce back
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            grad = grad.contiguous()
            dist.all_reduce(grad)
            return grad

    class ReduceFromTensorParallel(torch.autograd.Function):  # Megatron's g: all-reduce, identity back
        @staticmethod
        def forward(ctx, y):
            y = y.contiguous()
            dist.all_reduce(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            return grad

    torch.manual_seed(0)
    c, h, t = args.c, args.h, args.tokens
    dt = torch.bfloat16

    def params():
        w_fc = (torch.randn(h // world, c, dtype=dt, device="cuda") * 0.02).requires_grad_()
        b_fc = torch.randn(h // world, dtype=dt, device="cuda").requires_grad_()
        w_proj = (torch.randn(c, h // world, dtype=dt, device="cuda") * 0.02).requires_grad_()
        b_proj = torch.randn(c, dtype=dt, device="cuda").requires_grad_()
        return w_fc, b_fc, w_proj, b_proj

    results = {}
    x = torch.randn(t, c, dtype=dt, device="cuda").requires_grad_()
    dy = torch.randn(t, c, dtype=dt, device="cuda")
    for name, sharded in (("megatron_backward", True), ("local_backward", False)):
        w_fc, b_fc, w_proj, b_proj = params()
        xin = CopyToTensorParallel.apply(x) if sharded else x
        partial = F.linear(F.gelu(F.linear(xin, w_fc, b_fc), approximate="tanh"), w_proj)
        y = (ReduceFromTensorParallel.apply(partial) if sharded else partial) + b_proj
        wrt = [x, w_fc, b_fc, w_proj, b_proj]
        results[name] = time_median_us(lambda: torch.autograd.grad(y, wrt, dy, retain_graph=True), args.runs)
    if rank == 0:
        print("TORCH_RESULTS " + json.dumps(results), flush=True)
    dist.destroy_process_group()


def time_median_us(fn, runs):
    import time
    import torch
    import torch.distributed as dist
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    times.sort()
    return times[len(times) // 2]


def pair_worker(args, rank, world):
    import torch
    import torch.distributed as dist
    m, k, n = args.m, args.k, args.n
    dt = torch.bfloat16
    group = dist.group.WORLD
    results = {}
    if args.pair == "ag_gemm":
        a = torch.randn(m // world, k, dtype=dt, device="cuda")
        b = torch.randn(n // world, k, dtype=dt, device="cuda") * 0.02
        gathered = torch.empty(m, k, dtype=dt, device="cuda")

        def naive():
            dist.all_gather_into_tensor(gathered, a)
            return gathered @ b.t()
        results["naive"] = time_median_us(naive, args.runs)
        results["floor_gemm"] = time_median_us(lambda: gathered @ b.t(), args.runs)
        results["floor_comm"] = time_median_us(lambda: dist.all_gather_into_tensor(gathered, a), args.runs)
        try:
            import torch.distributed._symmetric_memory as symm
            symm.enable_symm_mem_for_group(group.group_name)
            bt = b.t()
            results["async_tp"] = time_median_us(
                lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [bt], gather_dim=0, group_name=group.group_name), args.runs)
        except Exception as e:  # noqa: BLE001 (report, do not fail the benchmark)
            results["async_tp_error"] = f"{type(e).__name__}: {e}"[:200]
    else:
        a = torch.randn(m, n // world, dtype=dt, device="cuda")
        b = torch.randn(k, n // world, dtype=dt, device="cuda") * 0.02
        out = torch.empty(m // world, k, dtype=dt, device="cuda")
        partial = a @ b.t()

        def naive():
            dist.reduce_scatter_tensor(out, a @ b.t())
            return out
        results["naive"] = time_median_us(naive, args.runs)
        results["floor_gemm"] = time_median_us(lambda: a @ b.t(), args.runs)
        results["floor_comm"] = time_median_us(lambda: dist.reduce_scatter_tensor(out, partial), args.runs)
        try:
            import torch.distributed._symmetric_memory as symm
            symm.enable_symm_mem_for_group(group.group_name)
            bt = b.t()
            results["async_tp"] = time_median_us(
                lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, bt, "sum", scatter_dim=0, group_name=group.group_name),
                args.runs)
        except Exception as e:  # noqa: BLE001
            results["async_tp_error"] = f"{type(e).__name__}: {e}"[:200]
    if rank == 0:
        print("TORCH_RESULTS " + json.dumps(results), flush=True)
    dist.destroy_process_group()


def run_torch_worker(ranks, worker_args):
    """This script as a PyTorch worker under torchrun; rank 0's TORCH_RESULTS line, parsed."""
    cmd = ["torchrun", "--standalone", f"--nproc-per-node={ranks}", os.path.abspath(__file__), "--torch-worker"] + worker_args
    out = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=600)
    found = re.search(r"TORCH_RESULTS (.*)", out.stdout)
    if out.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(found.group(1))


def torch_pair_medians(pair, m, k, n, ranks, runs):
    return run_torch_worker(ranks, ["--pair", pair, "--pair-m", str(m), "--pair-k", str(k), "--pair-n", str(n), "--runs", str(runs)])


def torch_medians(c, h, tokens, ranks, runs):
    return run_torch_worker(ranks, ["--c", str(c), "--h", str(h), "--tokens", str(tokens), "--runs", str(runs)])


def device_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return "unknown"


def backward_main(args, ranks, widths, device):
    """--backward: Alloy's Megatron backward, PyTorch autograd's, and the local floor, per width."""
    rows = []
    for c, h in widths:
        row = {"width": f"{c}->{h}", "ranks": ranks, "tokens": args.tokens}
        row["alloy_backward_us"], note = alloy_median_us(args.alloy, backward_text(c, h, ranks), args.tokens, ranks, args.runs)
        row["alloy_local_backward_us"], _ = alloy_median_us(args.alloy, backward_text(c, h, ranks, local=True), args.tokens, 1, args.runs)
        try:
            t = run_torch_worker(ranks, ["--backward", "--c", str(c), "--h", str(h), "--tokens", str(args.tokens), "--runs", str(args.runs)])
            row["torch_backward_us"], row["torch_local_backward_us"] = t["megatron_backward"], t["local_backward"]
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:  # reported, not fatal: Alloy's times stand
            row["torch_error"] = str(e)[-400:]
        if note:
            row["alloy_stderr"] = note
        rows.append(row)
        print(json.dumps(row), flush=True)
    date = datetime.date.today().isoformat()
    nan = float("nan")
    lines = [f"# TP MLP backward (Megatron), {ranks} x {device}, tokens {args.tokens}, bf16, {date}", "",
             "Median of synchronized calls (wall time per call). ratio = PyTorch autograd / Alloy (>1: Alloy faster);",
             "floor = the local share's backward alone (H / N features, no all-reduce).", "",
             "| width | Alloy | PyTorch autograd | ratio | Alloy / floor | floor (Alloy local) | floor (PyTorch local) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        torch_us, torch_local = r.get("torch_backward_us", nan), r.get("torch_local_backward_us", nan)
        lines.append(f"| {r['width']} | {r['alloy_backward_us']:.0f} us | {torch_us:.0f} us | {torch_us / r['alloy_backward_us']:.2f} | "
                     f"{r['alloy_backward_us'] / r['alloy_local_backward_us']:.2f} | {r['alloy_local_backward_us']:.0f} us | "
                     f"{torch_local:.0f} us |")
    write_results(args.out, f"{date}-{device.replace(' ', '_')}-tp-mlp-backward-x{ranks}", lines,
                  {"device": device, "date": date, "rows": rows})


def write_results(out, name, lines, payload):
    """The table printed and kept as OUT/NAME.md, the rows as OUT/NAME.json."""
    table = "\n".join(lines)
    print(table)
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, name)
    with open(stem + ".md", "w") as f:
        f.write(table + "\n")
    with open(stem + ".json", "w") as f:
        json.dump(payload, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--alloy", default=os.path.join(HERE, "..", "build", "alloy"))
    p.add_argument("--ranks", type=int, default=0, help="processes (GPUs); default: every GPU")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--widths", default="", help="e.g. 1600x6400,4096x11008 (default: the three of issue 14)")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--pairs", default="8192x8192x28672", help="M x K x N of the AG+GEMM and GEMM+RS cases ('' for none)")
    p.add_argument("--backward", action="store_true", help="the Megatron MLP's backward against PyTorch autograd (no pairs)")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--pair", default="", help=argparse.SUPPRESS)
    p.add_argument("--pair-m", dest="m", type=int, default=0, help=argparse.SUPPRESS)  # not --m: torchrun takes abbreviations of its own options
    p.add_argument("--pair-k", dest="k", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pair-n", dest="n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--c", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--h", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.runs < 1:
        p.error(f"--runs must be at least 1, got {args.runs}")
    if args.torch_worker:
        return torch_worker(args)

    ranks = args.ranks
    if ranks <= 0:
        import torch
        ranks = torch.cuda.device_count()
    widths = [tuple(int(v) for v in w.split("x")) for w in args.widths.split(",")] if args.widths else WIDTHS
    device = device_name()
    if args.backward:
        return backward_main(args, ranks, widths, device)
    rows = []
    for c, h in widths:
        row = {"width": f"{c}->{h}", "ranks": ranks, "tokens": args.tokens}
        row["alloy_megatron_us"], note = alloy_median_us(args.alloy, fusion_text(c, h, ranks, "megatron"), args.tokens, ranks, args.runs)
        row["alloy_sequence_parallel_us"], _ = alloy_median_us(args.alloy, fusion_text(c, h, ranks, "sequence_parallel"),
                                                               args.tokens, ranks, args.runs)
        row["alloy_local_us"], _ = alloy_median_us(args.alloy, fusion_text(c, h, ranks, "local"), args.tokens, 1, args.runs)
        t = torch_medians(c, h, args.tokens, ranks, args.runs)
        row.update({"torch_megatron_us": t["megatron"], "torch_sequence_parallel_us": t["sequence_parallel"],
                    "torch_local_us": t["local"]})
        if note:
            row["alloy_stderr"] = note
        rows.append(row)
        print(json.dumps(row), flush=True)

    date = datetime.date.today().isoformat()
    lines = [f"# TP MLP forward, {ranks} x {device}, tokens {args.tokens}, bf16, {date}", "",
             "Median of synchronized calls (wall time per call). ratio = PyTorch / Alloy (>1: Alloy faster).", "",
             "| width | Alloy Megatron | PyTorch Megatron | ratio | Alloy SP | PyTorch SP | ratio | floor (Alloy local) | floor (PyTorch local) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['width']} | {r['alloy_megatron_us']:.0f} us | {r['torch_megatron_us']:.0f} us | "
                     f"{r['torch_megatron_us'] / r['alloy_megatron_us']:.2f} | {r['alloy_sequence_parallel_us']:.0f} us | "
                     f"{r['torch_sequence_parallel_us']:.0f} us | {r['torch_sequence_parallel_us'] / r['alloy_sequence_parallel_us']:.2f} | "
                     f"{r['alloy_local_us']:.0f} us | {r['torch_local_us']:.0f} us |")
    pair_rows = []
    if args.pairs:
        m, k, n = (int(v) for v in args.pairs.split("x"))
        for pair in ("ag_gemm", "gemm_rs"):
            row = {"case": pair, "mkn": args.pairs, "ranks": ranks}
            text = pair_text(pair, m, k, n, ranks)
            row["alloy_off_us"], _ = alloy_median_us(args.alloy, text, args.tokens, ranks, args.runs, ["--pipeline", "off"])
            row["alloy_auto_us"], _ = alloy_median_us(args.alloy, text, args.tokens, ranks, args.runs, ["--pipeline", "auto"])
            row["alloy_ring_us"], _ = alloy_median_us(args.alloy, text, args.tokens, ranks, args.runs, ["--pipeline", "ring"])
            row.update({"torch_" + key: v for key, v in torch_pair_medians(pair, m, k, n, ranks, args.runs).items()})
            pair_rows.append(row)
            print(json.dumps(row), flush=True)
        lines += ["", f"Pipelined pairs at M x K x N = {args.pairs} (Alloy --pipeline off / auto / ring; ratio = PyTorch naive / Alloy auto):", "",
                  "| case | Alloy off | Alloy auto | Alloy ring | PyTorch naive | PyTorch async-TP | floor max(GEMM, comm) | ratio |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in pair_rows:
            async_tp = f"{r['torch_async_tp']:.0f} us" if "torch_async_tp" in r else "n/a"
            floor = max(r["torch_floor_gemm"], r["torch_floor_comm"])
            lines.append(f"| {r['case']} | {r['alloy_off_us']:.0f} us | {r['alloy_auto_us']:.0f} us | {r['alloy_ring_us']:.0f} us | "
                         f"{r['torch_naive']:.0f} us | "
                         f"{async_tp} | {floor:.0f} us | {r['torch_naive'] / r['alloy_auto_us']:.2f} |")
    write_results(args.out, f"{date}-{device.replace(' ', '_')}-tp-mlp-x{ranks}", lines,
                  {"device": device, "date": date, "rows": rows, "pairs": pair_rows})


if __name__ == "__main__":
    sys.exit(main())
