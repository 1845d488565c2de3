"""Defining fusions from Python: define_tensor and define_scalar, fd.ops with the format's names
(positional and keyword), tuples for several results, operators on values, dtypes named as
torch names them, the .fusion text (str(fd), alloy.parse, alloy.load) and introspection."""
import re

import numpy as np
import pytest

import alloy
from conftest import define


def test_dtypes_are_module_attributes_named_like_torch():
    names = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "bool"]
    assert [getattr(alloy, n) for n in names] == [getattr(alloy.DataType, n) for n in names]
    assert len({getattr(alloy, n) for n in names}) == 7


def test_define_tensor_shapes_print_as_the_format_writes_them():
    with alloy.FusionDefinition("mlp") as fd:
        x = fd.define_tensor(shape=[-1, "S", 768], dtype=alloy.bfloat16, name="x")
        w = fd.define_tensor(shape=[3072, 768], dtype="bf16", contiguity=[True, True], stride_order=[1, 0], name="w")
        h = fd.ops.linear(x, w)
        fd.add_output(fd.ops.gelu(h, approximate="tanh"))
    text = str(fd)
    assert text.startswith("fusion mlp(x: bf16[?, S, 768], w: bf16[3072, 768]) {")
    assert 'gelu(t0, approximate="tanh")' in text
    assert x.shape == [-1, "S", 768] and x.dtype == alloy.bfloat16 and x.ndim == 3
    assert h.type == "bf16[?, S, 3072]"
    assert fd.name == "mlp"
    assert [v.name for v in fd.inputs] == ["x", "w"]
    assert [v.type for v in fd.outputs] == ["bf16[?, S, 3072]"]


def test_define_tensor_from_an_existing_array_takes_its_dtype_and_dynamic_sizes():
    a = np.zeros((4, 1, 3), np.int32)
    with alloy.FusionDefinition() as fd:
        t = fd.define_tensor(a)
        s = fd.define_tensor(a, static_sizes=True)
        fd.add_output(fd.ops.add(t, s))
    assert t.dtype == alloy.int32 and t.shape == [-1, 1, -1]
    assert s.shape == [4, 1, 3]
    (out,) = fd.execute([a + 1, a + 2])
    np.testing.assert_array_equal(out, a + 3)


def test_dtypes_from_numpy_and_python_types():
    with alloy.FusionDefinition() as fd:
        a = fd.define_tensor(shape=[2], dtype=np.float16)
        b = fd.define_tensor(shape=[2], dtype=np.dtype("int64"))
        c = fd.define_scalar(dtype=float)
        d = fd.define_scalar(dtype=int)
        fd.add_output(fd.ops.add(a, c))
        fd.add_output(fd.ops.mul(b, d))
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (alloy.float16, alloy.int64, alloy.float64, alloy.int64)
    assert c.is_scalar and not a.is_scalar
    out = fd.execute([np.array([1, 2], np.float16), np.array([3, 4]), 0.5, 3])
    np.testing.assert_array_equal(out[0], np.array([1.5, 2.5], np.float16))
    np.testing.assert_array_equal(out[1], np.array([9, 12]))


def test_define_scalar_with_a_value_is_a_literal():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[3], dtype=alloy.float32)
        eps = fd.define_scalar(1e-5)
        fd.add_output(fd.ops.add(x, eps))
    assert "add(T0, 1e-05)" in str(fd)
    (out,) = fd.execute([np.zeros(3, np.float32)])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.float32(1e-5))


