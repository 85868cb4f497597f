"""Fences, timer queries and asynchronous reads."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gl


@pytest.fixture
def gl(gl_context):
    from dlc.runtime import storage, sync

    return storage, sync


def test_fence_becomes_done(gl):
    storage, sync = gl
    buffer = storage.Buffer.from_array(np.arange(1000))
    try:
        buffer.fill_zero()
        fence = sync.Fence()
        deadline = time.monotonic() + 30
        while not fence.done():
            assert time.monotonic() < deadline, "fence never signaled"
            time.sleep(0.001)
        assert fence.done()  # stays done
        later = sync.Fence()
        later.wait(timeout_s=30)
        assert later.done()
    finally:
        buffer.delete()


def test_timer_query_gives_a_non_negative_time(gl):
    storage, sync = gl
    buffer = storage.Buffer(1 << 16)
    timer = sync.TimerQuery()
    try:
        with pytest.raises(RuntimeError):
            timer.elapsed_ms()
        with timer:
            buffer.fill_zero()
        elapsed = timer.elapsed_ms()
        assert isinstance(elapsed, float) and elapsed >= 0.0
    finally:
        timer.delete()
        buffer.delete()


def test_read_async_returns_the_values(gl):
    storage, sync = gl
    data = np.random.default_rng(1).standard_normal(333).astype(np.float32)
    buffer = storage.Buffer.from_array(data)
    live = storage.live_buffers()

    async def main():
        task = asyncio.ensure_future(sync.read_async(buffer))
        await asyncio.sleep(0)  # the read has issued its GPU copy by now
        buffer.upload(np.zeros_like(data))  # so overwriting the source changes nothing
        first = await task
        part = await sync.read_async(buffer, 5)
        return first, part

    try:
        first, part = asyncio.run(main())
        np.testing.assert_array_equal(first, data)
        np.testing.assert_array_equal(part, np.zeros(5))
        assert storage.live_buffers() == live  # the staging buffers are freed
    finally:
        buffer.delete()
