"""Alloy from Python: define a fusion as nvFuser users do, run it on torch tensors, NumPy arrays
or anything with ``__dlpack__``, without copies.

    import alloy, torch

    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 768], dtype=alloy.bfloat16)
        w = fd.define_tensor(shape=[3072, 768], dtype=alloy.bfloat16)
        y = fd.ops.gelu(fd.ops.linear(x, w), approximate="tanh")
        fd.add_output(y)

    (out,) = fd.execute([x_tensor, w_tensor])   # torch in, torch out, on torch's current stream

``print(fd)`` gives the ``.fusion`` text (the command line's format), ``alloy.parse(text)`` and
``alloy.load(path)`` read it back. Every user mistake is an ``alloy.Error`` (a ``ValueError``)
whose message says where (your file and line, or the input and axis), what was expected and
what was found.
"""

from __future__ import annotations

import os as _os
from collections.abc import Mapping as _Mapping, Sequence as _Sequence
import sys as _sys

from . import _alloy
from . import distributed
from ._alloy import DataType, Error, InternalError, Value
from .distributed import Replicate, Shard

__all__ = [
    "FusionDefinition", "DataType", "Value", "Error", "InternalError", "ValidationError",
    "float64", "float32", "float16", "bfloat16", "int64", "int32",  # and alloy.bool (not exported by *: it would hide the builtin)
    "parse", "load", "op_names", "cuda_available", "device_count", "settings", "set_setting", "Shard", "Replicate", "distributed",
]
__version__ = "0.1.0"

float64 = DataType.float64
float32 = DataType.float32
float16 = DataType.float16
bfloat16 = DataType.bfloat16
int64 = DataType.int64
int32 = DataType.int32
bool = DataType.bool  # noqa: A001  (named as torch.bool is)

# nvFuser's names of the same dtypes (DataType.Float, ...), so its frontend code runs unchanged.
for _alias, _member in (("Double", float64), ("Float", float32), ("Half", float16), ("BFloat16", bfloat16), ("Int", int64),
                        ("Int32", int32), ("Bool", bool)):
    setattr(DataType, _alias, _member)
del _alias, _member

_builtin_bool = __builtins__["bool"] if isinstance(__builtins__, dict) else __builtins__.bool


class ValidationError(AssertionError):
    """fd.validate found outputs that differ from the reference beyond the dtype's tolerance."""


def cuda_available():
    """Whether Alloy can run on a GPU here (a CUDA driver and at least one GPU)."""
    return _alloy.cuda_available()


def device_count():
    return _alloy.device_count()


def settings():
    """Alloy's settings (tuning and debugging knobs; `alloy --help` says what each does) and their
    current values, as text."""
    return dict(_alloy.settings())


def set_setting(name, value):
    """Sets one setting for this process ("NO_SIDE_STREAM" or "ALLOY_NO_SIDE_STREAM"; switches take
    0 or 1). Plans already built keep what they were built with."""
    if value is None:  # str(None) would be taken for a value ('None' as a directory name, say)
        raise Error(f"set_setting: {name}: expected a value (a str, a number, or a bool for a switch), found None")
    _alloy.set_setting(str(name), str(int(value)) if isinstance(value, _builtin_bool) else str(value))


# ---- dtypes ------------------------------------------------------------------------------

_DTYPE_NAMES = {
    "float64": float64, "double": float64, "f64": float64,
    "float32": float32, "float": float32, "f32": float32,
    "float16": float16, "half": float16, "f16": float16,
    "bfloat16": bfloat16, "bf16": bfloat16,
    "int64": int64, "long": int64, "i64": int64,
    "int32": int32, "int": int32, "i32": int32,
    "bool": bool, "bool_": bool,
}


def _dtype(d):
    """An alloy dtype from an alloy, torch or NumPy dtype, a Python type, or a name."""
    if isinstance(d, DataType):
        return d
    if d is float:
        return float64
    if d is int:
        return int64
    if d is _builtin_bool:
        return bool
    name = getattr(d, "name", None)  # numpy.dtype('float32').name
    if not isinstance(name, str):
        name = getattr(d, "__name__", None) or str(d)  # numpy.float32, torch.float32
    name = name.rsplit(".", 1)[-1]
    if name in _DTYPE_NAMES:
        return _DTYPE_NAMES[name]
    raise Error(f"unsupported dtype {d!r}; expected one of float64 float32 float16 bfloat16 int64 int32 bool")


# ---- where the user's code is ----------------------------------------------------------

_PACKAGE_DIR = _os.path.dirname(_os.path.abspath(__file__))


