"""Waiting on the GPU without stalling: fences, timer queries, and asynchronous reads.

GL calls return before the GPU has run them. A `Fence` marks "everything issued so far" and can
be polled; `read_async` uses one so that an asyncio program keeps running while a result is
computed, then reads it back once it is ready (the read itself then costs only the copy).
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from .device import current_device, get_context
from .errors import RuntimeFailure
from .gl import GL
from .optional import require
from .storage import Buffer

_SIGNALED = (GL.GL_ALREADY_SIGNALED, GL.GL_CONDITION_SATISFIED)
_POLL_SLEEP_S = 0.0002  # between polls once a few bare yields did not suffice


class Fence:
    """Signals once the GPU has finished every command issued before it was made."""

    __slots__ = ("_sync", "_done", "_device")

    def __init__(self) -> None:
        self._device = current_device()  # a sync object belongs to its context
        self._sync = GL.glFenceSync(GL.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        if not self._sync:
            raise RuntimeFailure("internal dlc error: glFenceSync failed")
        self._done = False

    def done(self) -> bool:
        """True once signaled; never blocks (flushes so the GPU does get the commands)."""
        if not self._done:
            self._done = self._client_wait(0)
        return self._done

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until signaled; RuntimeFailure after `timeout_s` seconds (default: forever)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._done:
            step_ns = 100_000_000  # wake up now and then so Ctrl-C is seen
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeFailure(f"the GPU did not finish within {timeout_s} s")
                step_ns = min(step_ns, int(left * 1e9))
            self._done = self._client_wait(step_ns)

    def _client_wait(self, timeout_ns: int) -> bool:
        self._device.activate()
        status = GL.glClientWaitSync(self._sync, GL.GL_SYNC_FLUSH_COMMANDS_BIT, timeout_ns)
        if status == GL.GL_WAIT_FAILED:
            raise RuntimeFailure("internal dlc error: glClientWaitSync failed")
        if status in _SIGNALED:
            GL.glDeleteSync(self._sync)
            self._sync = None
            return True
        return False

    def __del__(self) -> None:
        # A fence never waited on still holds a sync object: free it if we can.
        if getattr(self, "_sync", None):
            try:
                GL.glDeleteSync(self._sync)
            except Exception:
                pass


class TimerQuery:
    """GPU time between `begin()` and `end()` (GL_TIME_ELAPSED); one may run at a time.

    with TimerQuery() as t: ...launches...
    t.elapsed_ms()   # waits for the GPU
    """

    __slots__ = ("_query", "_state")

    def __init__(self) -> None:
        get_context()
        query = ctypes.c_uint(0)
        GL.glGenQueries(1, ctypes.byref(query))
        self._query = query.value
        self._state = "new"

    def begin(self) -> None:
        GL.glBeginQuery(GL.GL_TIME_ELAPSED, self._query)
        self._state = "running"

    def end(self) -> None:
        if self._state != "running":
            raise RuntimeError("TimerQuery.end() without begin()")
        GL.glEndQuery(GL.GL_TIME_ELAPSED)
        self._state = "ended"

    def elapsed_ms(self) -> float:
        """Milliseconds the GPU spent between begin and end; blocks until it is known."""
        if self._state != "ended":
            raise RuntimeError("TimerQuery.elapsed_ms() before end()")
        nanoseconds = ctypes.c_uint64(0)
        GL.glGetQueryObjectui64v(self._query, GL.GL_QUERY_RESULT, ctypes.byref(nanoseconds))
        return nanoseconds.value / 1e6

    def delete(self) -> None:
        if self._query:
            GL.glDeleteQueries(1, ctypes.byref(ctypes.c_uint(self._query)))
            self._query = 0

    def __enter__(self) -> TimerQuery:
        self.begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()


async def read_async(buffer: Buffer, count: int | None = None) -> np.ndarray:
    """`count` float32 values of `buffer` (default all), without blocking the event loop.

    The values are first copied on the GPU into a staging buffer, so later launches may
    overwrite `buffer` while we wait.
    """
    asyncio = require("asyncio")  # the executor imports this module, and asyncio costs ~20 ms

    if count is None:
        count = buffer.nbytes // 4
    staging = Buffer(count * 4, device=buffer.device)
    try:
        staging.copy_from(buffer, count * 4)
        fence = Fence()
        polls = 0
        while not fence.done():
            # Yield bare a few times (cheap when the GPU is nearly done), then sleep a little
            # so a long kernel does not spin a core.
            await asyncio.sleep(0 if polls < 8 else _POLL_SLEEP_S)
            polls += 1
        return staging.download(count)
    finally:
        staging.delete()
