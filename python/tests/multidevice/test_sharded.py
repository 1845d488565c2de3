"""Sharded fusions from Python, one process per device. Runs in python_tests (a job of one: a mesh
of one device) and under `mpirun -n 2` and `-n 4` (python_mpi_tests_np*), where every rank runs
every test in the same order (a test that communicates is collective) and checks its own part
against NumPy computed from the whole tensors, which every rank makes from the same seed."""
import json
import os

import numpy as np
import pytest

import alloy
from alloy import distributed

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples")

RANK = distributed.rank()
SIZE = distributed.world_size()
MESH = list(range(SIZE))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def whole_mlp_inputs(rng, t, d, f):
    x = rng.standard_normal((t, d)).astype(np.float32)
    w_fc = (rng.standard_normal((f, d)) * 0.05).astype(np.float32)
    b_fc = rng.standard_normal(f).astype(np.float32)
    w_proj = (rng.standard_normal((d, f)) * 0.05).astype(np.float32)
    b_proj = rng.standard_normal(d).astype(np.float32)
    return [x, w_fc, b_fc, w_proj, b_proj]


def mlp_reference(x, w_fc, b_fc, w_proj, b_proj):
    return gelu_tanh(x @ w_fc.T + b_fc) @ w_proj.T + b_proj


def define_tp_mlp(d=64, f=64 * SIZE):
    with alloy.FusionDefinition("tp_mlp_py") as fd:
        x = fd.define_tensor(name="x", shape=["T", d], dtype=alloy.float32, mesh=MESH)
        w_fc = fd.define_tensor(name="w_fc", shape=[f, d], dtype=alloy.float32, mesh=MESH, placement=alloy.Shard(0))
        b_fc = fd.define_tensor(name="b_fc", shape=[f], dtype=alloy.float32, mesh=MESH, placement="shard(axis=0)")
        w_proj = fd.define_tensor(name="w_proj", shape=[d, f], dtype=alloy.float32, mesh=MESH, placement=alloy.Shard(1))
        b_proj = fd.define_tensor(name="b_proj", shape=[d], dtype=alloy.float32, mesh=MESH, placement=alloy.Replicate())
        h = fd.ops.gelu(fd.ops.linear(x, w_fc, b_fc), approximate="tanh")
        fd.add_output(fd.ops.linear(h, w_proj, b_proj))
    return fd


def test_the_tensor_parallel_mlp_defined_in_python_matches_numpy():
    fd = define_tp_mlp()
    whole = whole_mlp_inputs(np.random.default_rng(7), 12, 64, 64 * SIZE)
    (y,) = fd.execute(fd.local_inputs(whole))
    assert fd.output_shardings == [(MESH, "replicated")]
    np.testing.assert_allclose(y, mlp_reference(*whole), rtol=1e-4, atol=1e-4)


def test_the_example_file_runs_on_local_parts():
    fd = alloy.load(os.path.join(EXAMPLES, "tp_mlp.fusion"))
    mesh = fd.input_shardings[0][0]
    if SIZE < len(mesh):
        pytest.skip(f"examples/tp_mlp.fusion has a mesh of {len(mesh)}; this job has {SIZE} process(es)")
    whole = whole_mlp_inputs(np.random.default_rng(3), 8, 256, 1024)
    outputs = fd.execute(fd.local_inputs(whole))
    if RANK not in mesh:
        assert outputs == []  # a rank outside the mesh has no part
        return
    np.testing.assert_allclose(outputs[0], mlp_reference(*whole), rtol=1e-4, atol=1e-4)


