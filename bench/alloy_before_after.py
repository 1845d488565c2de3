#!/usr/bin/env python3
"""Alloy before and after a change, on one GPU in one job: runs two builds' alloy_bench (every case
it times: memory-bound kernels, GEMMs with their epilogues, the MLP backward) in alternating rounds
(before, after, before, after, ...), so a clock or temperature drift favours neither, and prints
each case's best median of each build and their ratio. PyTorch is not run: only Alloy changed
(bench/run_benchmarks.py compares with PyTorch).

usage: bench/alloy_before_after.py BEFORE_ALLOY_BENCH AFTER_ALLOY_BENCH [RUNS] [ROUNDS] [CASES]
"""
import json
import subprocess
import sys


def run(binary, runs, cases):
    out = subprocess.run([binary, str(runs)] + ([cases] if cases else []), capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["case"]] = row["alloy_us"]
    return rows


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    before_bin, after_bin = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    cases = sys.argv[5] if len(sys.argv) > 5 else ""
    best = {"before": {}, "after": {}}
    for r in range(rounds):
        for name, binary in (("before", before_bin), ("after", after_bin)):
            for case, us in run(binary, runs, cases).items():
                best[name][case] = min(us, best[name].get(case, us))
                print(f"round {r} {name} {case} {us:.2f}", flush=True)
    print(f"| case | before (us) | after (us) | after / before |")
    print("| --- | ---: | ---: | ---: |")
    worst = 0.0
    for case in best["after"]:
        if case not in best["before"]:
            continue
        a, b = best["before"][case], best["after"][case]
        worst = max(worst, b / a)
        print(f"| {case} | {a:.2f} | {b:.2f} | {b / a:.3f} |")
    print(f"\nbest of {rounds} alternating rounds of {runs} samples each; slowest after / before: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
