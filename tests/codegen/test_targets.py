"""A codegen target is an object (compiler/codegen/target.py): the pipeline renders through
whatever Target it is given, and a third target defined in one file under tests
(targets/compute_noshared.py: compute shaders without shared memory) compiles a small MLP's
training step and runs it on GL, matching the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
from targets.compute_noshared import KEY, NOSHARED

import dlc
from dlc.compiler.codegen import COMPUTE, TEXTURE, Target, TargetError, compute, get_target, texture
from dlc.compiler.pipeline import Options, Work, run_stages
from dlc.compiler.train_graph import LR

MLP = """
input x: [B, 5]
input labels: [B]
param W1: [5, 8] = he
param b1: [8] = normal(0, 0.5)
param W2: [8, 3] = glorot
param b2: [3] = normal(0, 0.5)
h = tanh(x @ W1 + b1)
logits = h @ W2 + b2
loss cost = softmax_cross_entropy(logits, one_hot(labels, 3))
"""
KINDS = ("elementwise", "reduce", "matmul", "window", "norm", "attention")
BATCH = 6


def _train_program(target):
    work = run_stages(Work(MLP, "mlp.dl"), Options(optimizer=dlc.SGD(0.5), batch_size=BATCH, target=target))
    return work.programs["train"]


def _sources_by_kind(program) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k in program.spec.kernels:
        out.setdefault(k.kind, []).append(program.sources[k.file])
    return out


def test_targets_are_found_by_name_or_passed_as_objects():
    assert get_target("compute") is COMPUTE and get_target("texture") is TEXTURE
    assert get_target(NOSHARED) is NOSHARED
    with pytest.raises(ValueError, match="unknown target 'metal': choose compute or texture"):
        get_target("metal")


def test_each_kind_lowers_on_both_targets_and_the_third_reuses_computes_but_two():
    for kind in KINDS:
        assert callable(COMPUTE.template(kind)) and callable(TEXTURE.template(kind))
        assert COMPUTE.template(kind) is not TEXTURE.template(kind)
        own = kind in ("reduce", "matmul")
        assert (NOSHARED.template(kind) is COMPUTE.template(kind)) is not own, kind
    assert NOSHARED.keys == (KEY, compute.KEY)


def test_a_kind_a_target_has_no_lowering_for_is_an_error_naming_both():
    class Bare(Target):
        name, runtime, keys = "bare", "compute", ("no-such-key",)

        def renderer(self, options):
            return COMPUTE.renderer(options)

        def capabilities(self, options):
            return COMPUTE.capabilities(options)

        def render(self, name, plan, options):
            raise AssertionError("not reached")

    with pytest.raises(TargetError, match="the bare target has no kernel for reduce kernels"):
        Bare().template("reduce")
    assert texture.TextureTargetError is TargetError  # what the web export catches


def test_the_third_target_renders_reduce_and_matmul_without_shared_memory():
    mine, theirs = _train_program(NOSHARED), _train_program("compute")
    assert mine.spec.target == "compute"  # run by the compute executor
    assert [k.kind for k in mine.spec.kernels] == [k.kind for k in theirs.spec.kernels]  # the same fusion
    ours, computes = _sources_by_kind(mine), _sources_by_kind(theirs)
    assert ours["reduce"] and ours["matmul"]
    for kind in ("reduce", "matmul"):
        for text in ours[kind]:
            assert "no shared memory" in text
            assert "shared float" not in text and "barrier()" not in text
    assert any("shared float" in t or "shared vec4" in t for t in computes["matmul"] + computes["reduce"])
    assert ours["elementwise"] == computes["elementwise"]  # the compute target's lowering, reused


@pytest.mark.gl
def test_the_third_target_trains_an_mlp_step_on_gl_like_numpy(gl):
    from dlc.runtime.executor import Executor, LeafStore

    rng = np.random.default_rng(3)
    x = rng.normal(size=(BATCH, 5)).astype(np.float32)
    labels = rng.integers(0, 3, BATCH).astype(np.float32)
    ref = dlc.Session(dlc.compile(MLP), backend="numpy", seed=4)
    start = {name: v.copy() for name, v in ref.params.items()}

    program = _train_program(NOSHARED)
    store = LeafStore()
    for name, v in start.items():
        store.set(name, v)
    executor = Executor(program.spec, program.sources, store)
    feeds = {"x": x, "labels": labels, LR: np.asarray(0.5, np.float32)}
    try:
        for step in range(2):
            (loss,) = executor.run(feeds, {"B": BATCH}, [program.spec.fetch["cost"]], step=True)
            (want,) = ref.train({"x": x, "labels": labels}, optimizer=dlc.SGD(0.5), batch_size=BATCH, steps=1)
            np.testing.assert_allclose(float(loss), want, rtol=1e-5, err_msg=f"step {step}")
            for name, v in ref.params.items():
                got = store.get(name)
                assert not np.allclose(got, start[name]), f"{name} was not updated"
                np.testing.assert_allclose(got, v, rtol=1e-4, atol=1e-6, err_msg=f"{name} after step {step}")
    finally:
        executor.delete()
        store.delete()