def test_define_scalar_with_a_value_and_a_dtype_is_a_scalar_of_that_dtype():
    # as nvFuser's define_scalar(3, dtype=Float): the literal cast to the dtype, which then promotes
    # as a bare scalar of its category does
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[2], dtype=alloy.int32)
        three = fd.define_scalar(3, dtype=alloy.float32)
        truncated = fd.define_scalar(2.7, dtype=alloy.int32)
        rounded = fd.define_scalar(0.1, dtype=alloy.float32)
        assert (three.dtype, truncated.dtype, rounded.dtype) == (alloy.float32, alloy.int32, alloy.float32)
        assert three.is_scalar and truncated.is_scalar and rounded.is_scalar
        fd.add_output(fd.ops.add(x, three))
        fd.add_output(fd.ops.add(x, truncated))
        fd.add_output(rounded)
        fd.add_output(fd.ops.mul(fd.define_tensor(shape=[2], dtype=alloy.float16), fd.define_scalar(2, dtype="float64")))
    assert "cast(3, dtype=f32)" in str(fd) and "cast(2.7, dtype=i32)" in str(fd)
    inputs = [np.array([1, 2], np.int32), np.array([1, 2], np.float16)]
    for definition in (fd, alloy.parse(str(fd))):
        assert str(definition) == str(fd)
        float_sum, int_sum, tenth, half_product = definition.execute(inputs)
        assert float_sum.dtype == np.float32 and float_sum.tolist() == [4.0, 5.0]
        assert int_sum.dtype == np.int32 and int_sum.tolist() == [3, 4]
        assert tenth.dtype == np.float32 and tenth.shape == () and tenth == np.float32(0.1)
        assert half_product.dtype == np.float16 and half_product.tolist() == [2.0, 4.0]  # a scalar does not widen a tensor
    for value, dtype in [(3000000000, alloy.int32), (float("nan"), alloy.int64), (1e19, alloy.int64), (2.0**31, alloy.int32)]:
        with pytest.raises(alloy.Error, match=rf"define_scalar: {re.escape(repr(value))} does not fit"):
            alloy.FusionDefinition().define_scalar(value, dtype=dtype)
    with pytest.raises(alloy.Error, match="unsupported dtype"):
        alloy.FusionDefinition().define_scalar(1, dtype="complex64")


def test_several_results_come_back_as_a_tuple():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[2, 5], dtype=alloy.float64)
        result = fd.ops.var_mean(x, dims=[1], correction=0)
        assert isinstance(result, tuple) and len(result) == 2
        var, mean = result
        fd.add_output(var)
        fd.add_output(mean)
    a = np.arange(10.0).reshape(2, 5)
    var, mean = fd.execute([a])
    np.testing.assert_allclose(var, a.var(axis=1))
    np.testing.assert_allclose(mean, a.mean(axis=1))


def test_attributes_positionally_after_the_inputs():
    a = np.arange(24.0).reshape(2, 3, 4)
    fd = define([a], lambda fd, x: (fd.ops.sum(x, [1], True), fd.ops.permute(x, [2, 1, 0]), fd.ops.cast(x, alloy.int32)))
    s, p, c = fd.execute([a])
    np.testing.assert_array_equal(s, a.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(p, a.transpose(2, 1, 0))
    assert c.dtype == np.int32


def test_operators_on_values():
    a = np.array([1.0, -2.0, 3.0])
    fd = define([a, a], lambda fd, x, y: (x + y * 2, 1 - x, -x / 4, x ** 2, abs(x), 3.0 * x))
    outs = fd.execute([a, a + 1])
    expected = [a + (a + 1) * 2, 1 - a, -a / 4, a**2, np.abs(a), 3.0 * a]
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want)


def test_comparisons_on_values_are_elementwise_ops_and_have_no_truth_value():
    a, b = np.array([1.0, -2.0, 3.0]), np.array([1.0, 2.0, -3.0])
    fd = define([a, b], lambda fd, x, y: (x == y, x != y, x < 0, 0 < x, x >= y, fd.ops.where(x == y, 1.0, 0.0)))
    outs = fd.execute([a, b])
    expected = [a == b, a != b, a < 0, 0 < a, a >= b, np.where(a == b, 1.0, 0.0)]
    for got, want in zip(outs, expected):
        np.testing.assert_array_equal(got, want)
    assert outs[0].dtype == np.bool_
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[3])
        with pytest.raises(TypeError, match="truth value of an alloy.Value"):
            if x == 0:
                pass
        assert len({x, x}) == 1  # hashable, by identity
        fd.add_output(x)


def test_nvfuser_names_of_dtypes_and_arguments():
    assert alloy.DataType.Float is alloy.float32 and alloy.DataType.BFloat16 is alloy.bfloat16
    assert alloy.DataType.Half is alloy.float16 and alloy.DataType.Double is alloy.float64
    assert alloy.DataType.Int is alloy.int64 and alloy.DataType.Int32 is alloy.int32 and alloy.DataType.Bool is alloy.bool
    a = np.full((2, 3000), 30.0, dtype=np.float16)  # sums past f16's range: 90000
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=alloy.DataType.Half, is_cpu=False)
        fd.add_output(fd.ops.sum(x, dims=[1], keepdim=False, dtype=alloy.DataType.Float))
    (s,) = fd.execute([a])
    assert s.dtype == np.float32
    np.testing.assert_array_equal(s, np.full(2, 90000.0, dtype=np.float32))
    assert alloy.FusionDefinition().ops.iota.__doc__.startswith("iota(length, ")


