"""Many tensors in one launch (issue 27): an optimizer step over every parameter of a model, one
chain a parameter, written with a loop over the parameters and updated in place
(fd.add_output(..., alias_input=...)). On a GPU every chain of one structure is one multi-tensor
launch over a table of the tensors (`fd.dump("segments")` says `[multi_tensor]`); everywhere the
results equal an element loop in NumPy."""
import numpy as np
import pytest

import alloy

LR, WD, BC1, BC2 = 1e-3, 0.01, 0.1, 0.001  # step 1 of AdamW(lr=1e-3, weight_decay=0.01)


def gpt2_like_shapes(c, vocab, context, layers=12):
    """GPT-2's parameters as nanoGPT lists them (wte, wpe, per layer ln_1, c_attn, c_proj, ln_2,
    c_fc, c_proj weights and biases, then ln_f), at width c."""
    layer = [(c,), (c,), (3 * c, c), (3 * c,), (c, c), (c,), (c,), (c,), (4 * c, c), (4 * c,), (c, 4 * c), (c,)]
    return [(vocab, c), (context, c)] + layer * layers + [(c,), (c,)]


def adamw_step(shapes):
    """The AdamW step of examples/adam_step.fusion for each parameter, in place on p, m and v."""
    with alloy.FusionDefinition("adamw") as fd:
        lr, wd, bc1, bc2 = (fd.define_scalar(dtype=alloy.float32, name=n) for n in ("lr", "wd", "bc1", "bc2"))
        for i, shape in enumerate(shapes):
            p, g, m, v = (fd.define_tensor(shape=list(shape), dtype=alloy.float32, name=f"{n}{i}") for n in "pgmv")
            m2 = fd.ops.add(fd.ops.mul(m, 0.9), fd.ops.mul(g, 0.1))
            v2 = fd.ops.add(fd.ops.mul(v, 0.999), fd.ops.mul(fd.ops.mul(g, g), 0.001))
            step = fd.ops.mul(fd.ops.div(fd.ops.div(m2, bc1), fd.ops.add(fd.ops.sqrt(fd.ops.div(v2, bc2)), 1e-8)), lr)
            p2 = fd.ops.sub(fd.ops.mul(p, fd.ops.sub(1.0, fd.ops.mul(lr, wd))), step)
            fd.add_output(p2, alias_input=p)
            fd.add_output(m2, alias_input=m)
            fd.add_output(v2, alias_input=v)
    return fd


def numpy_adamw(p, g, m, v):
    """The same step element by element in float64: the new p, m and v."""
    p, g, m, v = (a.astype(np.float64) for a in (p, g, m, v))
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    return p * (1 - LR * WD) - LR * (m2 / BC1) / (np.sqrt(v2 / BC2) + 1e-8), m2, v2


def state(shapes, rng):
    return [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)] + \
        [[np.abs(rng.standard_normal(s)).astype(np.float32) for s in shapes]]


def test_the_step_over_a_gpt2_like_parameter_list_updates_every_parameter_in_place(rng):
    shapes = gpt2_like_shapes(c=16, vocab=503, context=64)
    assert len(shapes) == 148
    fd = adamw_step(shapes)
    ps, gs, ms, vs = state(shapes, rng)
    expected = [numpy_adamw(*arrays) for arrays in zip(ps, gs, ms, vs)]
    inputs = [LR, WD, BC1, BC2] + [a for arrays in zip(ps, gs, ms, vs) for a in arrays]
    outputs = fd.execute(inputs)
    assert len(outputs) == 3 * len(shapes)
    for i, (p, m, v) in enumerate(zip(ps, ms, vs)):
        for out, array, want in zip(outputs[3 * i:3 * i + 3], (p, m, v), expected[i]):
            assert np.shares_memory(out, array)
            np.testing.assert_allclose(array, want, rtol=2e-5, atol=1e-6, err_msg=f"parameter {i}")


def test_the_text_of_a_loop_defined_step_has_one_chain_a_parameter():
    fd = adamw_step([(5,), (3, 4)])
    text = str(fd)
    assert "return" in text and "-> p0" in text and "-> v1" in text
    assert str(alloy.parse(text)) == text


@pytest.mark.skipif(not alloy.cuda_available(), reason="needs a GPU")
def test_on_a_gpu_the_step_is_one_multi_tensor_launch(rng):
    import torch
    shapes = gpt2_like_shapes(c=64, vocab=5027, context=128)
    fd = adamw_step(shapes)
    host = state(shapes, rng)
    expected = [numpy_adamw(*arrays) for arrays in zip(*host)]
    device = [[torch.from_numpy(a).cuda() for a in arrays] for arrays in host]
    inputs = [LR, WD, BC1, BC2] + [t for arrays in zip(*device) for t in arrays]
    fd.execute(inputs)
    torch.cuda.synchronize()
    segments = fd.dump("segments", inputs)
    assert segments.count("[multi_tensor]") == 1, segments[:2000]
    for i in range(len(shapes)):
        for t, want in zip((device[0][i], device[2][i], device[3][i]), expected[i]):
            np.testing.assert_allclose(t.cpu().numpy(), want, rtol=2e-5, atol=1e-6, err_msg=f"parameter {i}")