def _caller():
    """(file, line, column) of the first frame outside this package: where errors point."""
    frame = _sys._getframe(1)
    while frame is not None and _os.path.dirname(_os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back
    if frame is None:
        return None, 0, 0
    column = 1
    try:
        positions = list(frame.f_code.co_positions())
        start = positions[frame.f_lasti // 2][2]
        if start is not None:
            column = start + 1
    except (AttributeError, IndexError, TypeError):
        pass
    return frame.f_code.co_filename, frame.f_lineno, column


# ---- fd.ops: one method per op row -----------------------------------------------------

def _numpy_scalar_types():
    numpy = _sys.modules.get("numpy")  # never imported here: without it there are no NumPy scalars
    return (numpy.bool_, numpy.integer, numpy.floating) if numpy is not None else ()


def _is_number(a):
    """A Python bool, int or float, or a NumPy scalar of those kinds (np.float32(2.0))."""
    return isinstance(a, (int, float)) or isinstance(a, _numpy_scalar_types())


def _is_int(a):
    numpy = _sys.modules.get("numpy")
    return (isinstance(a, int) and not isinstance(a, _builtin_bool)) or (numpy is not None and isinstance(a, numpy.integer))


def _mesh_ids(mesh, where):
    """A mesh's device ids: ints only (a float, a bool or a string's characters are mistakes,
    never rounded or read digit by digit)."""
    items = mesh.tolist() if hasattr(mesh, "tolist") else mesh
    if isinstance(items, (str, bytes, dict, set, frozenset)) or not hasattr(items, "__iter__"):
        raise Error(f"{where}: mesh must be a list of device ids (ints), found {type(mesh).__name__} {mesh!r}")
    items = list(items)
    for d in items:
        if not _is_int(d):
            raise Error(f"{where}: mesh must be a list of device ids (ints), found {d!r} ({type(d).__name__}) in {mesh!r}")
    return [int(d) for d in items]


def _check_type(value, types, where, expected):
    """An alloy.Error naming the argument, instead of the binding's raw TypeError."""
    if not isinstance(value, types):
        raise Error(f"{where}: expected {expected}, found {type(value).__name__} {value!r}"[:400])


def _check_sequence(inputs, where):
    if isinstance(inputs, (list, tuple)):
        return
    sequence_like = isinstance(inputs, _Sequence) or (hasattr(type(inputs), "__len__") and hasattr(type(inputs), "__getitem__"))
    if isinstance(inputs, (str, bytes, _Mapping)) or not sequence_like:
        raise Error(f"{where}: inputs must be a sequence (a list or tuple) of tensors and numbers, found "
                    f"{type(inputs).__name__}")


def _is_operand(a):
    return isinstance(a, Value) or _is_number(a)


def _attr_value(spec_type, value):
    if value is None:
        return None
    if spec_type == "dtype":
        return _dtype(value)
    if spec_type in ("ints", "ints?") and _is_int(value):
        return [value]
    if spec_type in ("ints", "ints?", "sizes") and isinstance(value, tuple):
        return list(value)
    return value


# Where the Python API differs from the format's row (nvFuser's and torch's conventions): defaults
# an attribute takes when the call leaves it out (the .fusion text keeps the format's, written out),
# and nvFuser's keyword names of the format's attributes.
_PYTHON_DEFAULTS = {"var_mean": {"correction": 1}}  # torch.var_mean and nvFuser: Bessel's correction
_KEYWORD_ALIASES = {"slice": {"start_indices": "starts", "end_indices": "ends", "strides": "steps"}}
_CASTS_FIRST = ("sum", "mean", "max", "min")  # dtype=: the input cast first, as nvFuser's and torch's


def _make_op(row):
    name = row["name"]
    attrs = row["attrs"]  # (name, type, required, default)
    defaults = _PYTHON_DEFAULTS.get(name, {})
    aliases = _KEYWORD_ALIASES.get(name, {})
    attrs = [(n, t, required, defaults.get(n, default)) for n, t, required, default in attrs]
    attr_names = [a[0] for a in attrs]
    attr_types = {a[0]: a[1] for a in attrs}
    max_inputs = row["max_inputs"]
    min_inputs = row["min_inputs"]

    def op(self, *args, **kwargs):
        args = list(args)
        inputs = []
        if max_inputs < 0:  # cat(a, b, ..., dim=k) or cat([a, b], k)
            if args and isinstance(args[0], (list, tuple)):
                inputs = list(args.pop(0))
            while args and isinstance(args[0], Value):
                inputs.append(args.pop(0))
        else:
            while args and len(inputs) < max_inputs and (_is_operand(args[0]) or args[0] is None):
                inputs.append(args.pop(0))
        while len(inputs) > min_inputs and inputs[-1] is None:  # optional inputs left out
            inputs.pop()
        if len(args) > len(attr_names):  # more arguments than the op takes: Alloy says what it takes
            inputs.extend(args)
            args = []
        given = dict(zip(attr_names, args))
        for key, value in kwargs.items():
            key = aliases.get(key, key)
            if key in given:
                raise TypeError(f"{name}() got attribute '{key}' twice")
            given[key] = value
        for key, value in defaults.items():
            if given.get(key) is None:
                given[key] = value
        given = {k: _attr_value(attr_types.get(k), v) for k, v in given.items()}
        file, line, col = _caller()
        if name in _CASTS_FIRST and "dtype" in given:
            dtype = given.pop("dtype")
            if dtype is not None and inputs and isinstance(inputs[0], Value):
                inputs[0] = self._impl.add_op("cast", [inputs[0]], {"dtype": dtype}, file, line, col)[0]
        if name == "layer_norm" and len(inputs) == 3 and inputs[1] is None and isinstance(inputs[0], Value):
            return _layer_norm_bias_only(self._impl, inputs[0], inputs[2], given, (file, line, col))
        outs = self._impl.add_op(name, inputs, given, file, line, col)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def describe(a):
        n, t, required, default = a
        return n if required else f"{n}={default!r}"

    if max_inputs < 0:
        operands = "*tensors"
    else:
        operands = ", ".join(["x", "y", "z"][:min_inputs] + [f"optional{i}=None" for i in range(min_inputs, max_inputs)])
    signature = ", ".join(([operands] if operands else []) + [describe(a) for a in attrs])
    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"{name}({signature}) -> " + ("Value" if row["num_outputs"] == 1 else f"tuple of {row['num_outputs']} Values")
                  + f"\n\nThe .fusion op `{name}` ({row['op_class']}); attribute types: "
                  + (", ".join(f"{n}: {t}" for n, t, _, _ in attrs) or "none") + ".")
    return op


def _layer_norm_bias_only(impl, x, bias, attrs, where):
    """layer_norm(x, None, bias) as torch computes it: the normalized x (in f32 for 16-bit x) plus
    the bias, rounded to x's dtype once (the format's layer_norm takes a bias only after a weight)."""
    low = x.dtype in (DataType.bfloat16, DataType.float16)
    xf = impl.add_op("cast", [x], {"dtype": DataType.float32}, *where)[0] if low else x
    y = impl.add_op("layer_norm", [xf], attrs, *where)[0]
    y = impl.add_op("add", [y, bias], {}, *where)[0]
    return impl.add_op("cast", [y], {"dtype": x.dtype}, *where)[0] if y.dtype != x.dtype else y


class Operators:
    """fd.ops: every op of the .fusion format that a fusion states, with the format's attribute
    names. The collectives (all_gather, reduce_scatter, all_reduce, all_to_all, shard_slice) are
    not here: Alloy inserts them where placements differ (define_tensor's mesh and placement).

    Inputs come first (values of the definition, or Python and NumPy numbers as literals), then the
    attributes, positionally in the format's order or by keyword: ``fd.ops.sum(x, dims=[1])``,
    ``fd.ops.cast(x, alloy.float32)``. Ops with several results return a tuple.
    """

    def __init__(self, impl):
        self._impl = impl


# The communication rows are the resharding steps the sharding passes insert (in the table so that
# a dump after insert_resharding parses again); stated in a fusion with a mesh they are an error.
_OP_ROWS = [row for row in _alloy.op_table() if row["op_class"] != "communication"]
for _row in _OP_ROWS:
    setattr(Operators, _row["name"], _make_op(_row))
del _row


# ---- fd.ops composed from the format's ops -----------------------------------------------
# nvFuser ops that are a line or two of the format's ops: stated with them, so the .fusion text
# shows what runs.

def _var(self, x, dims=None, correction=1, keepdim=False):
    """var(x, dims=None, correction=1, keepdim=False) -> Value

    nvFuser's and torch's variance: var_mean's first result (Bessel's correction unless told)."""
    return self.var_mean(x, dims, correction, keepdim)[0]


def _clamp(self, x, min=None, max=None):  # noqa: A002  (torch.clamp's names)
    """clamp(x, min=None, max=None) -> Value

    torch.clamp: maximum(x, min), then minimum(that, max), so min > max gives max everywhere, and
    NaN stays NaN (maximum and minimum propagate it). Either bound may be left out, not both."""
    if min is None and max is None:
        file, line, col = _caller()
        raise Error(f"{file}:{line}:{col}: clamp: expected min, max or both, found neither")
    if min is not None:
        x = self.maximum(x, min)
    return x if max is None else self.minimum(x, max)


def _broadcast(self, x, is_broadcast_dim):
    """broadcast(x, is_broadcast_dim) -> Value

    nvFuser's broadcast: one output axis per entry of is_broadcast_dim, a new axis of size 1 where
    it is True and x's axes, in order, where it is False (an unsqueeze at each True)."""
    file, line, col = _caller()
    where = f"{file}:{line}:{col}: broadcast"
    _check_type(x, Value, f"{where}: x", "a tensor value of this definition")
    bools = (_builtin_bool,) + _numpy_scalar_types()[:1]
    flags = list(is_broadcast_dim) if isinstance(is_broadcast_dim, (list, tuple)) else None
    if flags is None or not all(isinstance(f, bools) for f in flags):
        raise Error(f"{where}: is_broadcast_dim must be a list of bools (True where an axis of size 1 is inserted), "
                    f"found {is_broadcast_dim!r}")
    kept = flags.count(False)
    if kept != x.ndim:
        raise Error(f"{where}: is_broadcast_dim has {kept} False entries for {x.name}: {x.type} of rank {x.ndim}; "
                    "expected one False for each axis of x")
    for axis, flag in enumerate(flags):
        if flag:
            x = self.unsqueeze(x, axis)
    return x


def _isnan(self, x):
    """isnan(x) -> Value

    ne(x, x): only NaN differs from itself (a bool tensor; False everywhere for integers)."""
    return self.ne(x, x)


def _size(self, x, dim):
    """size(x, dim): x.size(dim), the size of an axis as x.shape gives it."""
    file, line, col = _caller()
    _check_type(x, Value, f"{file}:{line}:{col}: size: x", "a tensor value of this definition")
    return x.size(dim)


_table_iota = Operators.iota


def _iota(self, length, *more, start=None, step=None, dtype=None):
    """iota(length, start=None, step=None, dtype=int64) -> Value

    The format's iota (0, 1, ..., length-1; length an int or a size symbol) in ``dtype``, as
    nvFuser's: times ``step``, plus ``start`` where given. Positionally after the length: a dtype
    (the format's order, ``iota(5, "i32")``), or start and step (nvFuser's)."""
    more = list(more)
    if more and _is_dtype_like(more[0]):
        dtype = more.pop(0)
    if more:
        start = more.pop(0)
    if more:
        step = more.pop(0)
    if more:
        file, line, col = _caller()
        raise Error(f"{file}:{line}:{col}: iota: takes the length, then start and step (or a dtype), and dtype; "
                    f"found {len(more)} more argument{'s' if len(more) > 1 else ''}")
    if dtype is not None and _dtype(dtype) in (int32, int64):
        for what, value in (("start", start), ("step", step)):
            if isinstance(value, float):  # (an int dtype stays it: torch.arange's and nvFuser's result dtype)
                file, line, col = _caller()
                raise Error(f"{file}:{line}:{col}: iota: {what} {value!r} is not an integer, but dtype is "
                            f"{_dtype(dtype).name} (expected an int {what}, or a floating dtype)")
    x = _table_iota(self, length=length) if dtype is None else _table_iota(self, length=length, dtype=dtype)
    if step is not None and not (_is_int(step) and step == 1):
        x = self.mul(x, step)
    if start is not None and not (_is_int(start) and start == 0):
        x = self.add(x, start)
    return x


def _is_dtype_like(value):
    try:
        _dtype(value)
    except Error:
        return False
    return True


_COMPOSED_OPS = {"var": _var, "clamp": _clamp, "broadcast": _broadcast, "isnan": _isnan, "size": _size}
for _name, _function in _COMPOSED_OPS.items():
    _function.__name__ = _function.__qualname__ = _name
    setattr(Operators, _name, _function)
del _name, _function
_iota.__name__ = _iota.__qualname__ = "iota"
Operators.iota = _iota  # (the format's op, with nvFuser's start and step)
_table_squeeze = Operators.squeeze


def _squeeze(self, x, dims=None, *more, **kwargs):
    """squeeze(x, dims=None) -> Value

    The format's squeeze: the named axes (of size 1), or every axis of size 1 where dims is not
    given. An empty list names none, as ``torch.squeeze(x, dim=())``: x itself."""
    if dims is not None and not more and not kwargs and isinstance(dims, (list, tuple)) and len(dims) == 0:
        return x
    return _table_squeeze(self, x, *((dims,) if dims is not None else ()), *more, **kwargs)


_squeeze.__name__ = _squeeze.__qualname__ = "squeeze"
Operators.squeeze = _squeeze


def op_names():
    """The names of the ops under fd.ops: the format's, then those composed from them (var,
    clamp, broadcast, isnan, size)."""
    return [row["name"] for row in _OP_ROWS] + list(_COMPOSED_OPS)


# Operators on values, for definitions that read like arithmetic: x * 2 + y, -x, x ** 2.
def _binary(op_name, reflected=False):
    def method(self, other):
        if not _is_operand(other):
            return NotImplemented
        ops = Operators(self._definition)
        return getattr(ops, op_name)(other, self) if reflected else getattr(ops, op_name)(self, other)
    method.__name__ = op_name
    return method


for _op, _dunder in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "truediv"), ("pow", "pow")):
    setattr(Value, f"__{_dunder}__", _binary(_op))
    setattr(Value, f"__r{_dunder}__", _binary(_op, reflected=True))
