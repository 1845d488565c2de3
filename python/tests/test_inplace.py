"""In-place updates: fd.add_output(new, alias_input=x) writes the result into x's memory (an
optimizer step, running statistics), spelled `return new -> x` in the .fusion text."""
import os
import subprocess
import sys

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


# ---- read-only memory: never written, and views of it stay read-only ----------------------

def read_only_arrays(tmp_path):
    frozen = np.ones(5, np.float32)
    frozen.flags.writeable = False
    path = tmp_path / "param.bin"
    np.ones(5, np.float32).tofile(path)
    return {
        "writeable=False": frozen,
        "frombuffer(bytes)": np.frombuffer(np.ones(5, np.float32).tobytes(), np.float32),
        "memmap(mode='r')": np.memmap(path, dtype=np.float32, mode="r"),
    }


@pytest.mark.parametrize("kind", ["writeable=False", "frombuffer(bytes)"])
def test_an_in_place_update_of_read_only_memory_is_refused_naming_the_input(tmp_path, kind):
    param = read_only_arrays(tmp_path)[kind]
    with pytest.raises(alloy.Error, match=r"^input 'param' \(argument 0\): is read-only memory.*`return t2 -> param`"):
        sgd_step().execute([param, np.ones(5, np.float32)])
    np.testing.assert_array_equal(param, np.ones(5, np.float32))  # untouched


def test_an_in_place_update_of_a_read_only_memmap_is_an_error_not_a_crash(tmp_path):
    # a write into read-only pages kills the interpreter: run it in a child to see the crash as one
    code = (
        "import numpy as np, alloy, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from test_inplace import sgd_step\n"
        "param = np.memmap(sys.argv[1], dtype=np.float32, mode='r')\n"
        "try:\n"
        "    sgd_step().execute([param, np.ones(5, np.float32)])\n"
        "except alloy.Error as e:\n"
        "    print('alloy.Error:', e)\n"
    )
    path = tmp_path / "param.bin"
    np.ones(5, np.float32).tofile(path)
    here = os.path.dirname(os.path.abspath(__file__))
    child = subprocess.run([sys.executable, "-c", code, str(path), here], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, f"the interpreter died ({child.returncode}): {child.stderr}"
    assert "alloy.Error: input 'param' (argument 0): is read-only memory" in child.stdout
    np.testing.assert_array_equal(np.fromfile(path, np.float32), np.ones(5, np.float32))


def test_read_only_inputs_that_are_only_read_run(tmp_path):
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        fd.add_output(fd.ops.neg(x))
    for kind, array in read_only_arrays(tmp_path).items():
        (out,) = fd.execute([array])
        np.testing.assert_array_equal(out, -np.ones(5, np.float32), err_msg=kind)
        assert out.flags.writeable, kind  # a new buffer: Alloy's, the caller's to change


def test_an_output_viewing_a_read_only_input_comes_back_read_only(tmp_path):
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[5], dtype=alloy.float32)
        fd.add_output(fd.ops.reshape(x, shape=[1, 5]))  # a view of x
        fd.add_output(fd.ops.slice(x, starts=[1], ends=[4]))  # a view of x, inside it
        fd.add_output(fd.ops.exp(x))  # new memory
    for kind, array in read_only_arrays(tmp_path).items():
        view, part, computed = fd.execute([array])
        assert np.shares_memory(view, array) and np.shares_memory(part, array), kind
        assert not view.flags.writeable and not part.flags.writeable, kind
        assert computed.flags.writeable, kind
    writable = np.ones(5, np.float32)
    view, part, _ = fd.execute([writable])
    assert view.flags.writeable and part.flags.writeable  # views of writable memory stay writable


def test_outputs_are_the_values_before_the_in_place_write():
    # permute(x) and x itself beside `return exp(x) -> x`: both are x as it was (copied before the
    # write, not views of the updated memory), and validate's reference reads the inputs as given
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[2, 3], dtype=alloy.float32)
        fd.add_output(fd.ops.exp(x), alias_input=x)
        fd.add_output(fd.ops.permute(x, dims=[1, 0]))
        fd.add_output(x)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    old = a.copy()
    updated, transposed, same = fd.execute([a])
    np.testing.assert_allclose(a, np.exp(old), rtol=1e-6)
    np.testing.assert_array_equal(transposed, old.T)
    np.testing.assert_array_equal(same, old)
    assert not np.shares_memory(transposed, a) and not np.shares_memory(same, a)
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    fd.validate([b])  # raises alloy.ValidationError where a reference output differs
    np.testing.assert_allclose(b, np.exp(old), rtol=1e-6)  # validate ran the update once on b


# ---- the aliasing rule: an in-place target shares no memory with another input --------------

