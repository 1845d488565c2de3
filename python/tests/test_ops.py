"""Every op of the .fusion format through fd.ops on the CPU, against results computed here with
NumPy (independently of Alloy's reference kernels). The last test checks that every op under
fd.ops has a case here, so a new op needs one."""
import math

import numpy as np
import pytest

import alloy
from conftest import define

COVERED = set()
CASES = []


def case(op, inputs, body, expected, rtol=1e-12, atol=1e-12):
    COVERED.add(op)
    CASES.append(pytest.param(inputs, body, expected, rtol, atol, id=f"{op}-{len(CASES)}"))


R = np.random.default_rng(7)


def normal(*shape, dtype=np.float64):
    return R.standard_normal(shape).astype(dtype)


def positive(*shape, dtype=np.float64):
    return (np.abs(R.standard_normal(shape)) + 0.5).astype(dtype)


erf = np.vectorize(math.erf)
K = math.sqrt(2 / math.pi)


def gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(K * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_grad(x, approximate="none"):
    if approximate == "tanh":
        t = np.tanh(K * (x + 0.044715 * x**3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


# ---- pointwise -------------------------------------------------------------------------

x = normal(3, 4)
p = positive(3, 4)
UNARY = {
    "neg": (x, lambda a: -a), "abs": (x, np.abs), "exp": (x, np.exp), "log": (p, np.log), "sqrt": (p, np.sqrt),
    "rsqrt": (p, lambda a: 1 / np.sqrt(a)), "tanh": (x, np.tanh), "sigmoid": (x, lambda a: 1 / (1 + np.exp(-a))),
    "relu": (x, lambda a: np.maximum(a, 0)), "silu": (x, lambda a: a / (1 + np.exp(-a))), "erf": (x, erf),
    "reciprocal": (p, lambda a: 1 / a),
}
for name, (a, fn) in UNARY.items():
    case(name, [a], lambda fd, v, name=name: getattr(fd.ops, name)(v), [fn(a)])
case("gelu", [x], lambda fd, v: fd.ops.gelu(v), [gelu(x)])
case("gelu", [x], lambda fd, v: fd.ops.gelu(v, approximate="tanh"), [gelu(x, "tanh")])

y = normal(4)  # broadcasts along the rows
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum, "minimum": np.minimum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}
for name, fn in BINARY.items():
    case(name, [x, y], lambda fd, a, b, name=name: getattr(fd.ops, name)(a, b), [fn(x, y)])
case("eq", [x], lambda fd, a: fd.ops.eq(a, a), [np.ones((3, 4), bool)])
case("pow", [p, y], lambda fd, a, b: fd.ops.pow(a, b), [np.power(p, y)])
case("pow", [p], lambda fd, a: a ** 2, [p**2])
# a Python number is a literal: it does not promote an f32 tensor
x32 = normal(3, 4, dtype=np.float32)
case("mul", [x32], lambda fd, a: fd.ops.mul(a, 0.5), [x32 * np.float32(0.5)], rtol=1e-7, atol=0)
case("add", [x32, x], lambda fd, a, b: fd.ops.add(a, b), [x32.astype(np.float64) + x])  # f32 + f64 -> f64
case("sub", [x, 2.5], lambda fd, a, s: fd.ops.sub(a, s), [x - 2.5])  # a scalar input
i32 = R.integers(-5, 5, (3, 4)).astype(np.int32)
case("add", [i32, i32], lambda fd, a, b: a + b, [i32 + i32], rtol=0, atol=0)
case("div", [i32], lambda fd, a: fd.ops.div(a, 2), [(i32 / 2).astype(np.float32)])  # PyTorch: integer / integer -> the default float, f32
cond = x > 0
case("where", [cond, x, y], lambda fd, c, a, b: fd.ops.where(c, a, b), [np.where(cond, x, y)])
case("where", [cond, x], lambda fd, c, a: fd.ops.where(c, a, 0.0), [np.where(cond, x, 0.0)])
case("cast", [x], lambda fd, a: fd.ops.cast(a, dtype=alloy.float32), [x.astype(np.float32)], rtol=0, atol=0)
case("cast", [x * 3], lambda fd, a: fd.ops.cast(a, np.int32), [np.trunc(x * 3).astype(np.int32)], rtol=0, atol=0)
case("cast", [x], lambda fd, a: fd.ops.cast(a, "bool"), [x != 0], rtol=0, atol=0)
dy = normal(3, 4)
case("gelu_backward", [dy, x], lambda fd, g, a: fd.ops.gelu_backward(g, a), [dy * gelu_grad(x)], rtol=1e-10, atol=1e-12)
case("gelu_backward", [dy, x], lambda fd, g, a: fd.ops.gelu_backward(g, a, approximate="tanh"), [dy * gelu_grad(x, "tanh")],
     rtol=1e-10, atol=1e-12)
case("relu_backward", [dy, x], lambda fd, g, a: fd.ops.relu_backward(g, a), [np.where(x > 0, dy, 0.0)])


def relu_mask_bits(v):
    """Bit j of i32 word k of a row: v[..., 32k + j] > 0, the row padded with zero bits."""
    bits = v > 0
    bits = np.concatenate([bits, np.zeros(bits.shape[:-1] + ((-bits.shape[-1]) % 32,), bool)], axis=-1)
    return np.packbits(bits, axis=-1, bitorder="little").view("<u4").view(np.int32)


def mask_bit(mask, n):
    """Each element's bit of a relu_mask-packed i32 mask, for rows of n elements."""
    words = mask.view(np.uint32)
    columns = np.arange(n)
    return ((words[..., columns // 32] >> (columns % 32).astype(np.uint32)) & 1).astype(bool)


xm = normal(2, 3, 40)
case("relu_mask", [xm], lambda fd, a: fd.ops.relu_mask(a), [relu_mask_bits(xm)], rtol=0, atol=0)
saved = R.integers(-2**31, 2**31, (2, 3, 2)).astype(np.int32)  # padding bits set too: ignored
dm = normal(2, 3, 40)
case("relu_backward_mask", [dm, saved], lambda fd, g, m: fd.ops.relu_backward_mask(g, m),
     [np.where(mask_bit(saved, 40), dm, 0.0)], rtol=0, atol=0)

# ---- reductions ------------------------------------------------------------------------

r = normal(2, 3, 4)
case("sum", [r], lambda fd, a: fd.ops.sum(a, dims=[1]), [r.sum(axis=1)])
case("sum", [r], lambda fd, a: fd.ops.sum(a, [0, 2], keepdim=True), [r.sum(axis=(0, 2), keepdims=True)])
case("sum", [r], lambda fd, a: fd.ops.sum(a), [r.sum()])
case("max", [r], lambda fd, a: fd.ops.max(a, dims=[0]), [r.max(axis=0)])
case("min", [r], lambda fd, a: fd.ops.min(a, dims=-1), [r.min(axis=-1)])
case("mean", [r], lambda fd, a: fd.ops.mean(a, dims=[2], keepdim=True), [r.mean(axis=2, keepdims=True)])
case("var_mean", [r], lambda fd, a: fd.ops.var_mean(a, dims=[2], correction=0), [r.var(axis=2), r.mean(axis=2)])
case("var_mean", [r], lambda fd, a: fd.ops.var_mean(a, [2]), [r.var(axis=2, ddof=1), r.mean(axis=2)])  # torch's default: 1
case("var_mean", [r], lambda fd, a: fd.ops.var_mean(a, dims=[0, 1], correction=1, keepdim=True),
     [r.var(axis=(0, 1), ddof=1, keepdims=True), r.mean(axis=(0, 1), keepdims=True)])

# ---- composed from the format's ops (nvFuser's names) ------------------------------------

case("var", [r], lambda fd, a: fd.ops.var(a, [2]), [r.var(axis=2, ddof=1)])
case("var", [r], lambda fd, a: fd.ops.var(a, dims=[0, 1], correction=0, keepdim=True), [r.var(axis=(0, 1), keepdims=True)])
xn = x.copy()
xn[0, 1], xn[2, 3] = np.nan, np.nan
case("clamp", [xn], lambda fd, a: fd.ops.clamp(a, -0.5, 0.5), [np.clip(xn, -0.5, 0.5)])  # NaN stays NaN, as in torch
case("clamp", [xn], lambda fd, a: fd.ops.clamp(a, min=0.25), [np.maximum(xn, 0.25)])
case("clamp", [xn], lambda fd, a: fd.ops.clamp(a, max=0.25), [np.minimum(xn, 0.25)])
case("clamp", [x], lambda fd, a: fd.ops.clamp(a, 1.0, -1.0), [np.full((3, 4), -1.0)])  # min > max: max, as torch
case("clamp", [i32], lambda fd, a: fd.ops.clamp(a, -2, 2), [np.clip(i32, -2, 2)], rtol=0, atol=0)
case("isnan", [xn], lambda fd, a: fd.ops.isnan(a), [np.isnan(xn)], rtol=0, atol=0)
case("isnan", [i32], lambda fd, a: fd.ops.isnan(a), [np.zeros((3, 4), bool)], rtol=0, atol=0)
b3 = np.array([0.5, -1.0, 2.0])
case("broadcast", [b3], lambda fd, a: fd.ops.broadcast(a, [True, False, True]), [b3[None, :, None]])
case("broadcast", [b3], lambda fd, a: fd.ops.broadcast(a, [False]), [b3])
case("size", [r], lambda fd, a: fd.ops.reshape(a, shape=[fd.ops.size(a, 0), -1]), [r.reshape(2, -1)])

# ---- shape -----------------------------------------------------------------------------

v3 = normal(3)
case("broadcast_in_dim", [v3], lambda fd, a: fd.ops.broadcast_in_dim(a, shape=[2, 3], broadcast_dims=[1]),
     [np.broadcast_to(v3, (2, 3))])
row = normal(1, 3)
case("expand", [row], lambda fd, a: fd.ops.expand(a, shape=[4, 3]), [np.broadcast_to(row, (4, 3))])
case("reshape", [r], lambda fd, a: fd.ops.reshape(a, shape=[6, -1]), [r.reshape(6, -1)])
case("permute", [r], lambda fd, a: fd.ops.permute(a, dims=[2, 0, 1]), [r.transpose(2, 0, 1)])
s = normal(5, 6)
case("slice", [s], lambda fd, a: fd.ops.slice(a, starts=[1, 0], ends=[4, 6], steps=[2, 3]), [s[1:4:2, 0:6:3]])
case("slice", [s], lambda fd, a: fd.ops.slice(a, [0, 2], [5, 5]), [s[:, 2:5]])
q = normal(1, 3, 1)
case("squeeze", [q], lambda fd, a: fd.ops.squeeze(a, dims=[0]), [q.reshape(3, 1)])
case("squeeze", [q], lambda fd, a: fd.ops.squeeze(a), [q.reshape(3)])
case("squeeze", [q], lambda fd, a: fd.ops.squeeze(a, dims=[]), [q])  # torch.squeeze(x, dim=()): no axis named
case("unsqueeze", [x], lambda fd, a: fd.ops.unsqueeze(a, dim=1), [x[:, None, :]])
x2 = normal(3, 2)
case("cat", [x, x2], lambda fd, a, b: fd.ops.cat(a, b, dim=1), [np.concatenate([x, x2], axis=1)])
case("cat", [x, x2, x], lambda fd, a, b, c: fd.ops.cat([a, b, c], -1), [np.concatenate([x, x2, x], axis=-1)])

# ---- indexing --------------------------------------------------------------------------

g2 = normal(3, 5)
gi = np.array([[4, 0], [1, 1], [0, 3]], np.int64)
case("gather", [g2, gi], lambda fd, a, i: fd.ops.gather(a, i, dim=1), [np.take_along_axis(g2, gi, axis=1)])
gi0 = np.array([[2, 0, 1, 1, 0]], np.int32)  # shorter than x off the axis, an i32 index
case("gather", [g2, gi0], lambda fd, a, i: fd.ops.gather(a, i, 0), [np.take_along_axis(g2, gi0.astype(np.int64), axis=0)])
g3 = normal(2, 4, 3)
gi3 = R.integers(0, 3, (2, 4, 6)).astype(np.int64)  # longer than x along the axis
case("gather", [g3, gi3], lambda fd, a, i: fd.ops.gather(a, i, dim=-1), [np.take_along_axis(g3, gi3, axis=-1)])
case("iota", [x], lambda fd, a: fd.ops.iota(7), [np.arange(7, dtype=np.int64)])
case("iota", [x], lambda fd, a: fd.ops.iota(length=4, dtype=alloy.float32), [np.arange(4, dtype=np.float32)])
case("iota", [x], lambda fd, a: fd.ops.iota(5, "i32"), [np.arange(5, dtype=np.int32)])
# nvFuser's iota(length, start, step, dtype): start + i * step
case("iota", [x], lambda fd, a: fd.ops.iota(4, 2, 3), [np.arange(2, 14, 3, dtype=np.int64)])
case("iota", [x], lambda fd, a: fd.ops.iota(3, start=1.5, step=0.5, dtype=alloy.float32), [np.array([1.5, 2.0, 2.5], np.float32)])

# ---- matmul ----------------------------------------------------------------------------

ma, mb = normal(2, 3, 4), normal(4, 5)
case("matmul", [ma, mb], lambda fd, a, b: fd.ops.matmul(a, b), [ma @ mb], rtol=1e-12, atol=1e-12)
vec = normal(4)
case("matmul", [ma, vec], lambda fd, a, b: fd.ops.matmul(a, b), [ma @ vec])
w, bias = normal(5, 4), normal(5)
case("linear", [ma, w], lambda fd, a, b: fd.ops.linear(a, b), [ma @ w.T])
case("linear", [ma, w, bias], lambda fd, a, b, c: fd.ops.linear(a, b, c), [ma @ w.T + bias])

# ---- composites and control --------------------------------------------------------------

z = normal(3, 8)
e = np.exp(z - z.max(axis=1, keepdims=True))
case("softmax", [z], lambda fd, a: fd.ops.softmax(a, dim=1), [e / e.sum(axis=1, keepdims=True)])
lw, lb = normal(8), normal(8)
mu, var = z.mean(axis=1, keepdims=True), z.var(axis=1, keepdims=True)
case("layer_norm", [z, lw, lb], lambda fd, a, b, c: fd.ops.layer_norm(a, b, c, normalized_ndim=1, eps=1e-5),
     [(z - mu) / np.sqrt(var + 1e-5) * lw + lb], rtol=1e-10, atol=1e-10)
case("layer_norm", [z], lambda fd, a: fd.ops.layer_norm(a), [(z - mu) / np.sqrt(var + 1e-5)], rtol=1e-10, atol=1e-10)
case("rms_norm", [z, lw], lambda fd, a, b: fd.ops.rms_norm(a, b, eps=1e-6),
     [z / np.sqrt((z * z).mean(axis=1, keepdims=True) + 1e-6) * lw], rtol=1e-10, atol=1e-10)
case("segment_set", [x], lambda fd, a: fd.ops.segment_set(a), [x])


@pytest.mark.parametrize("inputs, body, expected, rtol, atol", CASES)
def test_op_matches_numpy(inputs, body, expected, rtol, atol):
    fd = define(inputs, body)
    outputs = fd.execute(inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        assert isinstance(got, np.ndarray)
        want = np.asarray(want)
        assert got.dtype == want.dtype, f"{got.dtype} vs {want.dtype}\n{fd}"
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=str(fd))


def test_every_op_under_fd_ops_has_a_case():
    assert set(alloy.op_names()) - COVERED == set()


def test_a_bf16_chain_rounds_like_numpy_emulating_bf16():
    # NumPy has no bf16: f32 arrays feed a bf16 input (rounded) and bf16 results come back as f32
    a = np.array([1.0, 1.0 + 2**-9, 3.0, -2.5], np.float32)
    fd = define([a], lambda fd, v: fd.ops.mul(v, 2.0))
    fd = alloy.parse(str(fd).replace("f32", "bf16"))
    (out,) = fd.execute([a])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array([2.0, 2.0, 6.0, -5.0], np.float32))


def test_iota_of_a_size_symbol_and_a_one_hot_row_against_numpy():
    logits = normal(4, 6)
    target = np.array([5, 0, 2, 2], np.int64)
    with alloy.FusionDefinition("one_hot") as fd:
        x = fd.define_tensor(shape=["T", "V"], dtype=alloy.float64)
        t = fd.define_tensor(shape=["T"], dtype=alloy.int64)
        u = fd.ops.unsqueeze(t, dim=1)
        ids = fd.ops.iota("V")
        hit = fd.ops.cast(fd.ops.eq(ids, u), dtype=alloy.float32)
        fd.add_output(fd.ops.gather(x, u, dim=1))
        fd.add_output(hit)
    assert "iota(length=V, dtype=i64)" in str(fd)
    picked, onehot = fd.execute([logits, target])
    np.testing.assert_array_equal(picked, np.take_along_axis(logits, target[:, None], axis=1))
    np.testing.assert_array_equal(onehot, (np.arange(6)[None, :] == target[:, None]).astype(np.float32))


def test_gather_index_out_of_range_is_an_alloy_error_naming_value_and_range():
    x = normal(2, 3)
    fd = define([x, np.zeros((2, 1), np.int64)], lambda fd, a, i: fd.ops.gather(a, i, dim=1))
    with pytest.raises(alloy.Error, match=r"gather: index value 3 at index position \[1, 0\] is out of range for axis 1 "
                                          r"of the input '\w+' \[2, 3\]; expected 0 to 2"):
        fd.execute([x, np.array([[0], [3]], np.int64)])
    with pytest.raises(alloy.Error, match=r"index value -1 .* \(negative indices are not taken"):
        fd.execute([x, np.array([[-1], [0]], np.int64)])


def test_gather_and_iota_mistakes_are_alloy_errors_at_the_line():
    with pytest.raises(alloy.Error, match=r"test_ops.py:\d+:\d+: gather: index must be an integer tensor"):
        define([normal(2, 3), normal(2, 1)], lambda fd, a, i: fd.ops.gather(a, i, dim=1))
    with pytest.raises(alloy.Error, match=r"iota: length names the size 'W', which no input declares"):
        define([normal(2)], lambda fd, a: fd.ops.iota("W"))
    # an integer dtype keeps its start and step integers (torch.arange's, nvFuser's result dtype):
    # a float one was promoted to f32 past the dtype asked for
    with pytest.raises(alloy.Error, match=r"test_ops.py:\d+:\d+: iota: start 0.5 is not an integer, but dtype is int32"):
        define([normal(2)], lambda fd, a: fd.ops.iota(4, start=0.5, step=1.5, dtype=alloy.int32))
    with pytest.raises(alloy.Error, match=r"iota: step 1.5 is not an integer, but dtype is int64"):
        define([normal(2)], lambda fd, a: fd.ops.iota(4, 0, 1.5, dtype=alloy.int64))
