"""Shared helpers of the Python suites: they test the module on PYTHONPATH (the build tree's
python/ under CTest, or an installed alloy)."""
import numpy as np
import pytest

import alloy


def define(inputs, body, name="case"):
    """A finished definition with one input per array or Python number of `inputs` (arrays by
    their shape and dtype; numbers as scalar inputs of their type) whose outputs are what
    body(fd, *values) returns (a value or a tuple)."""
    with alloy.FusionDefinition(name) as fd:
        values = []
        for a in inputs:
            if isinstance(a, np.ndarray):
                values.append(fd.define_tensor(shape=list(a.shape), dtype=a.dtype))
            else:
                values.append(fd.define_scalar(dtype=type(a)))
        outs = body(fd, *values)
        for out in outs if isinstance(outs, tuple) else (outs,):
            fd.add_output(out)
    return fd


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
