"""PyTorch tensors in and out: torch in, torch out, without copies (views share data_ptr), on the
CPU and on CUDA on torch's current stream. Skipped where torch is not installed (CI); the CUDA
tests are skipped where there is no GPU. Where ALLOY_REQUIRE_GPU=1 (scripts/gpu-check) neither
skips: a missing torch or GPU fails."""
import os
import threading

import numpy as np
import pytest

import alloy

GPU_REQUIRED = os.environ.get("ALLOY_REQUIRE_GPU") == "1"
if GPU_REQUIRED:
    import torch
else:
    torch = pytest.importorskip("torch")
F = torch.nn.functional


def test_gpu_is_usable_where_required():
    """needs_cuda does not skip under ALLOY_REQUIRE_GPU=1; this says why the GPU tests then fail."""
    if GPU_REQUIRED:
        assert torch.cuda.is_available(), "ALLOY_REQUIRE_GPU=1, but torch sees no CUDA GPU"
        assert alloy.cuda_available(), "ALLOY_REQUIRE_GPU=1, but Alloy sees no CUDA GPU"


needs_cuda = pytest.mark.skipif(not GPU_REQUIRED and not (torch.cuda.is_available() and alloy.cuda_available()),
                                reason="no CUDA GPU usable by both torch and Alloy")


def mlp_definition(dtype=alloy.bfloat16, hidden=64, embed=16):
    """The nanoGPT MLP block, as the README shows it."""
    with alloy.FusionDefinition("mlp") as fd:
        x = fd.define_tensor(shape=[-1, -1, embed], dtype=dtype)
        w_fc = fd.define_tensor(shape=[hidden, embed], dtype=dtype)
        b_fc = fd.define_tensor(shape=[hidden], dtype=dtype)
        w_proj = fd.define_tensor(shape=[embed, hidden], dtype=dtype)
        b_proj = fd.define_tensor(shape=[embed], dtype=dtype)
        h = fd.ops.gelu(fd.ops.linear(x, w_fc, b_fc), approximate="tanh")
        fd.add_output(fd.ops.linear(h, w_proj, b_proj))
    return fd


def mlp_inputs(device, dtype=torch.bfloat16, hidden=64, embed=16):
    fc, proj = torch.nn.Linear(embed, hidden), torch.nn.Linear(hidden, embed)  # parameters require grad
    x = torch.randn(2, 8, embed)
    tensors = [x, fc.weight, fc.bias, proj.weight, proj.bias]
    return [t.to(device=device, dtype=dtype) for t in tensors]


def torch_mlp(x, w_fc, b_fc, w_proj, b_proj):
    with torch.no_grad():
        return F.linear(F.gelu(F.linear(x, w_fc, b_fc), approximate="tanh"), w_proj, b_proj)


def views_definition():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=alloy.float32)
        fd.add_output(fd.ops.permute(x, dims=[1, 0]))
        fd.add_output(fd.ops.exp(x))
    return fd


# ---- CPU ----------------------------------------------------------------------------------

def test_torch_in_torch_out_on_the_cpu():
    inputs = mlp_inputs("cpu", torch.float32)
    (out,) = mlp_definition(alloy.float32).execute(inputs)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.device.type == "cpu"
    torch.testing.assert_close(out, torch_mlp(*inputs), rtol=1e-4, atol=1e-5)


def test_bf16_on_the_cpu_matches_torch_within_bf16_tolerance():
    inputs = mlp_inputs("cpu")
    fd = mlp_definition()
    (out,) = fd.execute(inputs)
    assert out.dtype == torch.bfloat16
    fd.validate(inputs, [torch_mlp(*inputs)])


def test_views_share_the_input_data_pointer():
    x = torch.arange(12.0).reshape(3, 4)
    transposed, computed = views_definition().execute([x])
    assert transposed.data_ptr() == x.data_ptr()
    assert transposed.stride() == x.t().stride()
    torch.testing.assert_close(transposed, x.t())
    assert computed.data_ptr() != x.data_ptr()
    x[0, 0] = 7.0
    assert transposed[0, 0].item() == 7.0


def test_non_contiguous_and_grad_requiring_inputs():
    x = torch.randn(6, 8, requires_grad=True)
    transposed, computed = views_definition().execute([x[:, ::2]])
    torch.testing.assert_close(computed, x.detach()[:, ::2].exp())


def test_in_place_update_of_a_torch_tensor():
    with alloy.FusionDefinition() as fd:
        p = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        g = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        fd.add_output(p - g * 0.5, alias_input=p)
    param, grad = torch.ones(4), torch.arange(4.0)
    (out,) = fd.execute([param, grad])
    torch.testing.assert_close(param, 1 - 0.5 * torch.arange(4.0))
    assert out.data_ptr() == param.data_ptr()


def test_numpy_and_torch_inputs_mixed_give_the_first_tensors_kind():
    fd = views_definition()
    assert isinstance(fd.execute([torch.ones(2, 2)])[0], torch.Tensor)
    assert isinstance(fd.execute([np.ones((2, 2), np.float32)])[0], np.ndarray)


# ---- CUDA ---------------------------------------------------------------------------------