def test_var_mean_and_var_default_to_bessels_correction_as_torch_and_nvfuser_do():
    a = np.arange(10.0).reshape(2, 5) ** 2
    fd = define([a], lambda fd, x: (*fd.ops.var_mean(x, [1]), fd.ops.var(x, [1]), fd.ops.var_mean(x, [1], 0)[0],
                                    fd.ops.var(x, dims=[1], correction=0, keepdim=True)))
    var, mean, var_only, population, population_kept = fd.execute([a])
    np.testing.assert_allclose(var, a.var(axis=1, ddof=1))
    np.testing.assert_allclose(mean, a.mean(axis=1))
    np.testing.assert_allclose(var_only, a.var(axis=1, ddof=1))
    np.testing.assert_allclose(population, a.var(axis=1))
    np.testing.assert_allclose(population_kept, a.var(axis=1, keepdims=True))
    assert "correction=1" in str(fd)  # the text states it: the format's own default stays 0
    text = "fusion f(x: f64[2, 5]) {\n  v, m = var_mean(x, dims=[1])\n  return v\n}"
    np.testing.assert_allclose(alloy.parse(text).execute([a])[0], a.var(axis=1))
    assert "correction=1" in alloy.FusionDefinition().ops.var_mean.__doc__


def test_nvfuser_keyword_names_of_slice_and_dtype_of_max_and_min():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    fd = define([a], lambda fd, x: (fd.ops.slice(x, start_indices=[0, 1], end_indices=[3, 4], strides=[2, 2]),
                                    fd.ops.max(x, [1], False, dtype=alloy.float64), fd.ops.min(x, dims=[0], dtype=alloy.float64)))
    sliced, largest, smallest = fd.execute([a])
    np.testing.assert_array_equal(sliced, a[0:3:2, 1:4:2])
    assert largest.dtype == np.float64 and smallest.dtype == np.float64
    np.testing.assert_array_equal(largest, a.max(axis=1))
    np.testing.assert_array_equal(smallest, a.min(axis=0))
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[4])
        with pytest.raises(TypeError, match="attribute 'starts' twice"):
            fd.ops.slice(x, starts=[0], start_indices=[1], ends=[2])
        fd.add_output(x)


def test_define_tensor_takes_nvfusers_symbolic_sizes():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(symbolic_sizes=[-1, 1, 3], contiguity=[True, None, True], dtype=alloy.DataType.Float)
        y = fd.define_tensor([2, -1], symbolic_sizes=[2, -1])  # both, agreeing: accepted
        fd.add_output(x * 2)
        fd.add_output(y)
    assert x.type == "f32[?, 1, 3]" and y.type == "f32[2, ?]"
    a = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    np.testing.assert_array_equal(fd.execute([a, np.ones((2, 5), np.float32)])[0], a * 2)


def test_value_size_and_a_callable_shape_as_nvfuser_writes_them():
    a = np.arange(24.0).reshape(2, 3, 4)
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=["B", -1, 4], dtype=alloy.float64)
        assert x.shape == ["B", -1, 4] and x.shape() == ["B", -1, 4] and isinstance(x.shape, list)
        assert (x.size(0), x.size(2), x.size(-1)) == ("B", 4, 4)
        assert fd.ops.size(x, 0) == "B"
        fd.add_output(fd.ops.reshape(x, [x.size(0), -1]))
    np.testing.assert_array_equal(fd.execute([a])[0], a.reshape(2, 12))


def test_logical_operators_on_bool_values():
    a, b = np.array([-2.0, -0.5, 0.5, 3.0]), np.array([[1.0], [-1.0]])
    fd = define([a, b], lambda fd, x, y: ((x > 0) & (y > 0), (x > 0) | (x < -1), (x > 0) ^ (y > 0), ~(x > 0),
                                          True & (x > 0), (x > 0) | False, np.bool_(True) ^ (x > 0), +x))
    outs = fd.execute([a, b])
    expected = [(a > 0) & (b > 0), (a > 0) | (a < -1), (a > 0) ^ (b > 0), ~(a > 0), a > 0, a > 0, ~(a > 0), a]
    for got, want in zip(outs, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[4], dtype=alloy.float32, name="x")
        for use, found in [(lambda: x & (x > 0), "x: f32"), (lambda: (x > 0) | 1, "int 1"), (lambda: ~x, "x: f32"),
                           (lambda: 1.5 ^ (x > 0), "float 1.5")]:
            with pytest.raises(TypeError, match=f"logical, for bool values only; found {found}"):
                use()
        fd.add_output(x)


