"""Two Python threads executing one definition at once (the executor runs with the GIL released):
each gets its own results, and the plan is built once."""
import threading

import numpy as np

import alloy


def test_two_threads_execute_one_definition():
    with alloy.FusionDefinition("ln") as fd:
        x = fd.define_tensor(shape=[-1, 64], dtype=alloy.float64)
        w = fd.define_tensor(shape=[64], dtype=alloy.float64)
        fd.add_output(fd.ops.layer_norm(x, w, None, normalized_ndim=1, eps=1e-5))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    rng = np.random.default_rng(3)
    cases = [(rng.standard_normal((rows, 64)), rng.standard_normal(64)) for rows in (3, 17)]
    expected = []
    for a, b in cases:
        mu, var = a.mean(axis=1, keepdims=True), a.var(axis=1, keepdims=True)
        expected.append(((a - mu) / np.sqrt(var + 1e-5) * b, a.sum(axis=1)))
    failures = []
    start = threading.Barrier(len(cases))

    def work(k):
        try:
            start.wait()  # both threads race for the first run, which builds the plan
            for _ in range(60):
                norm, total = fd.execute(list(cases[k]))
                np.testing.assert_allclose(norm, expected[k][0], rtol=1e-10, atol=1e-10)
                np.testing.assert_allclose(total, expected[k][1], rtol=1e-12, atol=1e-12)
        except Exception as e:  # noqa: BLE001  (reported below)
            failures.append(f"thread {k}: {e!r}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert fd.compile_count == 1
