#!/usr/bin/env python3
"""The pipelined pairs of issue 25 on N GPUs, every --pipeline form against Alloy's own local GEMM
of the same shard (the floor: one GPU, no communication), in one job, each case by
`alloy run --bench` under mpirun (the median of --runs timed runs after warm-up, on rank 0).

    python3 bench/pair_bench.py --alloy build/alloy [--ranks 2] [--pairs 8192x8192x28672]
        [--forms off,auto,chunks=1,chunks=2,chunks=4,ring] [--env ALLOY_NO_COPY_ENGINES=1] [--label NAME]
        [--kinds ag_gemm,gemm_rs,gemm_ar]

AG+GEMM: x [M, K] sharded by rows, all-gathered in front of a column-parallel linear (w [N, K]
sharded by rows): the floor is linear([M, K], [N/n, K]). GEMM+RS: a row-parallel linear (the
contraction N split), its [M, K] partial sums reduce-scattered by rows: the floor is
linear([M, N/n], [K, N/n]). GEMM+AR: the same row-parallel linear with its partial sums
all-reduced (Megatron's fc2; every rank keeps every row), the same floor. Prints a table (ratio =
form / floor) and one JSON line a row.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tp_mlp_bench import alloy_median_us, pair_text  # noqa: E402


def local_text(kind, m, k, n, ranks):
    if kind == "ag_gemm":
        return (f"fusion ag_local(x: bf16[{m}, {k}], w: bf16[{n // ranks}, {k}]) {{\n"
                "  y = linear(x, w)\n  return y\n}\n")
    return (f"fusion rs_local(x: bf16[{m}, {n // ranks}], w: bf16[{k}, {n // ranks}]) {{\n"
            "  y = linear(x, w)\n  return y\n}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--alloy", default=os.path.join(HERE, "..", "build", "alloy"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--pairs", default="8192x8192x28672")
    p.add_argument("--forms", default="off,auto,chunks=1,chunks=2,chunks=4,ring")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the Alloy runs (repeatable)")
    p.add_argument("--label", default="")
    p.add_argument("--kinds", default="ag_gemm,gemm_rs", help="the pairs: ag_gemm, gemm_rs, gemm_ar")
    p.add_argument("--skip-floor", action="store_true", help="no floor run (ratios then read 'nan')")
    args = p.parse_args()
    for kv in args.env:
        name, _, value = kv.partition("=")
        os.environ[name] = value
    label = args.label or (" ".join(args.env) if args.env else "default")
    for shape in args.pairs.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        for kind in args.kinds.split(","):
            floor = float("nan") if args.skip_floor else alloy_median_us(args.alloy, local_text(kind, m, k, n, args.ranks), 0, 1, args.runs)[0]
            row = {"label": label, "pair": kind, "shape": shape, "ranks": args.ranks, "floor_us": floor}
            cells = []
            for form in args.forms.split(","):
                try:
                    us, _ = alloy_median_us(args.alloy, pair_text(kind, m, k, n, args.ranks), 0, args.ranks, args.runs,
                                            ["--pipeline", form])
                except RuntimeError as e:
                    print(f"{kind} {form}: failed: {str(e)[-600:]}", file=sys.stderr, flush=True)
                    us = float("nan")
                row[form + "_us"] = us
                cells.append(f"{form} {us:.0f} ({us / floor:.3f}x)")
            print(f"[{label}] {kind} {shape} n={args.ranks}: floor {floor:.0f} us | " + " | ".join(cells), flush=True)
            print("json " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