# Comparisons are elementwise ops, as in nvFuser and torch: x == y is fd.ops.eq(x, y), 0 < x is
# fd.ops.gt(x, 0) (Python reflects it). A value has no truth value of its own (`if x:`, `x in
# list`, `x == y` used as a bool): that raises, rather than a condition the fusion never computes.
for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Value, f"__{_op}__", _binary(_op))
Value.__hash__ = object.__hash__  # values stay usable as dict keys and set members (by identity)


def _no_truth_value(self):
    raise TypeError(f"the truth value of an alloy.Value ({self.name}: {self.type}) is computed only when the fusion runs; "
                    "use fd.ops.where(cond, a, b) for a choice inside the fusion, and `is` to compare values themselves")


Value.__bool__ = _no_truth_value
Value.__neg__ = lambda self: Operators(self._definition).neg(self)
Value.__abs__ = lambda self: Operators(self._definition).abs(self)
Value.__pos__ = lambda self: self
del _op, _dunder


# & | ^ ~ on bool values are logical, as torch's are on bool tensors: where and the comparisons
# compute them (the format has no bitwise ops, so other dtypes are a TypeError, not a guess).
def _logical(symbol, combine):
    def method(self, other=None):
        operands = (self,) if symbol == "~" else (self, other)
        if symbol != "~" and not _is_operand(other):
            return NotImplemented
        for a in operands:
            is_bool = a.dtype == bool if isinstance(a, Value) else isinstance(a, (_builtin_bool,) + _numpy_scalar_types()[:1])
            if not is_bool:
                found = f"{a.name}: {a.type}" if isinstance(a, Value) else f"{type(a).__name__} {a!r}"
                raise TypeError(f"`{symbol}` on alloy values is logical, for bool values only; found {found} "
                                "(compare first, as in (x > 0), or cast with fd.ops.cast(x, alloy.bool))")
        return combine(Operators(self._definition), *operands)
    return method


