"""Shader storage buffers of float32: allocate, upload, download, copy, zero, free.

A buffer belongs to the device (runtime/device.py) it was made on, and makes that device's
context current before each GL call. Buffers are freed only by `delete()` (no finalizer: a
garbage collector may run on a thread that does not hold the context) or by closing their
device. `live_buffers()` / `live_bytes()` count what is not yet deleted (on one device, or on
all) so tests can check that sessions and eager arrays clean up after themselves; buffers
freed eager arrays left in the pool for reuse (runtime/buffer_pool.py) are counted, as GPU
memory still held (`buffer_pool.pooled_buffers()` says how many of them are pooled).

GL 4.5 direct state access (glNamedBuffer*) is used where the driver has it; a 4.3 driver
without it goes through the copy-read/copy-write binding points instead.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .device import Device, current_device, open_devices
from .elements import storage_floats
from .errors import RuntimeFailure
from .gl import GL

_USAGE = GL.GL_DYNAMIC_COPY  # written and read by the GPU, sometimes by us
_STORED = (np.dtype(np.float32), np.dtype(np.int32))  # uploaded as they are (int32 by its bits)
# A mapped buffer's storage: read by the host through a mapping kept for the buffer's life,
# coherent (a fence's end makes the GPU's writes visible), in host memory.
_MAPPED = 0x0001 | 0x0040 | 0x0080  # MAP_READ | MAP_PERSISTENT | MAP_COHERENT
_CLIENT_STORAGE = 0x0200


def live_buffers(device: Device | None = None) -> int:
    """How many buffers exist on `device` (default: on every open device) that have not
    been deleted, pooled ones included; 0 before any device exists."""
    devices = open_devices() if device is None else [device]
    return sum(d.live_buffers for d in devices)


def live_bytes(device: Device | None = None) -> int:
    """GPU bytes held by buffers not yet deleted on `device` (default: on every open
    device; allocated sizes, at least 4 each)."""
    devices = open_devices() if device is None else [device]
    return sum(d.live_bytes for d in devices)


class OutOfMemory(RuntimeFailure):
    """GL_OUT_OF_MEMORY creating a buffer of `nbytes` bytes."""

    def __init__(self, message: str, nbytes: int):
        super().__init__(message)
        self.nbytes = nbytes


class Buffer:
    """A GPU buffer bound as a shader storage block. Sizes and offsets are in bytes.

    `nbytes` is the size asked for; `capacity` what was allocated (rounded up to a multiple of
    4, at least 4, because GL refuses empty buffers). New contents are undefined unless
    `zero=True`. It lives on `device` (default: the current one).
    """

    __slots__ = ("handle", "nbytes", "capacity", "device", "_dsa", "mapping", "__weakref__")

    def __init__(self, nbytes: int, *, zero: bool = False, device: Device | None = None, mapped: bool = False):
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"buffer size {nbytes} is negative")
        device = current_device() if device is None else device.activate()
        self.device = device
        self._dsa = device.context.has_dsa
        self.nbytes = nbytes
        self.capacity = max(4, (nbytes + 3) // 4 * 4)
        handle = ctypes.c_uint(0)
        self.mapping = 0
        if mapped:  # immutable storage, mapped for reading for its whole life (runtime/readback.py)
            if not self._dsa:
                raise RuntimeFailure("internal dlc error: a mapped buffer needs GL direct state access")
            GL.glCreateBuffers(1, ctypes.byref(handle))
            GL.glNamedBufferStorage(handle.value, self.capacity, None, _MAPPED | _CLIENT_STORAGE)
            pointer = GL.glMapNamedBufferRange(handle.value, 0, self.capacity, _MAPPED)
            self.mapping = ctypes.cast(pointer, ctypes.c_void_p).value or 0 if pointer else 0
            if not self.mapping:
                GL.glDeleteBuffers(1, ctypes.byref(handle))
                raise RuntimeFailure(f"could not map a GPU buffer of {nbytes:,} bytes for reading")
        elif self._dsa:
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
        device.live_buffers += 1
        device.live_bytes += self.capacity
        device.buffers.add(self)
        if zero:
            self.fill_zero()

    @classmethod
    def from_array(cls, array: np.ndarray, device: Device | None = None) -> Buffer:
        """A new buffer holding `array` as float32, an int32 array by its bits (on `device`,
        default the current one)."""
        data = storage_floats(array)
        buffer = cls(data.nbytes, device=device)
        buffer.upload(data)
        return buffer

    def __repr__(self) -> str:
        state = f"handle={self.handle}" if self.handle else "deleted"
        return f"Buffer({self.nbytes} bytes, {state})"

    # ------------------------------------------------------------ data in and out

    def upload(self, array: np.ndarray, offset_bytes: int = 0) -> None:
        """Write `array` (converted to contiguous float32; int32 by its bits) at `offset_bytes`."""
        if type(array) is np.ndarray and array.dtype in _STORED and array.flags.c_contiguous:
            data = array  # as GL stores it already (an eval's feeds, call after call)
        else:
            data = storage_floats(array)
        self._check_range(offset_bytes, data.nbytes, "upload")
        if data.nbytes == 0:
            return
        fast = self.device.activate().fast
        if self._dsa and fast._resolved and fast.buffer_sub_data is not None:
            fast.buffer_sub_data(self.handle, offset_bytes, data.nbytes, data.ctypes.data)
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
        fast = self.device.activate().fast
        if self._dsa and fast._resolved and fast.get_buffer_sub_data is not None:
            fast.get_buffer_sub_data(self.handle, offset_bytes, out.nbytes, out.ctypes.data)
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
        if src.device is not self.device:
            raise ValueError(
                f"copy_from between GL devices {src.device.id} and {self.device.id}: download and upload instead"
            )
        if nbytes == 0:
            return
        device = self.device.activate()
        if self._dsa:
            # the raw entry point where the device resolved one (a training step copies its
            # loss this way every step); the binding's otherwise
            fast = device.fast
            copy = fast.copy_buffer if fast._resolved else None
            if copy is not None:
                copy(src.handle, self.handle, src_offset, dst_offset, nbytes)
            else:
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
        self.device.activate()
        if self._dsa:
            GL.glClearNamedBufferData(self.handle, *args)
        else:
            GL.glBindBuffer(GL.GL_COPY_WRITE_BUFFER, self.handle)
            GL.glClearBufferData(GL.GL_COPY_WRITE_BUFFER, *args)

    def delete(self) -> None:
        """Free the GPU memory; later calls do nothing."""
        if self.handle:
            self.device.activate()
            self.forget_handle(delete=True)

    def forget_handle(self, delete: bool) -> None:
        """Mark the buffer deleted and uncount it; `delete`: glDeleteBuffers too (its device's
        context current). Device.close calls it for every buffer it still has."""
        if not self.handle:
            return
        if delete:  # deleting a mapped buffer unmaps it
            GL.glDeleteBuffers(1, ctypes.byref(ctypes.c_uint(self.handle)))
        self.handle = 0
        self.mapping = 0
        device = self.device
        device.live_buffers -= 1
        device.live_bytes -= self.capacity
        device.buffers.discard(self)

    # ------------------------------------------------------------ checks

    def _check_live(self, what: str) -> None:
        if self.device.closed:
            raise RuntimeFailure(f"{what} on a buffer of GL device {self.device.id}, which was closed")
        if not self.handle:
            raise ValueError(f"{what} on a deleted buffer")

    def _check_range(self, offset: int, nbytes: int, what: str) -> None:
        self._check_live(what)
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise ValueError(
                f"{what} of {nbytes} bytes at offset {offset} does not fit a buffer of {self.nbytes} bytes"
            )
