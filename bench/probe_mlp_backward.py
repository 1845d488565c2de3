#!/usr/bin/env python3
"""Probe: how the MLP backward's device time splits, and what a second stream buys, in PyTorch.
Times (back to back and isolated, as bench/run_benchmarks.py measures) of:
- eager autograd;
- the same ops written out on one stream;
- the same with the independent work (bias gradients, dW_proj, dW_fc) on a second stream;
- pairs of GEMMs alone, in sequence and on two streams.
usage: bench/probe_mlp_backward.py [RUNS]
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_benchmarks import time_torch, time_torch_isolated  # noqa: E402  (the benchmarks' own timings)

T, C, H = 8192, 1600, 6400
dev, bf = "cuda", torch.bfloat16


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    torch.manual_seed(0)
    x = torch.randn(T, C, device=dev, dtype=bf, requires_grad=True)
    w_fc = torch.randn(H, C, device=dev, dtype=bf, requires_grad=True)
    b_fc = torch.randn(H, device=dev, dtype=bf, requires_grad=True)
    w_proj = torch.randn(C, H, device=dev, dtype=bf, requires_grad=True)
    b_proj = torch.randn(C, device=dev, dtype=bf, requires_grad=True)
    hpre = F.linear(x, w_fc, b_fc)
    g = F.gelu(hpre, approximate="tanh")
    y = F.linear(g, w_proj, b_proj)
    dy = torch.randn_like(y)
    params = [x, w_fc, b_fc, w_proj, b_proj]
    hd, gd, xd, wfd, wpd = hpre.detach(), g.detach(), x.detach(), w_fc.detach(), w_proj.detach()
    side = torch.cuda.Stream()
    main_s = torch.cuda.current_stream()

    def eager():
        torch.autograd.grad(y, params, dy, retain_graph=True)

    def one_stream():
        dwp = dy.t() @ gd
        dbp = dy.sum(0)
        dg = dy @ wpd
        dh = torch.ops.aten.gelu_backward(dg, hd, approximate="tanh")
        dbf = dh.sum(0)
        dwf = dh.t() @ xd
        dx = dh @ wfd
        return dx, dwf, dbf, dwp, dbp

    def on_side(fn):
        """fn() on the side stream, after everything enqueued on the main stream so far."""
        ready = torch.cuda.Event()
        ready.record(main_s)
        with torch.cuda.stream(side):
            side.wait_event(ready)
            return fn()

    def join():
        done = torch.cuda.Event()
        done.record(side)
        main_s.wait_event(done)

    def two_streams(sums_only):
        dbp = on_side(lambda: dy.sum(0))
        dwp = dy.t() @ gd if sums_only else on_side(lambda: dy.t() @ gd)
        dg = dy @ wpd
        dh = torch.ops.aten.gelu_backward(dg, hd, approximate="tanh")
        dbf = on_side(lambda: dh.sum(0))
        dwf = dh.t() @ xd if sums_only else on_side(lambda: dh.t() @ xd)
        dx = dh @ wfd
        join()
        return dx, dwf, dbf, dwp, dbp

    rows = [("eager autograd", eager), ("written out, one stream", one_stream),
            ("bias sums on a second stream", lambda: two_streams(True)),
            ("bias sums + dW GEMMs on a second stream", lambda: two_streams(False))]
    dh0 = torch.randn(T, H, device=dev, dtype=bf)

    def pair(f1, f2):
        def run():
            on_side(f2)
            f1()
            join()
        return run

    dwp_f = lambda: dy.t() @ gd  # noqa: E731
    dg_f = lambda: dy @ wpd  # noqa: E731
    dwf_f = lambda: dh0.t() @ xd  # noqa: E731
    dx_f = lambda: dh0 @ wfd  # noqa: E731
    sum_f = lambda: dh0.sum(0)  # noqa: E731
    rows += [("dW_proj alone", dwp_f), ("dg alone", dg_f), ("dW_proj; dg", lambda: (dwp_f(), dg_f())),
             ("dW_proj || dg", pair(dg_f, dwp_f)),
             ("dW_fc alone", dwf_f), ("dx alone", dx_f), ("dW_fc; dx", lambda: (dwf_f(), dx_f())),
             ("dW_fc || dx", pair(dx_f, dwf_f)),
             ("sum(dh) alone", sum_f), ("dx; sum(dh)", lambda: (dx_f(), sum_f())), ("dx || sum(dh)", pair(dx_f, sum_f))]
    ref = one_stream()
    for name, fn in rows:
        us = time_torch(fn, (), runs)
        iso = time_torch_isolated(fn, (), runs)
        print(f"{name:45s} {us:9.1f} us back to back {iso:9.1f} us isolated", flush=True)
    got = two_streams(False)
    for r, o in zip(ref, got):
        assert torch.equal(r, o), "two-stream result differs"
    print("two-stream results equal the one-stream results")


if __name__ == "__main__":
    main()