for _dunders, _symbol, _combine in (
        (("__and__", "__rand__"), "&", lambda ops, a, b: ops.where(a, b, a)),  # a ? b : false
        (("__or__", "__ror__"), "|", lambda ops, a, b: ops.where(a, a, b)),    # a ? true : b
        (("__xor__", "__rxor__"), "^", lambda ops, a, b: ops.ne(a, b)),
        (("__invert__",), "~", lambda ops, a: ops.eq(a, False))):
    for _dunder in _dunders:  # each is symmetric, so the reflected form is the same
        setattr(Value, _dunder, _logical(_symbol, _combine))
del _dunders, _dunder, _symbol, _combine


class _Shape(list):
    """A value's shape: a list, also callable, as nvFuser's ``x.shape()`` is (the same list)."""

    def __call__(self):
        return self


_value_shape = Value.shape.fget
Value.shape = property(lambda self: _Shape(_value_shape(self)),
                       doc="The sizes, as the format writes them: ints, -1 for an unnamed dynamic size, symbol names "
                           "('B'). Also callable, as nvFuser's x.shape().")


def _value_size(self, dim):
    """The size of axis ``dim`` (negative counts from the end) as ``x.shape`` gives it: an int or a
    symbol's name ('B'), which reshape and expand take. An unnamed dynamic size is an error (-1
    would mean "infer" to reshape and "keep" to expand, not this size): name the axis."""
    shape = _value_shape(self)
    rank = len(shape)
    if not _is_int(dim) or not -rank <= dim < rank:
        file, line, col = _caller()
        expected = f"an int from {-rank} to {rank - 1}" if rank else "no axis: it has none"
        raise Error(f"{file}:{line}:{col}: size: {self.name}: {self.type} has rank {rank}; expected {expected}, "
                    f"found {dim!r}")
    size = shape[int(dim)]
    if size == -1:
        file, line, col = _caller()
        raise Error(f"{file}:{line}:{col}: size: axis {int(dim)} of {self.name}: {self.type} is an unnamed dynamic size; "
                    f"expected a named one to use as a size (declare it with a symbol, e.g. shape=['B', ...])")
    return size