def test_layer_norm_with_a_bias_and_no_weight_is_torchs():
    rng = np.random.default_rng(5)
    x, b = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    fd = define([x, b], lambda fd, x, b: fd.ops.layer_norm(x, None, b, normalized_ndim=1, eps=1e-5))
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    np.testing.assert_allclose(fd.execute([x, b])[0], (x - mean) / np.sqrt(var + 1e-5) + b, rtol=1e-5, atol=1e-5)


def test_optional_inputs_left_out_with_none():
    a, w = np.ones((2, 4)), np.ones((3, 4))
    fd = define([a, w], lambda fd, x, w: fd.ops.linear(x, w, None))
    np.testing.assert_allclose(fd.execute([a, w])[0], np.full((2, 3), 4.0))


def test_op_docstrings_give_the_format_signature():
    assert "sum(" in alloy.FusionDefinition().ops.sum.__doc__
    assert "keepdim=False" in alloy.FusionDefinition().ops.sum.__doc__
    assert "dtype" in alloy.FusionDefinition().ops.cast.__doc__
    assert "all_gather" not in alloy.op_names()  # resharding ops are inserted by passes, not written


def test_print_parse_round_trip_gives_the_same_text_and_results():
    a = np.linspace(-1, 1, 12).reshape(3, 4)
    fd = define([a], lambda fd, x: fd.ops.softmax(fd.ops.mul(x, 3), dim=-1))
    again = alloy.parse(str(fd))
    assert str(again) == str(fd)
    np.testing.assert_allclose(again.execute([a])[0], fd.execute([a])[0])


def test_load_reads_a_fusion_file(tmp_path):
    path = tmp_path / "two.fusion"
    path.write_text("fusion first(x: f32[2]) {\n  y = neg(x)\n  return y\n}\n"
                    "fusion second(x: f32[2]) {\n  y = exp(x)\n  return y\n}\n")
    assert alloy.load(path).name == "first"
    second = alloy.load(str(path), name="second")
    np.testing.assert_allclose(second.execute([np.zeros(2, np.float32)])[0], np.ones(2, np.float32))


def test_every_single_device_example_loads_and_runs():
    import pathlib
    examples = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples").glob("*.fusion"))
    assert examples
    rng = np.random.default_rng(0)
    for path in examples:
        if "@mesh" in path.read_text():
            continue  # a mesh of several devices runs under mpirun
        fd = alloy.load(path)
        inputs = []
        for v in fd.inputs:
            shape = [d if isinstance(d, int) and d >= 0 else 4 for d in v.shape]
            if v.dtype == alloy.bool:
                inputs.append(rng.random(shape) < 0.5)
            elif v.dtype in (alloy.int64, alloy.int32):
                inputs.append(rng.integers(0, 4, shape).astype(np.int64 if v.dtype == alloy.int64 else np.int32))
            else:  # f32 arrays feed bf16 inputs too
                dtype = {alloy.float64: np.float64, alloy.float16: np.float16}.get(v.dtype, np.float32)
                inputs.append(rng.standard_normal(shape).astype(dtype))
        outputs = fd.execute(inputs)
        assert len(outputs) == len(fd.outputs), path.name
        assert all(isinstance(o, np.ndarray) for o in outputs)


def test_dump_prints_the_stages():
    a = np.ones((2, 3), np.float32)
    fd = define([a], lambda fd, x: fd.ops.exp(x))
    assert fd.dump("ir") == str(fd)
    assert "segment 0" in fd.dump("segments", [a])
    assert "Launch segment 0 [cpu_reference]" in fd.dump("program", [a])
    assert "no generated CUDA" in fd.dump("cuda", [a])
    assert "no mesh" in fd.dump("sharding", [a])
    with pytest.raises(alloy.Error, match="unknown stage"):
        fd.dump("bogus", [a])