@needs_cuda
def test_mlp_on_the_gpu_matches_torch():
    inputs = mlp_inputs("cuda")
    fd = mlp_definition()
    (out,) = fd.execute(inputs)
    assert out.is_cuda and out.dtype == torch.bfloat16 and out.device == inputs[0].device
    assert fd.compile_count == 1
    fd.validate(inputs, [torch_mlp(*inputs)])
    fd.validate(inputs)  # against Alloy's CPU reference (a CPU plan of its own)
    compiled = fd.compile_count
    for _ in range(5):
        fd.execute(inputs)
    assert fd.compile_count == compiled  # the cached GPU plan serves every call


@needs_cuda
def test_runs_on_torchs_current_stream():
    fd = views_definition()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.randn(512, 1024, device="cuda")
        for _ in range(3):
            transposed, computed = fd.execute([x])
        total = computed.sum()  # ordered after the run on the same stream, no synchronization needed
    side.synchronize()
    torch.testing.assert_close(total, x.exp().sum(), rtol=1e-4, atol=1e-2)
    assert transposed.data_ptr() == x.data_ptr()


@needs_cuda
def test_alloy_and_torch_share_one_cuda_context():
    """Alloy links the static CUDA runtime, torch the shared one; both must run in the device's
    primary context (else a pointer or stream of one would be foreign to the other). The context
    current after torch's work and after Alloy's is that primary context, and memory crosses both
    ways without copies: Alloy reads torch's tensor, torch reads Alloy's output in place."""
    import ctypes
    driver = ctypes.CDLL("libcuda.so.1")
    x = torch.randn(256, 512, device="cuda")
    torch.cuda.synchronize()

    def current_context():
        ctx = ctypes.c_void_p()
        assert driver.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
        return ctx.value

    def primary_context(index):
        device, ctx = ctypes.c_int(), ctypes.c_void_p()
        assert driver.cuDeviceGet(ctypes.byref(device), index) == 0
        assert driver.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == 0
        driver.cuDevicePrimaryCtxRelease(device)
        return ctx.value

    primary = primary_context(x.device.index)
    assert current_context() == primary, "torch does not run in the primary context"
    fd = views_definition()
    transposed, computed = fd.execute([x])
    assert current_context() == primary, "Alloy left another context current"
    assert transposed.data_ptr() == x.data_ptr()  # a view of torch's memory
    doubled = computed * 2  # torch reads Alloy's buffer on the same stream
    torch.testing.assert_close(doubled, x.exp() * 2)
    ordinal = ctypes.c_int(-1)
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
    assert driver.cuPointerGetAttribute(ctypes.byref(ordinal), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ctypes.c_uint64(computed.data_ptr())) == 0
    assert ordinal.value == x.device.index, "Alloy's output is not on the input's device"


@needs_cuda
def test_explicit_stream_argument():
    fd = views_definition()
    s = torch.cuda.Stream()
    x = torch.randn(64, 64, device="cuda")
    torch.cuda.synchronize()
    _, computed = fd.execute([x], stream=s)
    s.synchronize()
    torch.testing.assert_close(computed, x.exp())


@needs_cuda
def test_cpu_tensors_mixed_with_gpu_tensors_run_on_the_gpu():
    with alloy.FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        b = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        fd.add_output(a + b)
    (out,) = fd.execute([torch.ones(4, device="cuda"), torch.ones(4)])
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), torch.full((4,), 2.0))


@needs_cuda
def test_in_place_update_on_the_gpu():
    with alloy.FusionDefinition() as fd:
        p = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        g = fd.define_tensor(shape=[-1], dtype=alloy.float32)
        fd.add_output(p - g * 0.5, alias_input=p)
    param, grad = torch.ones(1000, device="cuda"), torch.arange(1000.0, device="cuda")
    (out,) = fd.execute([param, grad])
    torch.testing.assert_close(param, 1 - 0.5 * torch.arange(1000.0, device="cuda"))
    assert out.data_ptr() == param.data_ptr()


@needs_cuda
def test_dump_cuda_shows_the_generated_kernels():
    fd = views_definition()
    x = torch.randn(8, 8, device="cuda")
    assert "__global__" in fd.dump("cuda", [x])
    assert "segment" in fd.dump("segments", [x])


@needs_cuda
def test_two_threads_on_one_gpu_definition():
    fd = mlp_definition(alloy.float32)
    inputs = mlp_inputs("cuda", torch.float32)
    expected = torch_mlp(*inputs)
    failures = []

    def work():
        try:
            for _ in range(50):
                (out,) = fd.execute(inputs)
                torch.cuda.current_stream().synchronize()
                torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)
        except Exception as e:  # noqa: BLE001
            failures.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


@needs_cuda
def test_another_gpu_index():
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    fd = views_definition()
    x = torch.randn(4, 4, device="cuda:1")
    transposed, computed = fd.execute([x])
    assert computed.device == x.device
    torch.testing.assert_close(computed, x.exp())
    with pytest.raises(alloy.Error, match="expected the tensors of one run on one device"):
        mixed = alloy.parse("fusion f(a: f32[4], b: f32[4]) {\n  c = add(a, b)\n  return c\n}")
        mixed.execute([torch.ones(4, device="cuda:0"), torch.ones(4, device="cuda:1")])
