"""Tensors across the boundary without copies: inputs are read where they are (any strides,
read-only arrays, zero-size arrays), outputs that are views of inputs come back as views of the
same memory, results outlive their inputs, and objects that only speak __dlpack__ work too."""
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import alloy
from conftest import define


def view_fusion(dims=(1, 0)):
    with alloy.FusionDefinition("views") as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=alloy.float32)
        fd.add_output(fd.ops.permute(x, dims=list(dims)))
        fd.add_output(fd.ops.segment_set(x))
        fd.add_output(fd.ops.exp(x))
    return fd


def test_view_outputs_share_the_input_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    transposed, same, computed = view_fusion().execute([a])
    assert np.shares_memory(transposed, a) and np.shares_memory(same, a)
    assert transposed.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    assert transposed.strides == a.T.strides
    np.testing.assert_array_equal(transposed, a.T)
    assert not np.shares_memory(computed, a)
    a[0, 0] = 100  # a view sees later writes to the input
    assert transposed[0, 0] == 100 and same[0, 0] == 100


def test_strided_and_read_only_inputs_are_read_in_place():
    base = np.arange(40, dtype=np.float32).reshape(5, 8)
    for a in [base[:, ::2], base.T, base[1:4, 2:7], np.broadcast_to(base[0], (3, 8))]:
        transposed, same, computed = view_fusion().execute([a])
        assert np.shares_memory(same, a)
        np.testing.assert_array_equal(same, a)
        np.testing.assert_allclose(computed, np.exp(a), rtol=1e-6)


def test_zero_size_and_zero_dim_inputs():
    (t, s, c) = view_fusion().execute([np.zeros((0, 3), np.float32)])
    assert t.shape == (3, 0) and c.shape == (0, 3)
    fd = define([np.float64(2.0)], lambda fd, x: fd.ops.mul(x, 3))  # a scalar input
    for value in [2.0, 2, np.float64(2.0), np.array(2.0)]:
        np.testing.assert_allclose(fd.execute([value])[0], 6.0)
    zero_dim = define([np.array(1.5)], lambda fd, x: fd.ops.exp(x))
    assert zero_dim.inputs[0].shape == [] and not zero_dim.inputs[0].is_scalar
    np.testing.assert_allclose(zero_dim.execute([np.array(1.5)])[0], np.exp(1.5))


def test_results_outlive_inputs_and_definitions():
    fd = view_fusion()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    transposed, same, computed = fd.execute([a])
    del a, fd
    gc.collect()
    np.testing.assert_array_equal(transposed, np.arange(6, dtype=np.float32).reshape(2, 3).T)
    np.testing.assert_allclose(computed, np.exp(np.arange(6, dtype=np.float32).reshape(2, 3)), rtol=1e-6)


class OnlyDLPack:
    """A tensor type Alloy knows nothing about: it speaks DLPack and nothing else."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_any_object_with_dlpack_is_an_input_and_gets_a_dlpack_result():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    transposed, same, computed = view_fusion().execute([OnlyDLPack(a)])
    assert hasattr(same, "__dlpack__")
    same = np.from_dlpack(same)
    assert np.shares_memory(same, a)
    np.testing.assert_allclose(np.from_dlpack(computed), np.exp(a), rtol=1e-6)


def test_numpy_results_for_numpy_inputs_of_every_dtype():
    for dtype in [np.float64, np.float32, np.float16, np.int64, np.int32, np.bool_]:
        a = (np.arange(6) % 3 == 1) if dtype is np.bool_ else np.arange(6).astype(dtype)
        fd = define([a], lambda fd, x: fd.ops.segment_set(x))
        (out,) = fd.execute([a])
        assert out.dtype == a.dtype and np.shares_memory(out, a)


def test_repeated_runs_build_one_plan():
    fd = view_fusion()
    for shape in [(2, 3), (2, 3), (7, 1), (2, 3)]:
        fd.execute([np.ones(shape, np.float32)])
    assert fd.compile_count == 1


# ---- what a caller's objects may do during a call ---------------------------------------------

def run_isolated(code):
    """Runs `code` in a fresh interpreter with this alloy importable and returns its output: a
    crash there fails this test rather than ending the suite."""
    path = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(alloy.__file__))), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


TWO_INPUTS = """
    import gc, numpy as np, alloy
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 3], name="x"); y = fd.define_tensor(shape=[-1, 3], name="y")
        fd.add_output(fd.ops.add(x, y))
        fd.add_output(fd.ops.permute(y, dims=[1, 0]))  # a view of y
    def churn():  # reuses freed memory: a dangling pointer now reads (or frees) someone else's
        gc.collect()
        return [np.full((2, 3), 7, np.float32) for _ in range(1000)]
"""


def test_an_input_list_emptied_by_a_dlpack_call_keeps_every_input_alive():
    # execute reads the inputs from its own copy of the sequence, so the list's items stay alive
    # while an input's __dlpack__ empties it, and outputs that view an input keep it alive after
    out = run_isolated(TWO_INPUTS + """
    class Clearer:
        def __init__(self, array, inputs):
            self.array, self.inputs = array, inputs
        def __dlpack__(self, *args, **kwargs):
            self.inputs.clear()
            gc.collect()
            return self.array.__dlpack__(*args, **kwargs)
        def __dlpack_device__(self):
            return (1, 0)
    inputs = []
    inputs.append(Clearer(np.ones((2, 3), np.float32), inputs))
    inputs.append(np.arange(6, dtype=np.float32).reshape(2, 3) * 1)
    total, view = fd.execute(inputs)
    junk = churn()
    print(np.from_dlpack(total).tolist(), np.from_dlpack(view).tolist())
    """)
    assert out.split() == "[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]] [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]".split()


def test_a_dlpack_capsule_is_consumed_once():
    # the same capsule for two inputs of one call, or again in a later call, is refused (taking it
    # twice would run its deleter twice); the first input's view stays valid
    out = run_isolated(TWO_INPUTS + """
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    capsule = a.__dlpack__()
    class Cached:  # hands back the one capsule it keeps
        def __dlpack__(self, *args, **kwargs):
            return capsule
        def __dlpack_device__(self):
            return (1, 0)
    for inputs in ([Cached(), Cached()], [capsule, capsule]):
        try:
            fd.execute(inputs)
        except alloy.Error as e:
            print(e)
    fresh = a.__dlpack__()
    total, view = fd.execute([a, fresh])
    try:
        fd.execute([a, fresh])
    except alloy.Error as e:
        print(e)
    del capsule, fresh, a
    junk = churn()
    print(view.tolist())
    """).splitlines()
    assert len(out) == 4
    assert out[0].startswith("input 'y' (argument 1): its DLPack capsule is the one input 'x' (argument 0) consumed in this call")
    assert "already consumed" in out[1] and out[1].startswith("input 'x' (argument 0)")
    assert out[2].startswith("input 'y' (argument 1): its DLPack capsule was already consumed") and "not a tensor" not in out[2]
    assert out[3] == "[[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]"
