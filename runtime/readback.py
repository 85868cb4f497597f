"""Reading a program's fetches back in one wait: a persistently mapped host buffer.

Each fetch is copied on the GPU into its place in one buffer that stays mapped in host
memory (GL 4.4 `glBufferStorage` with MAP_PERSISTENT | MAP_COHERENT, CLIENT_STORAGE), one
fence follows the copies, and once it signals the values are copied out of the mapping with
NumPy. So an eval costs one wait on the GPU whatever its fetch count, and no GL read call a
fetch (each of which waits on its own). Where the driver lacks buffer storage (GL 4.3),
`Readback.make` returns None and the executor reads each fetch with `Buffer.download`.

The hot calls (the copies, the fence and its wait) go through raw ctypes entry points
resolved once per device, as the launch loop's do (runtime/gl.py `Fast`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from .device import Device
from .errors import RuntimeFailure
from .gl import _proc_address
from .storage import Buffer

_SYNC_GPU_COMMANDS_COMPLETE = 0x9117
_SYNC_FLUSH_COMMANDS_BIT = 0x00000001
_SIGNALED = (0x911A, 0x911C)  # GL_ALREADY_SIGNALED, GL_CONDITION_SATISFIED
_WAIT_FAILED = 0x911D
_WAIT_STEP_NS = 100_000_000  # wake now and then so Ctrl-C is seen


class _SyncCalls:
    """glFenceSync / glClientWaitSync / glDeleteSync as raw ctypes calls (they return values,
    which `Fast`'s void entry points do not)."""

    def __init__(self) -> None:
        functype = getattr(ctypes, "WINFUNCTYPE", ctypes.CFUNCTYPE)

        def entry(symbol: str, restype, *argtypes):
            address = _proc_address(symbol)
            if not address:
                raise RuntimeFailure(f"OpenGL entry point {symbol} not found")
            return functype(restype, *argtypes)(address)

        self.fence = entry("glFenceSync", ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)
        self.wait = entry("glClientWaitSync", ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint64)
        self.delete = entry("glDeleteSync", None, ctypes.c_void_p)

    @staticmethod
    def of(device: Device) -> _SyncCalls:
        calls = getattr(device, "_sync_calls", None)
        if calls is None:
            calls = device._sync_calls = _SyncCalls()
        return calls


class Readback:
    """A mapped host buffer of `floats` floats on `device` that fetches are copied into.

    `read(sources)` takes (buffer handle, count) pairs, copies each to consecutive places in
    the mapping, waits once, and returns a new array of each's `count` floats."""

    __slots__ = ("buffer", "floats", "_view", "_sync", "_copy")

    @classmethod
    def make(cls, device: Device, floats: int) -> Readback | None:
        """A readback of at least `floats` floats, or None where the driver cannot map
        buffers persistently (or has no raw copy entry point)."""
        ctx = device.context
        storage = ctx.gl_version >= (4, 4) or "GL_ARB_buffer_storage" in ctx.extensions
        fast = device.fast
        if not (storage and ctx.has_dsa and fast._resolved and fast.copy_buffer is not None):
            return None
        return cls(device, floats)

    def __init__(self, device: Device, floats: int) -> None:
        self.floats = max(int(floats), 1)
        self.buffer = Buffer(4 * self.floats, device=device, mapped=True)
        self._view = np.ctypeslib.as_array((ctypes.c_float * self.floats).from_address(self.buffer.mapping))
        self._sync = _SyncCalls.of(device)
        self._copy = device.fast.copy_buffer

    def read(self, sources: Sequence[tuple[int, int]], shapes: Sequence[tuple] | None = None) -> list[np.ndarray]:
        """Copies of `count` floats from the start of each (buffer handle, count), in one wait;
        each given its shape in `shapes` where given."""
        self.buffer.device.activate()
        return self.read_current(sources, shapes)

    def read_current(self, sources: Sequence[tuple[int, int]], shapes: Sequence[tuple] | None = None) -> list:
        """`read` where the caller has made the buffer's device current (an executor's run)."""
        if not self.buffer.handle:
            raise RuntimeFailure("internal dlc error: reading through a deleted readback buffer")
        copy, target, at, floats = self._copy, self.buffer.handle, 0, self.floats
        for handle, count in sources:
            end = at + count
            if end > floats:
                raise RuntimeFailure(f"internal dlc error: more floats read than a readback of {floats} holds")
            if count:
                copy(handle, target, 0, 4 * at, 4 * count)
            at = end
        self.wait()
        out, at = [], 0
        view = self._view
        for i, (_, count) in enumerate(sources):
            value = view[at : at + count].copy()
            out.append(value if shapes is None else value.reshape(shapes[i]))
            at += count
        return out

    def wait(self) -> None:
        """Block until the GPU has done everything issued so far (the copies above)."""
        sync = self._sync
        fence = sync.fence(_SYNC_GPU_COMMANDS_COMPLETE, 0)
        if not fence:
            raise RuntimeFailure("internal dlc error: glFenceSync failed")
        try:
            while True:
                status = sync.wait(fence, _SYNC_FLUSH_COMMANDS_BIT, _WAIT_STEP_NS)
                if status in _SIGNALED:
                    return
                if status == _WAIT_FAILED:
                    raise RuntimeFailure("internal dlc error: glClientWaitSync failed")
        finally:
            sync.delete(fence)

    def delete(self) -> None:
        """Free the buffer (and its mapping); later calls do nothing."""
        self._view = None
        self.buffer.delete()
