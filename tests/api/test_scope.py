"""dlc.tidy / keep / dispose / memory: the seeds' scopes, on both backends."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dlc


def test_arrays_made_inside_are_disposed_returned_and_kept_survive(backend):
    before = dlc.memory().arrays
    made = []
    with dlc.tidy() as scope:
        a = dlc.array([1.0, -2.0])  # made directly: tracked (dl.tidy semantics)
        c = a.exp().neg()  # op results: tracked
        d = scope.returns(c.relu() + 1)  # "returned": survives
        kept = dlc.keep((a * 3).tanh())  # kept: survives, never disposed automatically
        made += [a, c]
    assert all(x.is_disposed for x in made)
    assert not d.is_disposed and not kept.is_disposed
    np.testing.assert_allclose(d.numpy(), [1.0, 1.0])
    np.testing.assert_allclose(kept.numpy(), np.tanh([3.0, -6.0]), rtol=1e-6)
    assert dlc.memory().arrays == before + 2
    d.dispose()
    kept.dispose()
    assert dlc.memory().arrays == before


def test_nested_scopes_move_returned_arrays_to_the_parent(backend):
    # The seeds' own example (performance tutorial), line by line.
    output = None
    inner_made = []
    with dlc.tidy() as outer:
        a = dlc.array(2.0)
        c = a.exp().neg()

        @dlc.tidy
        def inner():
            e = dlc.array(3.0)
            inner_made.append(e)
            return e * e

        d = inner()
        assert inner_made[0].is_disposed and not d.is_disposed
        assert d._scope is outer  # tracked by the parent now
        output = dlc.keep(d.tanh())
    assert a.is_disposed and c.is_disposed and d.is_disposed
    assert output.item() == pytest.approx(np.tanh(9.0))
    output.dispose()


def test_decorator_forms_and_nested_return_values(backend):
    @dlc.tidy()
    def pair(x):
        t = x + 1
        return {"sum": t.sum(), "parts": [t * 2, (t * 3,)]}

    before = dlc.memory().arrays
    x = dlc.array([1.0, 2.0])
    out = pair(x)
    assert out["sum"].item() == 5.0
    assert out["parts"][0].numpy().tolist() == [4.0, 6.0] and out["parts"][1][0].numpy().tolist() == [6.0, 9.0]
    assert dlc.memory().arrays == before + 4  # x and the three returned; t was disposed
    assert pair.__name__ == "pair"


def test_an_exception_disposes_everything_made_inside(backend):
    made = []
    with pytest.raises(RuntimeError):
        with dlc.tidy() as scope:
            made.append(scope.returns(dlc.array([1.0]) * 2))
            raise RuntimeError("boom")
    assert made[0].is_disposed


def test_arrays_from_outside_a_scope_are_not_touched(backend):
    x = dlc.array([1.0])
    with dlc.tidy():
        y = x + 1
    assert not x.is_disposed and y.is_disposed


def test_memory_counts_arrays_and_bytes(backend):
    gc.collect()
    m0 = dlc.memory()
    a = dlc.zeros([10, 10])
    m1 = dlc.memory()
    assert (m1.arrays - m0.arrays, m1.bytes - m0.bytes) == (1, 400)
    del a  # garbage collection frees an array no scope holds
    gc.collect()
    assert dlc.memory().arrays == m0.arrays and dlc.memory().bytes == m0.bytes


@pytest.mark.gl
def test_thousand_iterations_leave_no_gpu_buffers(gl):
    from dlc.runtime.buffer_pool import pooled_buffers
    from dlc.runtime.storage import live_buffers

    w = dlc.array(np.full((8, 8), 0.1, np.float32))
    x = dlc.ones([4, 8])
    x = x @ w  # warm up: compile the kernels once
    gc.collect()
    dlc.memory()
    start = live_buffers() - pooled_buffers()  # in use (freed ones are pooled for reuse)
    made = []
    for _ in range(1000):
        with dlc.tidy() as scope:
            y = (x @ w).relu()
            z = scope.returns(y.sum() * 2)
            made.append(y)
        z.dispose()
    assert all(y.is_disposed for y in made)
    del made, y, z
    dlc.memory()
    assert live_buffers() - pooled_buffers() == start
    dlc.ops.trim_pool()
    assert pooled_buffers() == 0 and live_buffers() == start


def test_tidy_decorates_coroutines(backend):
    import asyncio

    made = []

    @dlc.tidy
    async def step(x):
        t = x * 2
        made.append(t)
        values = await t.data()  # the scope stays open across the await
        return t + float(values.sum())

    x = dlc.array([1.0, 2.0])
    out = asyncio.run(step(x))
    assert made[0].is_disposed and out.numpy().tolist() == [8.0, 10.0]