def test_validate_passes_and_reports_mismatches():
    a = np.linspace(0, 1, 6, dtype=np.float32)
    fd = define([a], lambda fd, x: fd.ops.exp(x))
    fd.validate([a])
    fd.validate([a], [np.exp(a)])
    with pytest.raises(alloy.ValidationError, match="elements differ"):
        fd.validate([a], [np.exp(a) + 0.01])


def test_compile_count_is_one_for_repeated_runs_and_new_sizes():
    with alloy.FusionDefinition() as fd:
        fd.add_output(fd.ops.sum(fd.define_tensor(shape=[-1, 3], dtype=alloy.float64), dims=[1]))
    assert fd.compile_count == 0
    for rows in [2, 2, 5, 1, 5]:
        fd.execute([np.ones((rows, 3))])
    assert fd.compile_count == 1


def test_execute_is_callable_directly():
    fd = define([np.ones(2)], lambda fd, x: fd.ops.neg(x))
    np.testing.assert_array_equal(fd([np.ones(2)])[0], -np.ones(2))


def test_settings_are_listed_set_and_checked():
    import alloy
    settings = alloy.settings()
    assert settings["ALLOY_NO_SIDE_STREAM"] == "0" and settings["ALLOY_MATMUL_AUTOTUNE"] == "8"
    alloy.set_setting("NO_SIDE_STREAM", True)
    try:
        assert alloy.settings()["ALLOY_NO_SIDE_STREAM"] == "1"
    finally:
        alloy.set_setting("ALLOY_NO_SIDE_STREAM", 0)
    assert alloy.settings()["ALLOY_NO_SIDE_STREAM"] == "0"
    with pytest.raises(alloy.Error, match="ALLOY_MATMUL_AUTOTUNE='0': expected an integer from 1 to 32"):
        alloy.set_setting("MATMUL_AUTOTUNE", 0)
    with pytest.raises(alloy.Error, match="no setting 'NOPE'"):
        alloy.set_setting("NOPE", 1)


# ---- NumPy scalars are numbers wherever a Python number is ----------------------------------

def definition_text(number, make):
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[2, 3], dtype=alloy.float32, name="x")
        i = fd.define_tensor(shape=[2, 3], dtype=alloy.int64, name="i")
        for out in make(fd, x, i, number):
            fd.add_output(out)
    return str(fd)


@pytest.mark.parametrize("python_number, numpy_number", [
    (2.0, np.float32(2.0)), (2.5, np.float64(2.5)), (0.5, np.float16(0.5)),
    (3, np.int64(3)), (3, np.int32(3)), (True, np.bool_(True)),
])
def test_numpy_scalars_are_literals_of_their_kind(python_number, numpy_number):
    def make(fd, x, i, n):
        return fd.ops.mul(x, n), fd.ops.add(i, n), fd.ops.where(fd.ops.gt(x, 0), n, x), x * n, n - i, fd.define_scalar(n) + x
    assert definition_text(numpy_number, make) == definition_text(python_number, make)


@pytest.mark.parametrize("make", [
    lambda fd, x, i, n: [fd.ops.sum(x, dims=n)],
    lambda fd, x, i, n: [fd.ops.sum(x, dims=[n], keepdim=np.bool_(True))],
    lambda fd, x, i, n: [fd.ops.permute(x, dims=[n, np.int32(0)])],
    lambda fd, x, i, n: [fd.ops.reshape(x, shape=[np.int64(3), n + 1])],
    lambda fd, x, i, n: [fd.ops.unsqueeze(x, n)],
])
def test_numpy_integers_in_attributes_and_lists(make):
    assert definition_text(np.int64(1), make) == definition_text(1, make)


def test_numpy_scalars_run_as_literals_and_as_scalar_inputs():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[3], dtype=alloy.int64)
        flag = fd.define_scalar(dtype=alloy.bool)
        scale = fd.define_scalar(dtype=alloy.float32)
        fd.add_output(fd.ops.where(flag, fd.ops.mul(x, np.int64(3)), x))
        fd.add_output(fd.ops.mul(x, scale))
        fd.add_output(fd.ops.mul(x, np.float32(0.5)))
    a = np.arange(3)
    tripled, doubled, halved = fd.execute([a, np.bool_(True), np.float32(2.0)])
    np.testing.assert_array_equal(tripled, a * 3)
    assert tripled.dtype == np.int64
    np.testing.assert_allclose(doubled, a * 2.0)
    np.testing.assert_allclose(halved, a * 0.5)
    np.testing.assert_array_equal(fd.execute([a, np.bool_(False), np.float32(2.0)])[0], a)