Value.size = _value_size


# ---- definitions -------------------------------------------------------------------------

def _check_layout_hints(rank, contiguity, stride_order, where):
    """nvFuser's define_tensor hints: contiguity is one True/False/None per axis, stride_order a
    permutation of range(rank)."""
    for what, hint in (("contiguity", contiguity), ("stride_order", stride_order)):
        if hint is None:
            continue
        if not isinstance(hint, (list, tuple)):
            hint = hint.tolist() if hasattr(hint, "tolist") else hint
            if not isinstance(hint, (list, tuple)):
                raise Error(f"{where}: {what} must be a list with one entry per axis, found {type(hint).__name__}")
        if len(hint) != rank:
            raise Error(f"{where}: {what} has {len(hint)} entries for a tensor of rank {rank}")
    if contiguity is not None:
        numpy_bool = _numpy_scalar_types()[:1]
        for axis, c in enumerate(contiguity):
            if c is not None and not isinstance(c, (_builtin_bool,) + numpy_bool):
                raise Error(f"{where}: contiguity[{axis}] must be True, False or None, found {c!r}")
    if stride_order is not None:
        order = list(stride_order)
        if not all(_is_int(i) for i in order) or sorted(int(i) for i in order) != list(range(rank)):
            raise Error(f"{where}: stride_order must be a permutation of 0..{rank - 1} (stride_order[i] ranks axis i's "
                        f"stride, {rank - 1} the largest), found {order}")