def test_a_reduction_over_the_sharded_axis_is_reduced_over_the_mesh():
    with alloy.FusionDefinition("row_sums") as fd:
        x = fd.define_tensor([6, 4 * SIZE], alloy.float64, mesh=MESH, placement=alloy.Shard(1))
        fd.add_output(fd.ops.sum(fd.ops.mul(x, x), dims=[1]))
        fd.add_output(fd.ops.exp(x))
    whole = np.random.default_rng(11).standard_normal((6, 4 * SIZE))
    total, e = fd.execute(fd.local_inputs([whole]))
    np.testing.assert_allclose(total, (whole * whole).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(e, np.exp(distributed.local_part(whole, MESH, 1)), rtol=1e-12)
    assert fd.output_shardings == [(MESH, "replicated"), (MESH, "shard(axis=1)")]


@pytest.mark.skipif(SIZE == 1, reason="in a job of one the whole tensor is the part")
def test_wrong_local_part_on_one_rank_fails_every_rank_without_a_hang():
    fd = define_tp_mlp()
    whole = whole_mlp_inputs(np.random.default_rng(5), 4, 64, 64 * SIZE)
    parts = fd.local_inputs(whole)
    last = SIZE - 1
    if RANK == last:
        parts[1] = whole[1]  # the whole weight where its part belongs
    with pytest.raises(alloy.Error) as failure:
        fd.execute(parts)
    if RANK == last:
        assert "w_fc" in str(failure.value)
    else:
        assert f"rank {last} of the mesh failed" in str(failure.value)
    # the job goes on: the next run with the right parts succeeds on every rank
    (y,) = fd.execute(fd.local_inputs(whole))
    np.testing.assert_allclose(y, mlp_reference(*whole), rtol=1e-4, atol=1e-4)


def define_row_sums(options=None):
    with alloy.FusionDefinition("row_sums", options=options) as fd:
        x = fd.define_tensor(shape=[-1, 2 * SIZE], dtype=alloy.float32, mesh=MESH, placement=alloy.Shard(1))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    return fd


@pytest.mark.parametrize("bad", ["one input too many", "not a sequence", "None", "a bad trace"])
def test_wrong_arguments_on_one_rank_fail_every_rank_without_a_hang(bad):
    fd = define_row_sums()
    whole = np.arange(8 * SIZE, dtype=np.float32).reshape(4, 2 * SIZE)
    parts = fd.local_inputs([whole])
    last = SIZE - 1
    args, kwargs = [parts], {}
    if RANK == last:
        args = {"one input too many": [parts + parts], "not a sequence": [42], "None": [[None]], "a bad trace": [parts]}[bad]
        kwargs = {"trace": 123} if bad == "a bad trace" else {}
    with pytest.raises(alloy.Error) as failure:
        fd.execute(*args, **kwargs)
    if RANK != last:
        assert f"rank {last} of the mesh failed before communicating" in str(failure.value)
    np.testing.assert_array_equal(fd.execute(parts)[0], whole.sum(axis=1))  # every rank goes on together


def test_on_change_a_change_or_a_failure_on_one_rank_is_agreed_on_not_waited_for():
    fd = define_row_sums(options={"agreement": "on_change"})
    whole = np.arange(8 * SIZE, dtype=np.float32).reshape(4, 2 * SIZE)
    parts = fd.local_inputs([whole])
    last = SIZE - 1
    np.testing.assert_array_equal(fd.execute(parts)[0], whole.sum(axis=1))
    if SIZE > 1:  # one rank's part of another size, the others' as agreed last
        mine = parts if RANK != last else fd.local_inputs([np.ones((5, 2 * SIZE), np.float32)])
        with pytest.raises(alloy.Error, match="the ranks of the job disagree on the bound sizes"):
            fd.execute(mine)
    mine = parts if RANK != last else [parts[0].astype(np.float64)]  # a user error on one rank
    with pytest.raises(alloy.Error) as failure:
        fd.execute(mine)
    assert ("expected dtype f32" if RANK == last else f"rank {last} of the mesh failed") in str(failure.value)
    np.testing.assert_array_equal(fd.execute(parts)[0], whole.sum(axis=1))


@pytest.mark.parametrize("pipeline, program_says", [
    ("off", None),
    ("chunks=2", "all_gather -> linear t0: 2 chunks (--pipeline chunks=2)"),
    ("ring", "all_gather -> linear t0: ring, --pipeline ring"),
])
def test_the_pipeline_option_of_a_definition_shapes_its_program(pipeline, program_says):
    # tokens split over the mesh, gathered in front of a column-parallel linear: a pair to pipeline
    with alloy.FusionDefinition("gathered_linear", options={"pipeline": pipeline}) as fd:
        x = fd.define_tensor(name="x", shape=[4 * SIZE, 64], dtype=alloy.float32, mesh=MESH, placement=alloy.Shard(0))
        w = fd.define_tensor(name="w", shape=[256 * SIZE, 64], dtype=alloy.float32, mesh=MESH, placement=alloy.Shard(0))
        fd.add_output(fd.ops.linear(x, w))
    rng = np.random.default_rng(13)
    whole = [rng.standard_normal((4 * SIZE, 64)).astype(np.float32), rng.standard_normal((256 * SIZE, 64)).astype(np.float32)]
    parts = fd.local_inputs(whole)
    program = fd.dump("program", parts)
    if program_says is None:
        assert "Communicate segment 0: all_gather(axis=0) x" in program, program
        assert "For i in" not in program and "Ring s in" not in program, program
    else:
        assert program_says in program, program
    (y,) = fd.execute(parts)
    np.testing.assert_allclose(y, distributed.local_part(whole[0] @ whole[1].T, MESH, 1), rtol=1e-4, atol=1e-4)


def test_a_traced_run_is_one_file_written_by_rank_zero_with_a_process_per_rank(tmp_path):
    # the gathered linear in two chunks: every rank's gathers and GEMMs, each on its stream
    with alloy.FusionDefinition("traced_linear", options={"pipeline": "chunks=2"}) as fd:
        x = fd.define_tensor(name="x", shape=[4 * SIZE, 64], dtype=alloy.float32, mesh=MESH, placement=alloy.Shard(0))
        w = fd.define_tensor(name="w", shape=[256 * SIZE, 64], dtype=alloy.float32, mesh=MESH, placement=alloy.Shard(0))
        fd.add_output(fd.ops.linear(x, w))
    rng = np.random.default_rng(17)
    whole = [rng.standard_normal((4 * SIZE, 64)).astype(np.float32), rng.standard_normal((256 * SIZE, 64)).astype(np.float32)]
    path = tmp_path / "trace.json"  # (each rank's own folder: only rank 0 writes)
    (y,) = fd.execute(fd.local_inputs(whole), trace=path)
    np.testing.assert_allclose(y, distributed.local_part(whole[0] @ whole[1].T, MESH, 1), rtol=1e-4, atol=1e-4)
    if RANK != 0:
        assert not path.exists()
        return
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    assert {e["pid"] for e in events} == set(range(SIZE))
    for rank in range(SIZE):
        names = {(e["name"], e["tid"]) for e in events if e["ph"] == "X" and e["pid"] == rank}
        if SIZE > 1:
            assert ("all_gather x chunk 1", 1) in names, names
        assert any(name.startswith("linear t0 chunk 1") and tid not in (0, 1, 1000) for name, tid in names), names


def test_ranks_outside_the_mesh_take_part_in_a_traced_run(tmp_path):
    if SIZE < 3:
        pytest.skip("needs a rank outside a mesh of two")
    fd = alloy.load(os.path.join(EXAMPLES, "tp_mlp.fusion"))
    whole = whole_mlp_inputs(np.random.default_rng(3), 8, 256, 1024)
    outputs = fd.execute(fd.local_inputs(whole), trace=tmp_path / "t.json")
    assert (outputs == []) == (RANK >= 2)
    if RANK == 0:
        with open(tmp_path / "t.json") as f:
            events = json.load(f)["traceEvents"]
        assert {e["pid"] for e in events} == set(range(SIZE))
        assert not [e for e in events if e["ph"] == "X" and e["pid"] >= 2]


def test_a_mesh_larger_than_the_job_names_the_launch_that_would_hold_it():
    with alloy.FusionDefinition("too_big") as fd:
        x = fd.define_tensor([4 * (SIZE + 1)], alloy.float32, mesh=list(range(SIZE + 1)), placement=alloy.Shard(0))
        fd.add_output(fd.ops.neg(x))
    with pytest.raises(alloy.Error, match=f"mpirun -n {SIZE + 1}"):
        fd.execute([np.zeros(4, np.float32)])


def test_placement_mistakes_are_located_errors():
    with pytest.raises(alloy.Error, match="test_sharded.py:[0-9]+:[0-9]+: define_tensor: a placement was given without a mesh"):
        with alloy.FusionDefinition() as fd:
            fd.define_tensor([4], placement=alloy.Shard(0))
    with pytest.raises(alloy.Error, match="shard axis 2 is out of range for a tensor of rank 2"):
        with alloy.FusionDefinition() as fd:
            fd.define_tensor([4, 4], mesh=[0], placement=alloy.Shard(2))
    with pytest.raises(alloy.Error, match="device 0 appears twice in the mesh"):
        with alloy.FusionDefinition() as fd:
            fd.define_tensor([4], mesh=[0, 0])
    with pytest.raises(alloy.Error, match="expected Shard"):
        with alloy.FusionDefinition() as fd:
            fd.define_tensor([4], mesh=[0], placement="diagonal")
    with pytest.raises(alloy.Error, match="axis 0 has 5 elements, which do not split evenly over a mesh of 2 devices"):
        distributed.local_part(np.zeros((5, 4)), [1, 0], 0, "input 'x'")


def test_the_process_is_mpis_place():
    assert 0 <= RANK < SIZE
    assert distributed.is_initialized() == (SIZE > 1)
    assert alloy.distributed.local_rank() >= 0