def test_complex_numpy_scalars_are_not_numbers():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[3], dtype=alloy.float32)
        with pytest.raises(alloy.Error, match="expected a value of this definition or a number"):
            fd.ops.add(x, np.complex64(1j))


# ---- define_tensor's layout hints ------------------------------------------------------------

def test_layout_hints_as_nvfuser_writes_them_are_accepted_and_any_layout_runs():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, 1], dtype=alloy.float32, contiguity=[True, False, None], stride_order=[1, 2, 0])
        fd.add_output(fd.ops.neg(x))
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3, 1)
    np.testing.assert_array_equal(fd.execute([a])[0], -a)  # row-major, not the hinted layout: it runs
    np.testing.assert_array_equal(fd.execute([np.asfortranarray(a)])[0], -a)


@pytest.mark.parametrize("hints, message", [
    (dict(stride_order=[5, 7]), r"stride_order must be a permutation of 0\.\.1"),
    (dict(stride_order=[0, 0]), "stride_order must be a permutation"),
    (dict(stride_order=[1.0, 0.0]), "stride_order must be a permutation"),
    (dict(stride_order=[True, False]), "stride_order must be a permutation"),
    (dict(stride_order=[0]), "stride_order has 1 entries for a tensor of rank 2"),
    (dict(contiguity=[True, 1]), r"contiguity\[1\] must be True, False or None, found 1"),
    (dict(contiguity=["yes", True]), r"contiguity\[0\] must be True, False or None"),
    (dict(contiguity=True), "contiguity must be a list with one entry per axis"),
])
def test_bad_layout_hints_are_located_errors_at_definition(hints, message):
    with pytest.raises(alloy.Error, match=message) as error:
        alloy.FusionDefinition().define_tensor(shape=[2, 3], dtype=alloy.float32, **hints)
    assert str(error.value).startswith(f"{__file__}:")


# ---- executor options per definition ---------------------------------------------------------

def test_options_are_set_per_definition_and_read_back():
    assert alloy.FusionDefinition().options == {"pipeline": "auto", "poison_outputs": False, "agreement": "every_run"}
    fd = alloy.FusionDefinition(options={"pipeline": "chunks=4", "poison_outputs": True})
    assert fd.options == {"pipeline": "chunks=4", "poison_outputs": True, "agreement": "every_run"}
    text = "fusion f(x: f32[3]) {\n  y = exp(x)\n  return y\n}"
    assert alloy.parse(text, options={"pipeline": "ring"}).options["pipeline"] == "ring"


def test_agreement_option_is_every_run_or_on_change():
    fd = alloy.FusionDefinition(options={"agreement": "on_change"})
    assert fd.options["agreement"] == "on_change"
    with fd:
        x = fd.define_tensor(shape=[3], dtype=alloy.float32)
        fd.add_output(fd.ops.exp(x))
    np.testing.assert_allclose(fd.execute([np.zeros(3, np.float32)])[0], np.ones(3))  # a job of one: nothing to agree on
    for bad in ("sometimes", 1, None):
        with pytest.raises(alloy.Error, match='agreement: expected "every_run" or "on_change"'):
            alloy.FusionDefinition(options={"agreement": bad})


def test_load_takes_options(tmp_path):
    path = tmp_path / "f.fusion"
    path.write_text("fusion f(x: f32[3]) {\n  y = exp(x)\n  return y\n}\n")
    fd = alloy.load(path, options={"pipeline": "off", "poison_outputs": np.bool_(True)})
    assert fd.options == {"pipeline": "off", "poison_outputs": True, "agreement": "every_run"}
    np.testing.assert_allclose(fd.execute([np.zeros(3, np.float32)])[0], np.ones(3))


def test_poisoned_outputs_still_hold_every_result():
    with alloy.FusionDefinition(options={"poison_outputs": True}) as fd:
        x = fd.define_tensor(shape=[4, 8], dtype=alloy.float32)
        fd.add_output(fd.ops.sum(fd.ops.exp(x), dims=[1]))
    a = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_allclose(fd.execute([a])[0], np.exp(a).sum(axis=1), rtol=1e-5)
    fd.validate([a])
