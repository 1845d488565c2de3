#!/usr/bin/env python3
"""The spans of a trace written by `alloy run --trace` (or fd.execute(trace=)), as text: for each
rank, each span's start, duration, stream and name, in start order; then each stream's busy time.

    python3 bench/trace_summary.py out.json [--rank 0] [--limit 60]
"""
import argparse
import json
from collections import defaultdict


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--limit", type=int, default=60)
    args = p.parse_args()
    with open(args.file) as f:
        events = json.load(f)["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X" and (args.rank is None or e["pid"] == args.rank)]
    by_rank = defaultdict(list)
    for e in spans:
        by_rank[e["pid"]].append(e)
    for rank, items in sorted(by_rank.items()):
        items.sort(key=lambda e: e["ts"])
        print(f"rank {rank}: {len(items)} spans")
        for e in items[: args.limit]:
            track = threads.get((rank, e["tid"]), str(e["tid"]))
            print(f"  {e['ts']:10.1f} +{e['dur']:9.1f} us  {track:28.28s} {e['name']}")
        busy = defaultdict(float)
        for e in items:
            busy[threads.get((rank, e["tid"]), str(e["tid"]))] += e["dur"]
        print("  busy: " + ", ".join(f"{k} {v:.0f} us" for k, v in sorted(busy.items())))


if __name__ == "__main__":
    main()
