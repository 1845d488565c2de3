#!/usr/bin/env python3
"""A differential MPMD fuzzer for the job agreement (issue 26): launches 2-4 ranks of `alloy run`
(or `check`) under mpirun, each with arguments drawn from a small set so that ranks often differ,
and asserts: no signal, no hang (a time bound), and either every rank exits 0 with the outputs of
the same command given to every rank alike, or the job exits non-zero with an error message.

Usage: mpmd_fuzz.py ALLOY EXAMPLES_DIR. ALLOY_FUZZ_SECONDS (default 25) bounds the run,
ALLOY_FUZZ_CASES (default: no bound) the cases, ALLOY_FUZZ_JOBS (default 1) the cases at once;
ALLOY_FUZZ_SEED picks the cases (default: random, printed)."""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

alloy, examples = sys.argv[1], sys.argv[2]
if shutil.which("mpirun") is None:
    print("mpirun not found: skipped")
    sys.exit(77)
seconds = float(os.environ.get("ALLOY_FUZZ_SECONDS", "25"))
seed = int(os.environ.get("ALLOY_FUZZ_SEED", str(random.randrange(1 << 30))))
rng = random.Random(seed)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
print(f"mpmd_fuzz: seed {seed}, {seconds:g} s", flush=True)
trace_dir = tempfile.mkdtemp(prefix="alloy_mpmd_fuzz_")

CHOICES = {
    "file": ["tp_mlp.fusion", "tp_mlp_sequence_parallel.fusion"],
    "bind": ["T=8", "T=16"],
    "pipeline": [None, "off", "ring", "chunks=2"],
    "seed": [None, "1"],
    "bench": [None, "2"],
    "trace": [None, None, os.path.join(trace_dir, "t.json")],
    "command": ["run", "run", "run", "check"],
}


def draw():
    return {k: rng.choice(v) for k, v in CHOICES.items()}


def argv(a):
    file = os.path.join(examples, a["file"])
    if a["command"] == "check":
        return [alloy, "check", file]
    out = [alloy, "run", file, "--device", "cpu", "--bind", a["bind"]]
    for k in ("pipeline", "seed", "bench", "trace"):
        if a[k] is not None:
            out += ["--" + k, a[k]]
    return out


def launch(ranks):
    command = ["timeout", "-k", "5", "60", "mpirun", "--oversubscribe"]
    for r, a in enumerate(ranks):
        command += ([":"] if r else []) + ["-n", "1"] + argv(a)
    p = subprocess.run(command, env=env, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, command


def outputs(stdout):  # the summary lines of the outputs (the bench line's times vary)
    return [l for l in stdout.splitlines() if l.startswith("y:") or l.startswith("alloy") or ": ok" in l]


reference = {}  # a command every rank was given alike -> its outputs
deadline = time.monotonic() + seconds
most_cases = int(os.environ.get("ALLOY_FUZZ_CASES", "0"))  # 0: as many as the time allows
jobs = max(1, int(os.environ.get("ALLOY_FUZZ_JOBS", "1")))   # cases launched at once
progress = int(os.environ.get("ALLOY_FUZZ_PROGRESS", "0"))   # a line every N cases (0: none)
lock = threading.Lock()
cases = failures = 0
signals = hangs = wrong = 0


def next_case():
    """The next case's ranks, drawn in order from the one seeded generator (None when done)."""
    global cases
    with lock:
        if time.monotonic() >= deadline or (most_cases and cases >= most_cases):
            return None
        cases += 1
        if progress and cases % progress == 0:
            print(f"mpmd_fuzz: {cases} cases begun, {failures} failures so far", flush=True)
        n = rng.randint(2, 4)
        base = draw()
        ranks = [dict(base) for _ in range(n)]
        if rng.random() < 0.7:  # most cases: one rank differs in one or two choices
            for _ in range(rng.randint(1, 2)):
                k = rng.choice(list(CHOICES))
                ranks[rng.randrange(n)][k] = rng.choice(CHOICES[k])
        return ranks


def check(ranks):
    global failures, signals, hangs, wrong
    n = len(ranks)
    start = time.monotonic()
    code, out, err, command = launch(ranks)
    took = time.monotonic() - start
    same = all(argv(r) == argv(ranks[0]) for r in ranks)
    problem = None
    if code == 124 or code == 137:
        problem = f"a hang ({took:.0f} s)"
    elif code >= 128 or "signal" in err.lower():
        problem = f"a signal (exit {code})"
    elif code == 0 and not same:
        problem = "exit 0 although the ranks were given different arguments"
    elif code != 0 and same:
        problem = f"exit {code} although every rank was given the same arguments"
    elif code != 0 and "error" not in err:
        problem = f"exit {code} without a message"
    elif code == 0:
        key = (n, tuple(argv(ranks[0])))
        got = outputs(out)
        with lock:
            if key in reference and reference[key] != got:
                problem = f"outputs differ from an earlier run of the same command: {reference[key]} vs {got}"
            reference.setdefault(key, got)
    if problem:
        with lock:
            failures += 1
            signals += problem.startswith("a signal")
            hangs += problem.startswith("a hang")
            wrong += problem.startswith("outputs differ") or problem.startswith("exit 0")
            print(f"FAIL ({problem}): {' '.join(command)}\n--- stdout\n{out}\n--- stderr\n{err}", flush=True)


def worker():
    while (ranks := next_case()) is not None:
        check(ranks)


threads = [threading.Thread(target=worker) for _ in range(jobs)]
for t in threads:
    t.start()
for t in threads:
    t.join()
shutil.rmtree(trace_dir, ignore_errors=True)
print(f"mpmd_fuzz: {cases} cases, {failures} failures ({signals} signals, {hangs} hangs, {wrong} wrong values; seed {seed}, {jobs} at once)")
sys.exit(1 if failures else 0)