class FusionDefinition:
    """A fusion defined op by op inside a ``with`` block, then executed.

    Every op is checked when it is defined: a shape or dtype mistake raises ``alloy.Error`` at
    that line. An error that ends the ``with`` block leaves the definition unusable (using it
    again raises ``alloy.Error`` saying why).

    ``options`` (a dict, named as the C++ ``ExecutorOptions`` fields) sets how every run of this
    definition is planned: ``"pipeline"``: ``"off"``, ``"auto"`` (the default), ``"ring"`` or
    ``"chunks=N"``, how a sharded fusion's collectives overlap the GEMMs next to them (the
    command line's ``--pipeline``); ``"poison_outputs"``: ``True`` fills every buffer a run
    allocates with NaN first (a test sees any element a kernel failed to write);
    ``"agreement"``: ``"every_run"`` (the default) or ``"on_change"``, when the ranks of a job of
    several processes agree on the fusion, options, sizes and shapes before a sharded run's first
    collective: on every run, or only on a run whose record differs from the last agreed one
    (cheaper; safe only when every rank changes shapes at the same runs, or a rank would wait for
    an agreement the others skip). A bad name or value raises ``alloy.Error``; ``fd.options``
    reads them back.
    """

    def __init__(self, name="fusion", *, options=None, _impl=None):
        _check_type(name, str, "FusionDefinition: name", "a str")
        self._impl = _impl if _impl is not None else _alloy._Definition(name)
        if options is not None:
            if not isinstance(options, dict):
                raise Error(f"options: expected a dict such as {{'pipeline': 'ring'}}, found {type(options).__name__}")
            self._impl.set_options(options)
        self.ops = Operators(self._impl)
        self._layout = None  # (input shardings, output shardings) once finished, None entries without a mesh

    # -- the with block --
    def __enter__(self):
        if self._impl.finished:  # refused before the block runs, so nothing in it can mark the definition failed
            raise Error(f"FusionDefinition: the definition is complete; fusion '{self._impl.name}' cannot be defined "
                        "further (its ops are stated in one `with` block; make a new FusionDefinition for another fusion)")
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            if not self._impl.failure:
                self._impl.fail(f"{exc_type.__name__}: {exc}")
            return False
        if not self._impl.failure:  # a definition that failed inside the block stays failed
            self._impl.finish()
        return False

    # -- defining --
    def define_tensor(self, shape=None, dtype=None, contiguity=None, stride_order=None, *, name=None, static_sizes=False,
                      symbolic_sizes=None, mesh=None, placement=None, is_cpu=False):
        """A tensor input. ``shape``: ints, -1 or None for a dynamic size, or symbol names ('B') that
        bind to the same size wherever they appear. Or pass an existing tensor (torch, NumPy, ...)
        as the first argument: its dtype, and its sizes as dynamic ones (1 stays 1, a broadcast
        axis) unless ``static_sizes=True``. ``symbolic_sizes`` is nvFuser's older name of the shape
        (-1 a dynamic size, other ints fixed ones); given with a ``shape``, the two must agree.

        ``contiguity`` (one True, False or None per axis) and ``stride_order`` (a permutation of
        ``range(rank)``; ``stride_order[i]`` ranks axis i's stride, ``rank - 1`` the largest, so
        ``[rank - 1, ..., 0]`` is row-major) are nvFuser's layout hints. They are checked here (a
        wrong length, entry or a stride_order that is no permutation raises ``alloy.Error``), and
        then have nothing left to do: Alloy reads every input's strides at run time and builds a
        plan per layout (contiguity is part of the plan cache's key), so inputs of any layout
        run, the declared one included, and none is refused for not matching the hint.

        ``mesh`` (device ids, which are ranks) with ``placement`` (``alloy.Shard(k)``,
        ``alloy.Replicate()`` (the default), torch's own, or the text's "shard(axis=K)") lays the
        input over a mesh: the fusion then runs one process per device (``alloy.distributed``).
        The shape stays the whole tensor's.

        ``is_cpu`` (nvFuser's mark of a 0-dim host tensor in a GPU fusion) is accepted and has
        nothing to do: each tensor's device is read at execute time.
        """
        if shape is not None and not isinstance(shape, (list, tuple)) and hasattr(shape, "shape"):
            tensor = shape
            sizes = [int(s) for s in tensor.shape]
            shape = sizes if static_sizes else [1 if s == 1 else -1 for s in sizes]
            if dtype is None:
                dtype = tensor.dtype
        if symbolic_sizes is not None:  # nvFuser's older name of the shape: -1 dynamic, other ints fixed
            if isinstance(symbolic_sizes, (str, bytes, dict, set, frozenset)) or not hasattr(symbolic_sizes, "__iter__"):
                raise Error(f"define_tensor: symbolic_sizes must be a list of sizes (ints, -1 for a dynamic size), found "
                            f"{type(symbolic_sizes).__name__} {symbolic_sizes!r}")
            symbolic_sizes = list(symbolic_sizes)
            if not isinstance(shape, (str, bytes, dict, set, frozenset)) and hasattr(shape, "__iter__"):
                shape = list(shape)
            unnamed = lambda sizes: [-1 if d is None else d for d in sizes]  # noqa: E731  (None and -1 say the same)
            if shape is None:
                shape = symbolic_sizes
            elif not isinstance(shape, list) or unnamed(shape) != unnamed(symbolic_sizes):
                raise Error(f"define_tensor: shape {shape!r} and symbolic_sizes {symbolic_sizes!r} differ; expected one of "
                            "them (symbolic_sizes is nvFuser's older name of shape)")
        if shape is None:
            raise Error("define_tensor: give a shape (a list of sizes; [] for a 0-dim tensor; or nvFuser's symbolic_sizes) "
                        "or a tensor")
        if isinstance(shape, (str, bytes, dict, set, frozenset)) or not hasattr(shape, "__iter__"):
            # a string would be one symbol per character, a dict or set its keys in no stated order
            raise Error(f"define_tensor: shape must be a list of sizes (ints, -1, None or symbol names such as 'B'), "
                        f"found {type(shape).__name__} {shape!r}")
        if dtype is None:
            dtype = float32
        shape = list(shape)
        file, line, col = _caller()
        _check_type(name, (str, type(None)), f"{file}:{line}:{col}: define_tensor: name", "a str or None")
        _check_layout_hints(len(shape), contiguity, stride_order, f"{file}:{line}:{col}: define_tensor")
        axis = None
        if mesh is None:
            if placement is not None:
                raise Error(f"{file}:{line}:{col}: define_tensor: a placement was given without a mesh")
        else:
            mesh = _mesh_ids(mesh, f"{file}:{line}:{col}: define_tensor")
            axis = None if placement is None else distributed.placement_axis(placement, f"{file}:{line}:{col}: define_tensor")
        return self._impl.add_input(name, _dtype(dtype), shape, file, line, col, mesh, axis)

    from_pytorch = define_tensor

    def define_scalar(self, value=None, dtype=None, *, name=None):
        """A literal constant (``define_scalar(1e-5)``), or, without a value, a scalar input of
        ``dtype`` given at execute time as a number (Python or NumPy) or a 0-dim tensor.

        A literal with a ``dtype`` is a scalar of that dtype, as in nvFuser: the literal cast to it
        (``cast(3, dtype=f32)`` in the text), so ``define_scalar(3, dtype=alloy.float32)`` makes an
        int tensor's sum f32, ``define_scalar(2.7, dtype=alloy.int32)`` is 2 and
        ``define_scalar(0.1, dtype=alloy.float32)`` is 0.1 rounded to f32. A value an integer
        dtype cannot hold is an ``alloy.Error``."""
        file, line, col = _caller()
        _check_type(name, (str, type(None)), f"{file}:{line}:{col}: define_scalar: name", "a str or None")
        if value is not None:
            return self._impl.add_literal(value, None if dtype is None else _dtype(dtype), file, line, col)
        return self._impl.add_input(name, _dtype(dtype if dtype is not None else float64), None, file, line, col)

    def add_output(self, value, alias_input=None):
        """Makes ``value`` an output. With ``alias_input=x`` (a tensor input), the run writes the
        value into x's memory (an in-place update; the result returned for it is x's memory too)."""
        file, line, col = _caller()
        _check_type(value, Value, f"{file}:{line}:{col}: add_output: value", "a value of this definition (from define_tensor or fd.ops)")
        _check_type(alias_input, (Value, type(None)), f"{file}:{line}:{col}: add_output: alias_input",
                    "a tensor input of this definition (from define_tensor) or None")
        self._impl.add_output(value, alias_input, file, line, col)

    # -- running --
    def execute(self, inputs, *, device=None, stream=None, trace=None):
        """Runs the fusion on ``inputs`` (in definition order: tensors and Python numbers) and
        returns the outputs as a list of the first tensor input's kind (torch in, torch out;
        NumPy in, NumPy out), viewing Alloy's memory. Runs where the tensors are (``device``:
        "cpu", "cuda", "cuda:N" to choose); on CUDA it enqueues on torch's current stream (or
        ``stream``: a handle or a stream object; an error for a CPU run) and returns without
        waiting. Outputs that view a read-only input (NumPy ``writeable=False``) are read-only;
        an in-place output into one is an ``alloy.Error``.

        A fusion with a mesh runs one process per device (``alloy.distributed``): each takes its
        part of every input and returns its part of every output; DTensor inputs are accepted
        (and redistributed to the fusion's placements) and then outputs come back as DTensors.

        ``trace="out.json"`` (a path) writes the run's timeline as a Chrome trace-event file (open
        it in https://ui.perfetto.dev or chrome://tracing): a span for each kernel, GEMM chunk,
        collective, copy and wait on its stream, timed on the device, and the host's time
        enqueueing each; the run waits for the device. With a mesh, every rank of the job passes
        ``trace`` for the same run (the ranks agree on it) and rank 0 writes one file with a
        process per rank; without one, rank 0 writes its own run's. A path that cannot be written
        raises ``alloy.Error``."""
        if trace is not None:
            message = None
            if not isinstance(trace, (str, _os.PathLike)):
                message = f"execute: trace: expected a file path (str or os.PathLike), found {type(trace).__name__}"
            else:
                trace = _os.fspath(trace)
                if not isinstance(trace, str) or not trace:
                    message = "execute: trace: expected a non-empty file path"
            if message is not None:
                if self._layout is not False and self._layout_or_none() is not None:
                    self._impl.fail_job(message)  # the other ranks' runs end too
                raise Error(message)
        if self._layout is False:  # the fast path: no mesh (known after the first run)
            if not isinstance(inputs, (list, tuple)):
                _check_sequence(inputs, "execute")
            return self._impl.execute(inputs, device, stream, trace)
        layout = self._layout_or_none()
        if layout is None:
            _check_sequence(inputs, "execute")
            return self._impl.execute(inputs, device, stream, trace)
        distributed._maybe_join_torch()
        mesh = next(s[0] for s in layout[0] + layout[1] if s is not None)
        if distributed.rank() not in mesh:
            return self._impl.join_outside_mesh(trace)  # its inputs are not read; []
        device_mesh = None
        try:  # a mistake in this rank's arguments ends the other ranks' runs too (fail_job), not a wait for this one
            if trace is not None and distributed.rank() == 0:  # (rank 0 writes the file, after the run)
                problem = _alloy.why_unwritable(trace)
                if problem:
                    raise Error(f"execute: trace {trace}: cannot write the file: {problem}")
            _check_sequence(inputs, "execute")
            inputs = list(inputs)
            for i, (x, sharding) in enumerate(zip(inputs, layout[0])):
                if sharding is not None and distributed._is_dtensor(x):
                    mesh, placement = sharding
                    where = f"input '{self._impl.inputs[i].name}'"
                    inputs[i], device_mesh = distributed.dtensor_to_local(x, mesh, distributed.placement_axis(placement), where)
        except Exception as e:
            try:
                self._impl.fail_job(str(e) if isinstance(e, Error) else f"{type(e).__name__}: {e}")
            except Error:
                pass
            raise
        outputs = self._impl.execute(inputs, device, stream, trace)
        if device_mesh is None:
            return outputs
        return [y if s is None else distributed.to_dtensor(y, device_mesh, s[1]) for y, s in zip(outputs, layout[1])]

    __call__ = execute

    def _layout_or_none(self):
        if self._layout is None:
            if not self._impl.finished:
                return None  # execute reports it
            ins, outs = self._impl.shardings()
            self._layout = (ins, outs) if any(s is not None for s in ins + outs) else False
        return self._layout or None

    @property
    def input_shardings(self):
        """Per input: None (no mesh, or a scalar) or (mesh, placement), the placement as the text
        writes it: "replicated", "shard(axis=K)"."""
        layout = self._layout_or_none()
        return list(layout[0]) if layout else [None] * len(self._impl.inputs)

    @property
    def output_shardings(self):
        """Per output: None or (mesh, placement) after propagation ("partial(sum)" is a pending
        reduction over the mesh)."""
        layout = self._layout_or_none()
        return list(layout[1]) if layout else [None] * len(self._impl.outputs)

    def local_inputs(self, inputs):
        """This rank's part of each whole input (views where the tensor kind has them), for
        ``execute``: sharded inputs are cut along their axis, the rest pass through."""
        _check_sequence(inputs, "local_inputs")
        inputs = list(inputs)
        shardings = self.input_shardings
        if len(inputs) != len(shardings):
            raise Error(f"local_inputs: fusion '{self.name}' takes {len(shardings)} inputs, found {len(inputs)}")
        out = []
        for i, (x, s) in enumerate(zip(inputs, shardings)):
            if s is None or not hasattr(x, "shape"):
                out.append(x)
                continue
            mesh, placement = s
            out.append(distributed.local_part(x, mesh, distributed.placement_axis(placement), f"input '{self._impl.inputs[i].name}'"))
        return out

    def validate(self, inputs, reference_outputs=None, *, device=None):
        """Runs on ``inputs`` and compares every output with ``reference_outputs`` or, without
        them, with Alloy's CPU reference run on the same inputs, within the tolerances of each
        output's dtype. Raises ``alloy.ValidationError`` listing the mismatches."""
        _check_sequence(inputs, "validate")
        if reference_outputs is not None:
            _check_sequence(reference_outputs, "validate: reference_outputs")
        mismatches = self._impl.validate(inputs, reference_outputs, device)
        if mismatches:
            raise ValidationError(f"fusion '{self._impl.name}': " + "; ".join(mismatches))

    def dump(self, stage="ir", inputs=None, *, device=None):
        """The text of a stage, as ``alloy run --dump STAGE`` prints it: "ir", "segments",
        "program", "cuda" (the generated kernels: give inputs, which are run once to compile
        them), "sharding", "local", or "after=PASS". The plan is for the inputs' device."""
        _check_type(stage, str, "dump: stage", 'a str such as "ir", "segments", "program" or "cuda"')
        if inputs is not None:
            _check_sequence(inputs, "dump")
        return self._impl.dump(stage, inputs, device)

    # -- introspection --
    @property
    def name(self):
        return self._impl.name

    @property
    def inputs(self):
        return self._impl.inputs

    @property
    def outputs(self):
        return self._impl.outputs

    @property
    def options(self):
        """The executor options every run uses: {"pipeline": ..., "poison_outputs": ..., "agreement": ...}."""
        return dict(self._impl.options)

    @property
    def compile_count(self):
        """How many plans were built for this definition (one per device it ran on); repeated
        runs, new sizes and new strides reuse the plan, except that a fusion with a mesh builds
        one more for each sharding its sizes decide (the plan moves the fewest bytes at them)."""
        return self._impl.plans_built

    def __str__(self):
        return self._impl.text()

    def __repr__(self):
        return f"<alloy.FusionDefinition {self._impl.name}>\n{self._impl.text()}"


def parse(text, name=None, *, options=None):
    """The fusion in ``.fusion`` text (the first, or the one called ``name``), ready to execute;
    ``options`` as for ``FusionDefinition``."""
    _check_type(text, str, "parse: text", "the .fusion text (a str)")
    _check_type(name, (str, type(None)), "parse: name", "a fusion's name (a str) or None")
    return FusionDefinition(_impl=_alloy.parse(text, name), options=options)


def load(path, name=None, *, options=None):
    """The fusion in a ``.fusion`` file (the first, or the one called ``name``), ready to execute;
    ``options`` as for ``FusionDefinition``."""
    _check_type(path, (str, _os.PathLike), "load: path", "a file path (a str or os.PathLike)")
    _check_type(name, (str, type(None)), "load: name", "a fusion's name (a str) or None")
    return FusionDefinition(_impl=_alloy.load(_os.fspath(path), name), options=options)
