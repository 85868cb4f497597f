"""Shader storage buffers of float32: allocate, upload, download, copy, zero, free.

Buffers are freed only by `delete()` (no finalizer: a garbage collector may run on a thread
that does not hold the context). `live_buffers()` / `live_bytes()` count what is not yet
deleted so tests can check that sessions and eager arrays clean up after themselves.

GL 4.5 direct state access (glNamedBuffer*) is used where the driver has it; a 4.3 driver
without it goes through the copy-read/copy-write binding points instead.
"""

from __future__ import annotations

import ctypes

import numpy as np

from dlc.runtime.context import get_context
from dlc.runtime.errors import RuntimeFailure
from dlc.runtime.gl import GL

_USAGE = GL.GL_DYNAMIC_COPY  # written and read by the GPU, sometimes by us
_live_count = 0
_live_bytes = 0


def live_buffers() -> int:
    """How many buffers exist that have not been deleted."""
    return _live_count


def live_bytes() -> int:
    """GPU bytes held by buffers not yet deleted (allocated sizes, at least 4 each)."""
    return _live_bytes


class OutOfMemory(RuntimeFailure):
    """GL_OUT_OF_MEMORY creating a buffer of `nbytes` bytes."""

    def __init__(self, message: str, nbytes: int):
        super().__init__(message)
        self.nbytes = nbytes


class Buffer:
    """A GPU buffer bound as a shader storage block. Sizes and offsets are in bytes.

    `nbytes` is the size asked for; `capacity` what was allocated (rounded up to a multiple of
    4, at least 4, because GL refuses empty buffers). New contents are undefined unless
    `zero=True`.
    """

    __slots__ = ("handle", "nbytes", "capacity", "_dsa")

    def __init__(self, nbytes: int, *, zero: bool = False):
        global _live_count, _live_bytes
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"buffer size {nbytes} is negative")
        ctx = get_context()
        self._dsa = ctx.has_dsa
        self.nbytes = nbytes
        self.capacity = max(4, (nbytes + 3) // 4 * 4)
        handle = ctypes.c_uint(0)
        if self._dsa:
            GL.glCreateBuffers(1, ctypes.byref(handle))
            GL.glNamedBufferData(handle.value, self.capacity, None, _USAGE)
        else:
            GL.glGenBuffers(1, ctypes.byref(handle))
            GL.glBindBuffer(GL.GL_COPY_WRITE_BUFFER, handle.value)
            GL.glBufferData(GL.GL_COPY_WRITE_BUFFER, self.capacity, None, _USAGE)
        self.handle = handle.value
        if GL.glGetError() == GL.GL_OUT_OF_MEMORY:
            GL.glDeleteBuffers(1, ctypes.byref(handle))
            self.handle = 0
            raise OutOfMemory(f"out of GPU memory allocating a buffer of {nbytes:,} bytes", nbytes)
        _live_count += 1
        _live_bytes += self.capacity
        if zero:
            self.fill_zero()

    @classmethod
    def from_array(cls, array: np.ndarray) -> Buffer:
        """A new buffer holding `array` as float32."""
        data = np.ascontiguousarray(array, dtype=np.float32)
        buffer = cls(data.nbytes)
        buffer.upload(data)
        return buffer

    def __repr__(self) -> str:
        state = f"handle={self.handle}" if self.handle else "deleted"
        return f"Buffer({self.nbytes} bytes, {state})"

    # ------------------------------------------------------------ data in and out

    def upload(self, array: np.ndarray, offset_bytes: int = 0) -> None:
        """Write `array` (converted to contiguous float32) at `offset_bytes`."""
        data = np.ascontiguousarray(array, dtype=np.float32)
        self._check_range(offset_bytes, data.nbytes, "upload")
        if data.nbytes == 0:
            return
        pointer = ctypes.c_void_p(data.ctypes.data)
        if self._dsa:
            GL.glNamedBufferSubData(self.handle, offset_bytes, data.nbytes, pointer)
        else:
            GL.glBindBuffer(GL.GL_COPY_WRITE_BUFFER, self.handle)
            GL.glBufferSubData(GL.GL_COPY_WRITE_BUFFER, offset_bytes, data.nbytes, pointer)

    def download(self, count: int | None = None, offset_bytes: int = 0) -> np.ndarray:
        """Read `count` float32 values (default: all from the offset on); waits for the GPU."""
        if count is None:
            count = max(self.nbytes - offset_bytes, 0) // 4
        out = np.empty(int(count), dtype=np.float32)
        self._check_range(offset_bytes, out.nbytes, "download")
        if out.nbytes == 0:
            return out
        pointer = ctypes.c_void_p(out.ctypes.data)
        if self._dsa:
            GL.glGetNamedBufferSubData(self.handle, offset_bytes, out.nbytes, pointer)
        else:
            GL.glBindBuffer(GL.GL_COPY_READ_BUFFER, self.handle)
            GL.glGetBufferSubData(GL.GL_COPY_READ_BUFFER, offset_bytes, out.nbytes, pointer)
        return out

    def copy_from(self, src: Buffer, nbytes: int | None = None, src_offset: int = 0, dst_offset: int = 0) -> None:
        """Copy on the GPU from `src` (default: the rest of `src` from `src_offset`)."""
        if nbytes is None:
            nbytes = src.nbytes - src_offset
        src._check_range(src_offset, nbytes, "copy source")
        self._check_range(dst_offset, nbytes, "copy destination")
        if src is self and abs(src_offset - dst_offset) < nbytes:
            raise ValueError("copy_from within one buffer needs ranges that do not overlap")
        if nbytes == 0:
            return
        if self._dsa:
            GL.glCopyNamedBufferSubData(src.handle, self.handle, src_offset, dst_offset, nbytes)
        else:
            GL.glBindBuffer(GL.GL_COPY_READ_BUFFER, src.handle)
            GL.glBindBuffer(GL.GL_COPY_WRITE_BUFFER, self.handle)
            GL.glCopyBufferSubData(GL.GL_COPY_READ_BUFFER, GL.GL_COPY_WRITE_BUFFER, src_offset, dst_offset, nbytes)

    def fill_zero(self) -> None:
        """Set every byte to zero, on the GPU."""
        self._check_live("fill_zero")
        # R8UI clears any byte count; with no data pointer GL writes zeros.
        args = (GL.GL_R8UI, GL.GL_RED_INTEGER, GL.GL_UNSIGNED_BYTE, None)
        if self._dsa:
            GL.glClearNamedBufferData(self.handle, *args)
        else:
            GL.glBindBuffer(GL.GL_COPY_WRITE_BUFFER, self.handle)
            GL.glClearBufferData(GL.GL_COPY_WRITE_BUFFER, *args)

    def delete(self) -> None:
        """Free the GPU memory; later calls do nothing."""
        global _live_count, _live_bytes
        if not self.handle:
            return
        GL.glDeleteBuffers(1, ctypes.byref(ctypes.c_uint(self.handle)))
        self.handle = 0
        _live_count -= 1
        _live_bytes -= self.capacity

    # ------------------------------------------------------------ checks

    def _check_live(self, what: str) -> None:
        if not self.handle:
            raise ValueError(f"{what} on a deleted buffer")

    def _check_range(self, offset: int, nbytes: int, what: str) -> None:
        self._check_live(what)
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise ValueError(
                f"{what} of {nbytes} bytes at offset {offset} does not fit a buffer of {self.nbytes} bytes"
            )
