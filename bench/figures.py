#!/usr/bin/env python3
"""The figures of bench/results/ as tables, so that a number quoted in a note or a doc is read
from the file a benchmark wrote, never retyped.

    python3 bench/figures.py                   # every result file, newest last
    python3 bench/figures.py issue17 H100      # the files whose name has every word given
    python3 bench/figures.py --check           # every file parses and has rows (CTest: bench_figures)

Reads the JSON files the benchmark scripts write ({"device", "date", "rows": [...]}) and the
JSON-lines files (one object a line). Times (keys ending in _us) print with one decimal, ratios
(vs_*, *_over_*, ratio) with two, shares of copy bandwidth as percentages.
"""
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    """(device, date, rows) of a result file; ValueError when it is not one."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".jsonl"):
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        name = os.path.basename(path)
        return name[11:].split("-")[0], name[:10], rows
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError("expected an object with a list of rows")
    return data.get("device", "?"), data.get("date", "?"), data["rows"]


def cell(key, value):
    if isinstance(value, float):
        if key.endswith("_us"):
            return f"{value:.1f}"
        if key == "share_of_copy":
            return f"{100 * value:.0f}%"
        if key.startswith("vs_") or "_over_" in key or key == "ratio":
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value)


def table(rows):
    keys = []
    for row in rows:
        for k, v in row.items():
            if k not in keys and not isinstance(v, (list, dict)):
                keys.append(k)
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    for row in rows:
        lines.append("| " + " | ".join(cell(k, row.get(k, "")) for k in keys) + " |")
    return "\n".join(lines)


def main(argv):
    check = "--check" in argv
    words = [a for a in argv if not a.startswith("--")]
    paths = sorted(glob.glob(os.path.join(HERE, "results", "*.json")) + glob.glob(os.path.join(HERE, "results", "*.jsonl")))
    paths = [p for p in paths if all(w.lower() in os.path.basename(p).lower() for w in words)]
    if not paths:
        print("figures.py: no result file matches", " ".join(words) or "(any)", file=sys.stderr)
        return 1
    bad = 0
    for path in paths:
        try:
            device, date, rows = load(path)
            if not rows:
                raise ValueError("no rows")
        except (ValueError, OSError) as e:
            print(f"{os.path.relpath(path, HERE)}: {e}", file=sys.stderr)
            bad += 1
            continue
        if not check:
            print(f"## {os.path.basename(path)} ({device}, {date})\n\n{table(rows)}\n")
    if check:
        print(f"figures.py: {len(paths) - bad} of {len(paths)} result files parse")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