def test_a_target_overlapping_another_input_is_an_error_naming_both():
    fd = sgd_step()
    storage = np.ones(6, np.float32)
    for param, grad in [(storage[:5], storage[1:]), (storage, storage), (storage[:3], storage[3:0:-1])]:
        with pytest.raises(alloy.Error, match=r"input 'param': is updated in place \(`return t2 -> param`\) "
                                              r"but its memory overlaps input 'grad'"):
            fd.execute([param, grad])
    np.testing.assert_array_equal(storage, np.ones(6, np.float32))  # nothing was written
    # interleaved views share no element, but their byte spans meet: refused too (the rule is by span)
    with pytest.raises(alloy.Error, match="overlaps input 'grad'"):
        fd.execute([storage[0::2], storage[1::2]])
    fd.execute([storage[:3], storage[3:]])  # disjoint parts of one array are two inputs
    np.testing.assert_array_equal(storage, np.array([0.5, 0.5, 0.5, 1, 1, 1], np.float32))


def test_targets_overlapping_each_other_are_an_error():
    fd = alloy.parse("fusion s(a: f32[2], b: f32[2]) {\n  return b -> a, a -> b\n}")
    storage = np.array([1, 2, 3], np.float32)
    with pytest.raises(alloy.Error, match="input 'a': .* overlaps input 'b', which is also updated in place"):
        fd.execute([storage[:2], storage[1:]])
    np.testing.assert_array_equal(storage, [1, 2, 3])
    a, b = np.array([1, 2], np.float32), np.array([3, 4], np.float32)
    fd.execute([a, b])  # a swap of two arrays is fine
    np.testing.assert_array_equal(a, [3, 4])
    np.testing.assert_array_equal(b, [1, 2])


def test_a_target_with_a_zero_stride_is_an_error():
    fd = sgd_step()
    one = np.ones(1, np.float32)
    expanded = np.lib.stride_tricks.as_strided(one, shape=(5,), strides=(0,))  # writable, unlike broadcast_to
    with pytest.raises(alloy.Error, match=r"input 'param': is updated in place .* has stride 0 on axis 0 of size 5"):
        fd.execute([expanded, np.ones(5, np.float32)])
    assert one[0] == 1


def test_an_empty_target_with_zero_strides_runs():
    # NumPy 2 gives np.zeros((0, 3)) strides (0, 0): no element is written, so no two to one address
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(x + 1, alias_input=x)
    empty = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(0, 3), strides=(0, 0))
    (out,) = fd.execute([empty])
    assert out.shape == (0, 3)


def test_overlapping_inputs_that_are_only_read_run():
    fd = alloy.parse("fusion f(x: f32[3], a: f32[3], b: f32[3]) {\n  s = add(a, b)\n  return s -> x\n}")
    x, ab = np.zeros(3, np.float32), np.array([1, 2, 3, 4], np.float32)
    fd.execute([x, ab[:3], ab[1:]])
    np.testing.assert_array_equal(x, [3, 5, 7])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bf16_target_given_as_a_wider_array_is_an_error_naming_it(dtype):
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=alloy.bfloat16, name="x")
        fd.add_output(fd.ops.neg(x), alias_input=x)
    a = np.ones(3, dtype)
    with pytest.raises(alloy.Error, match=r"input 'x' \(argument 0\): is an f(32|64) array, but the fusion updates this bf16 "
                                          r"input in place"):
        fd.execute([a])
    np.testing.assert_array_equal(a, np.ones(3))
    # an input that is only read still takes a wider array (rounded)
    with alloy.FusionDefinition() as read:
        y = read.define_tensor(shape=[-1], dtype=alloy.bfloat16)
        read.add_output(read.ops.neg(y))
    (out,) = read.execute([a])
    np.testing.assert_array_equal(out, -np.ones(3, np.float32))


def test_outputs_viewing_the_target_see_the_old_values_however_the_memory_came():
    # once: x itself and a view of it are the values before the write (copied first); twice (the
    # same array as a second input) is refused by the rule above, so no output can see new values
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[3], dtype=alloy.float32, name="x")
        fd.add_output(fd.ops.mul(x, 2.0), alias_input=x)
        fd.add_output(fd.ops.slice(x, starts=[1], ends=[3]))
    a = np.array([1, 2, 3], np.float32)
    _, part = fd.execute([a])
    np.testing.assert_array_equal(a, [2, 4, 6])
    np.testing.assert_array_equal(part, [2, 3])
    with alloy.FusionDefinition() as twice:
        x = twice.define_tensor(shape=[3], dtype=alloy.float32, name="x")
        y = twice.define_tensor(shape=[3], dtype=alloy.float32, name="y")
        twice.add_output(twice.ops.mul(x, 2.0), alias_input=x)
        twice.add_output(y)
    b = np.array([1, 2, 3], np.float32)
    with pytest.raises(alloy.Error, match="input 'x': .* overlaps input 'y'"):
        twice.execute([b, b])
    np.testing.assert_array_equal(b, [1, 2, 3])


def test_a_sharded_target_of_another_layout_is_a_located_error():
    text = ("fusion f(p: f32[8] @mesh[0, 1] shard(axis=0), g: f32[8] @mesh[0, 1] replicated) {\n"
            "  y = add(g, 1.0)\n  return y -> p\n}")
    with pytest.raises(alloy.Error, match=r"<string>:3:10: return y -> p: 'y' is @mesh\[0, 1\] replicated .* but input 'p' is "
                                          r"@mesh\[0, 1\] shard\(axis=0\)"):
        alloy.parse(text).output_shardings
