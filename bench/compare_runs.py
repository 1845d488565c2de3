#!/usr/bin/env python3
"""Compares two runs of bench/run_benchmarks.py made in the same job on the same GPU (code before
and after a change): for every case in both, Alloy's median time before and after, their ratio,
and PyTorch's times of each run (which should agree, since only Alloy changed).

usage: bench/compare_runs.py BEFORE_DIR AFTER_DIR   (each holding the *.json run_benchmarks wrote)
"""
import glob
import json
import os
import sys


def rows_of(folder):
    """case -> (alloy_us, torch_us, the torch column's name), from every table in the folder."""
    out, device = {}, None
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            table = json.load(f)
        device = device or table.get("device")
        for row in table.get("rows", []):
            name = row.get("case") or f"mlp_backward_round_{row.get('round')}"
            torch_col = next((c for c in ("compile_us", "eager_us") if row.get(c)), None)
            out[name] = (row["alloy_us"], row.get(torch_col) if torch_col else None, torch_col or "")
    return out, device


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    before, device_a = rows_of(sys.argv[1])
    after, device_b = rows_of(sys.argv[2])
    if device_a != device_b:
        print(f"compare_runs: the runs are of different devices ({device_a} vs {device_b})", file=sys.stderr)
        return 1
    print(f"# Before and after, one job on {device_b}\n")
    print("| case | Alloy before (us) | Alloy after (us) | after / before | torch before | torch after |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    worst = 0.0
    for case in sorted(set(before) & set(after)):
        (a0, t0, col), (a1, t1, _) = before[case], after[case]
        ratio = a1 / a0 if a0 else float("nan")
        worst = max(worst, ratio)
        tt = lambda t: f"{t:.1f}" if t else "-"
        print(f"| {case} | {a0:.1f} | {a1:.1f} | {ratio:.3f} | {tt(t0)} {col.replace('_us', '')} | {tt(t1)} |")
    missing = sorted(set(before) ^ set(after))
    if missing:
        print(f"\nIn one run only: {', '.join(missing)}")
    print(f"\nslowest after / before: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
