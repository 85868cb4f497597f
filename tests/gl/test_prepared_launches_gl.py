"""Prepared launches (runtime/launches.py): bindings, uniforms and group counts worked out once
per binding of the dims, for the executor's steps and for eager ops, with the same results."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.emit import programs
from dlc.compiler.pipeline import compile_program
from dlc.runtime import executor as executor_module
from dlc.runtime.executor import Executor, LeafStore

pytestmark = pytest.mark.gl


def _counting(monkeypatch, module, name: str) -> list:
    calls: list = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_launches_are_prepared_once_per_binding_of_the_dims(gl, monkeypatch):
    b = GraphBuilder()
    x = b.input("x", ("B", 5))
    s = b.add("sum", [b.add("exp", [x])], axes=(1,), keepdims=False)
    y = b.add("neg", [b.add("mul", [s, s])])
    prog = compile_program(b.build(), [y])
    ex = Executor(prog.spec, prog.sources, LeafStore())
    prepared = _counting(monkeypatch, executor_module, "kernel_calls")
    rng = np.random.default_rng(0)
    try:
        for rows, runs in ((3, 4), (7, 2), (3, 1)):
            before = len(prepared)
            for _ in range(runs):
                xs = rng.normal(size=(rows, 5)).astype(np.float32)
                (got,) = ex.run({"x": xs}, {"B": rows}, [y])
                want = -(np.exp(xs.astype(np.float64)).sum(axis=1) ** 2)
                np.testing.assert_allclose(got, want, rtol=1e-5)
            # each new binding prepares every kernel once; the runs after it prepare nothing
            assert len(prepared) - before == len(ex.kernels)
    finally:
        ex.delete()


def test_training_steps_reuse_their_prepared_launches_and_copies(gl, monkeypatch):
    model = dlc.compile("input x: [B]\nparam w: [] = 0.5\nparam c: [] = 0\nloss cost = mean(square(x * w + c - 2*x))\n")
    prog = programs(model, train_loss="cost", optimizer="sgd")["train"]
    store = LeafStore()
    store.set("w", np.float32(0.5))
    store.set("c", np.float32(0.0))
    ex = Executor(prog.spec, prog.sources, store)
    prepared = _counting(monkeypatch, executor_module, "kernel_calls")
    copies = _counting(monkeypatch, executor_module, "copy_calls")
    xs = np.linspace(-1, 1, 6).astype(np.float32)
    w, c, lr = 0.5, 0.0, 0.1
    try:
        for _ in range(5):
            (loss,) = ex.run({"x": xs, "$lr": np.float32(lr)}, {"B": 6}, [prog.spec.roots[0]], step=True)
            r = xs.astype(np.float64) * w + c - 2 * xs
            assert float(loss) == pytest.approx(np.mean(r * r), rel=1e-5)
            w, c = w - lr * np.mean(2 * r * xs), c - lr * np.mean(2 * r)  # SGD on the closed-form gradient
            assert store.get("w") == pytest.approx(w, rel=1e-5, abs=1e-6)
            assert store.get("c") == pytest.approx(c, rel=1e-5, abs=1e-6)
        assert len(prepared) == len(ex.kernels)
        assert len(copies) == (1 if prog.spec.copies else 0)
    finally:
        ex.delete()
        store.delete()


def test_eager_ops_prepare_once_per_length_and_match_numpy(gl):
    from dlc.backends import gl_eager

    rng = np.random.default_rng(1)
    for n in (8, 8, 13, 8, 5000):
        a_np, b_np = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
        a, b = dlc.array(a_np, backend="gl"), dlc.array(b_np, backend="gl")
        np.testing.assert_allclose((a * 2 + b).numpy(), a_np * 2 + b_np, rtol=1e-6)
        np.testing.assert_allclose(dlc.ops.sum(a).numpy(), a_np.astype(np.float64).sum(), rtol=1e-4, atol=1e-4)
        e = np.exp(a_np - a_np.max())
        np.testing.assert_allclose(dlc.ops.softmax(a).numpy(), e / e.sum(), rtol=1e-5, atol=1e-7)
    lengths = [
        {dict(key).get(d) for key in c.prepared for d in dict(key)}
        for c in gl_eager._compiled.values()
        if c.prepared and any(len(dict(key)) for key in c.prepared)
    ]
    # an op called at lengths 8, 13 and 5000 holds one prepared binding per length
    assert any({8, 13, 5000} <= seen for seen in lengths)


def test_an_epochs_last_batch_and_back_reuse_their_prepared_launches(gl, monkeypatch):
    b = GraphBuilder()
    x = b.input("x", ("B", 3))
    y = b.add("sum", [b.add("exp", [x])], axes=(1,), keepdims=False)
    prog = compile_program(b.build(), [y])
    ex = Executor(prog.spec, prog.sources, LeafStore())
    prepared = _counting(monkeypatch, executor_module, "kernel_calls")
    rng = np.random.default_rng(1)
    try:
        for rows in (8, 5, 8, 5, 8):  # full batches and an epoch's smaller last one, alternating
            xs = rng.normal(size=(rows, 3)).astype(np.float32)
            (got,) = ex.run({"x": xs}, {"B": rows}, [y])
            np.testing.assert_allclose(got, np.exp(xs.astype(np.float64)).sum(axis=1), rtol=1e-5)
        assert len(prepared) == 2 * len(ex.kernels)  # each binding prepared once
    finally:
        ex.delete()


def _slots(ex: Executor, k: int) -> tuple[set, set]:
    kernel = ex.kernels[k]
    return set(kernel.slots), {ex.tensors[t].slot for t in kernel.writes}


def test_barriers_separate_dependent_kernels_and_only_those(gl):
    """Between two kernels with no barrier between them, neither reads or overwrites what the
    other writes; the quadratic's three parameter updates share one stretch without one."""
    model = dlc.compile("samples/quadratic.dl")
    prog = programs(model, train_loss="cost", optimizer="sgd")["train"]
    store = LeafStore()
    for name in model.params:
        store.set(name, np.float32(0.5))
    ex = Executor(prog.spec, prog.sources, store)
    try:
        ex.prepare({"B": 11})
        launches = ex._with_barriers(ex._all)
        barrier = [bool(p.calls) and p.calls[-1][1] == (executor_module.BARRIER_BITS,) for p in launches]
        assert barrier[-1]
        stretches, current = [], []
        for k, ends in zip(ex._all, barrier):
            current.append(k)
            if ends:
                stretches.append(current)
                current = []
        for stretch in stretches:
            for i, a in enumerate(stretch):
                for b in stretch[i + 1 :]:
                    (ra, wa), (rb, wb) = _slots(ex, a), _slots(ex, b)
                    assert not (rb & wa or wb & (ra | wa)), (ex.kernels[a].name, ex.kernels[b].name)
        param_slots = {s for s, slot in enumerate(ex.slots) if slot.kind == "param"}
        updates = [k for k in ex._all if _slots(ex, k)[1] & param_slots]
        assert len(updates) == 3
        assert any(set(updates) <= set(s) for s in stretches), stretches
        assert len(stretches) < len(ex.kernels)
    finally:
        ex.delete()
