"""In-place updates: fd.add_output(new, alias_input=x) writes the result into x's memory (an
optimizer step, running statistics), spelled `return new -> x` in the .fusion text."""
import numpy as np
import pytest

import alloy


def sgd_step():
    with alloy.FusionDefinition("sgd") as fd:
        p = fd.define_tensor(shape=[-1], dtype=alloy.float32, name="param")
        g = fd.define_tensor(shape=[-1], dtype=alloy.float32, name="grad")
        fd.add_output(fd.ops.sub(p, fd.ops.mul(g, 0.5)), alias_input=p)
        fd.add_output(fd.ops.sum(fd.ops.mul(g, g)))
    return fd


def test_alias_output_writes_into_the_input():
    fd = sgd_step()
    param, grad = np.ones(5, np.float32), np.arange(5, dtype=np.float32)
    updated, norm2 = fd.execute([param, grad])
    np.testing.assert_array_equal(param, 1 - 0.5 * np.arange(5, dtype=np.float32))
    assert np.shares_memory(updated, param)
    assert norm2 == pytest.approx(30.0)
    fd.execute([param, grad])  # again: a step from the updated values
    np.testing.assert_array_equal(param, 1 - np.arange(5, dtype=np.float32))


def test_alias_prints_as_an_arrow_and_parses_back():
    fd = sgd_step()
    text = str(fd)
    assert "return t2 -> param, t4" in text
    again = alloy.parse(text)
    assert str(again) == text
    param = np.zeros(3, np.float32)
    again.execute([param, np.ones(3, np.float32)])
    np.testing.assert_array_equal(param, np.full(3, -0.5, np.float32))


def test_strided_input_is_updated_in_place():
    fd = sgd_step()
    storage = np.zeros(10, np.float32)
    param = storage[::2]
    fd.execute([param, np.ones(5, np.float32)])
    np.testing.assert_array_equal(storage, np.array([-0.5, 0] * 5, np.float32))


def test_an_output_that_is_a_view_of_the_input_it_updates_is_read_before_written():
    with alloy.FusionDefinition() as fd:
        m = fd.define_tensor(shape=[3, 3], dtype=alloy.float64)
        fd.add_output(fd.ops.permute(m, dims=[1, 0]), alias_input=m)
    a = np.arange(9.0).reshape(3, 3)
    fd.execute([a])
    np.testing.assert_array_equal(a, np.arange(9.0).reshape(3, 3).T)


@pytest.mark.parametrize("text, message", [
    ("fusion f(x: f32[3], y: f32[4]) {\n  z = neg(y)\n  return z -> x\n}", "expected the same dtype and shape"),
    ("fusion f(x: f32[3]) {\n  z = cast(x, dtype=f64)\n  return z -> x\n}", "expected the same dtype and shape"),
    ("fusion f(x: f32[3]) {\n  z = neg(x)\n  w = exp(x)\n  return z -> x, w -> x\n}", "already updated by another output"),
    ("fusion f(x: f32[3]) {\n  z = neg(x)\n  w = exp(x)\n  return z -> w\n}", "not a tensor input"),
    ("fusion f(x: f32[3]) {\n  z = neg(x)\n  return z -> q\n}", "undefined value 'q'"),
    ("fusion f(x: f32[3]) {\n  z = neg(x)\n  return z -> 3\n}", "expected the name of the input to update"),
])
def test_bad_aliases_are_located_errors(text, message):
    with pytest.raises(alloy.Error, match=message) as error:
        alloy.parse(text)
    assert str(error.value).startswith(f"<string>:{text.count(chr(10)) }:")  # the return line


def test_symbolic_sizes_must_agree_at_run_time():
    fd = alloy.parse("fusion f(x: f32[N], y: f32[M]) {\n  z = neg(y)\n  return z -> x\n}")
    with pytest.raises(alloy.Error, match="x"):
        fd.execute([np.zeros(3, np.float32), np.zeros(4, np.float32)])


def test_alias_from_python_checks_at_definition_time():
    with pytest.raises(alloy.Error, match="expected the same dtype and shape"):
        with alloy.FusionDefinition() as fd:
            x = fd.define_tensor(shape=[3], dtype=alloy.float32)
            fd.add_output(fd.ops.sum(x), alias_input=x)
