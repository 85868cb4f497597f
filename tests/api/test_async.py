"""Non-blocking reads: `await a.data()` lets other coroutines run while the GPU computes."""

from __future__ import annotations

import asyncio

import numpy as np

import dlc


def test_other_tasks_run_while_a_read_is_pending(backend):
    n = 192 if backend == "gl" else 32
    x = np.random.default_rng(0).uniform(-1, 1, (n, n)).astype(np.float32) / n
    a = dlc.array(x)
    want = x
    y = a
    for _ in range(4):  # queue a good deal of GPU work; nothing waits for it yet
        y = (y @ a).tanh()
        want = np.tanh(want @ x)
    ticks = 0
    done = asyncio.Event()

    async def counter():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def main():
        task = asyncio.create_task(counter())
        await asyncio.sleep(0)
        start = ticks
        values = await y.data()
        during = ticks - start
        done.set()
        await task
        return values, during

    values, during = asyncio.run(main())
    assert during >= 1  # the counter ran while the read was pending
    np.testing.assert_allclose(values, want, rtol=1e-4, atol=1e-6)
    assert not y.is_disposed  # reading does not consume the array (unlike the seeds' GPU texture)
