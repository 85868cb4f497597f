"""Freed eager buffers kept for reuse: one bounded pool per GL device, keyed by size class.

An eager op (`dlc.ops`, dlc/backends/gl_eager.py) writes its result to a buffer taken from the pool of
the device it runs on; when the result's array dies its buffer goes back, so `a + b` in a loop
reuses the buffer of a result that was dropped instead of creating one (glCreateBuffers +
glNamedBufferData, then glDeleteBuffers, through the GL binding: a large part of a small op's host
time). Sizes are rounded up to a class (`size_class`: 4 steps per power of two, at least
`MIN_CLASS` bytes) so that buffers serve any request of their class.

Why reuse is safe without waiting for the GPU: a pooled buffer may still be read by queued
kernels, but it is only handed out as the *output* of a later op, which writes it through
commands issued after those reads on the same context: GL runs them in order (and every eager
launch ends with a memory barrier). Host writes (uploads) never target a pooled buffer: they
go to fresh buffers (`fresh`), which join the pool when their array dies.

Accounting: pooled buffers are still GPU memory, so `runtime.storage.live_buffers/live_bytes`
count them; `pooled_buffers/pooled_bytes` say how many of those sit in pools now (`dlc.memory()`
reports both). The pool keeps at most `max_buffers` buffers and `max_bytes` bytes (defaults
below, `set_limits`), dropping the least recently pooled past them; `trim()` empties it, and
closing its device forgets it (the device deletes every buffer it has).

Threads: a GC finalizer may run on any thread and must not call GL; it hands the buffer over
with `release` (a thread-safe queue), and the next `take`/`give`/`trim` on the thread that
uses the device moves it into the pool.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

from .device import Device, current_device, open_devices
from .storage import Buffer

MIN_CLASS = 64  # bytes: the smallest class (16 floats)
DEFAULT_MAX_BUFFERS = 256
DEFAULT_MAX_BYTES = 64 << 20

_limits = [DEFAULT_MAX_BUFFERS, DEFAULT_MAX_BYTES]  # every device's pool, now
_create_lock = threading.Lock()


def size_class(nbytes: int) -> int:
    """The capacity a pooled buffer for `nbytes` bytes gets: MIN_CLASS, or the least of
    2^k, 1.25 * 2^k, 1.5 * 2^k, 1.75 * 2^k (k >= 6) that holds it (at most 25% more)."""
    if nbytes <= MIN_CLASS:
        return MIN_CLASS
    base = 1 << ((nbytes - 1).bit_length() - 1)  # the power of two below nbytes
    step = base >> 2
    return base + -(-(nbytes - base) // step) * step


class BufferPool:
    """One device's freed buffers (see the module doc). Use `pool_of(device)`."""

    def __init__(self, device: Device):
        self.device = device
        self._free: dict[int, list[Buffer]] = {}  # capacity -> buffers, most recently pooled last
        self._order: OrderedDict[Buffer, None] = OrderedDict()  # least recently pooled first
        self._released: deque[Buffer] = deque()  # from finalizers: appends and pops are atomic
        self.count = 0
        self.nbytes = 0
        self.reused = 0  # takes served from the pool (for tests and benchmarks)
        self.created = 0  # takes that made a buffer

    def __repr__(self) -> str:
        return f"BufferPool(device {self.device.id}: {self.count} buffers, {self.nbytes} bytes)"

    # ------------------------------------------------------------ on the device's thread

    def take(self, nbytes: int) -> Buffer:
        """A buffer of at least `nbytes` bytes (`nbytes` set to that) whose contents will be
        written by GPU commands issued from now on: a pooled one of its class, else a new one.
        The device is made current."""
        self.device.activate()
        return self.take_class(self.class_for(nbytes), nbytes)

    def take_class(self, capacity: int, nbytes: int) -> Buffer:
        """`take` for a `capacity` that `class_for(nbytes)` gave, with the device current
        (eager ops' repeated calls, which know both)."""
        if self._released:
            self.collect()
        bucket = self._free.get(capacity)
        if bucket:
            buf = bucket.pop()
            del self._order[buf]
            self.count -= 1
            self.nbytes -= capacity
            self.reused += 1
            buf.nbytes = nbytes
            return buf
        self.created += 1
        buf = Buffer(capacity, device=self.device)
        buf.nbytes = nbytes
        return buf

    def fresh(self, nbytes: int) -> Buffer:
        """A new buffer of `nbytes` bytes with a class capacity (so that it can join the pool
        later); for data the host writes."""
        if self._released:  # a loop of uploads alone pools what its dead arrays held
            self.collect()
        buf = Buffer(self.class_for(nbytes), device=self.device)
        buf.nbytes = nbytes
        return buf

    def give(self, buf: Buffer) -> None:
        """Keep `buf` for reuse (or delete it: not of a class, larger than the bound); the
        caller no longer uses it. Past the bounds the least recently pooled go."""
        if buf.device is not self.device:
            raise ValueError(f"a buffer of GL device {buf.device.id} given to the pool of GL device {self.device.id}")
        if not buf.handle or buf in self._order:
            return
        if self._released:
            self.collect()
        self._keep(buf)

    def trim(self, max_buffers: int | None = None, max_bytes: int | None = None) -> None:
        """Delete the least recently pooled buffers until at most `max_buffers` and `max_bytes`
        are kept (default: none)."""
        if self.device.closed:
            self.forget()
            return
        self.device.activate()
        self.collect()
        self._shrink(max_buffers or 0, max_bytes or 0)

    def class_for(self, nbytes: int) -> int:
        """The capacity a buffer of `nbytes` bytes gets here: its size class, or `nbytes`
        rounded to 4 past the pool's byte bound or the device's storage block limit."""
        capacity = size_class(nbytes)
        if capacity > _limits[1] or capacity > self.device.limits["max_ssbo_size"] >= nbytes:
            return max(4, (nbytes + 3) // 4 * 4)  # never pooled (no rounding wasted) or kept bindable
        return capacity

    def collect(self) -> None:
        """Pool what `release` queued (on the device's thread)."""
        released = self._released
        while released:
            buf = released.popleft()
            if buf.handle and buf not in self._order:
                self._keep(buf)

    # ------------------------------------------------------------ from any thread

    def release(self, buf: Buffer) -> None:
        """`give` later, from the device's thread: for finalizers (no GL call here)."""
        self._released.append(buf)

    def forget(self) -> None:
        """Drop every reference without GL calls: the device is closing (and deletes the
        buffers itself)."""
        self._free.clear()
        self._order.clear()
        self._released.clear()
        self.count = self.nbytes = 0

    # ------------------------------------------------------------ inside

    def _keep(self, buf: Buffer) -> None:
        capacity = buf.capacity
        max_buffers, max_bytes = _limits
        if size_class(capacity) != capacity or capacity > max_bytes or max_buffers < 1:
            buf.delete()
            return
        self._free.setdefault(capacity, []).append(buf)
        self._order[buf] = None
        self.count += 1
        self.nbytes += capacity
        if self.count > max_buffers or self.nbytes > max_bytes:
            self._shrink(max_buffers, max_bytes)

    def _shrink(self, max_buffers: int, max_bytes: int) -> None:
        while self._order and (self.count > max_buffers or self.nbytes > max_bytes):
            buf, _ = self._order.popitem(last=False)
            self._free[buf.capacity].remove(buf)
            self.count -= 1
            self.nbytes -= buf.capacity
            buf.delete()


def pool_of(device: Device | None = None) -> BufferPool:
    """`device`'s pool (default: the current device's), made on first use (from any thread)."""
    device = current_device() if device is None else device
    pool = device.pool
    if pool is None:
        with _create_lock:
            if device.pool is None:
                device.pool = BufferPool(device)
            pool = device.pool
    return pool


def pooled_buffers(device: Device | None = None) -> int:
    """How many buffers sit in the pool of `device` (default: of every open device); they
    are counted in `live_buffers` too."""
    devices = open_devices() if device is None else [device]
    return sum(d.pool.count for d in devices if d.pool is not None)


def pooled_bytes(device: Device | None = None) -> int:
    """The capacity of the buffers pooled on `device` (default: on every open device)."""
    devices = open_devices() if device is None else [device]
    return sum(d.pool.nbytes for d in devices if d.pool is not None)


def limits() -> tuple[int, int]:
    """(max_buffers, max_bytes): the bound of every device's pool."""
    return _limits[0], _limits[1]


def set_limits(max_buffers: int | None = None, max_bytes: int | None = None) -> None:
    """Bound every device's pool to `max_buffers` buffers and `max_bytes` bytes (ints >= 0;
    0 turns pooling off; None: the default), trimming the pools now."""
    for name, value in (("max_buffers", max_buffers), ("max_bytes", max_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"the pool's {name} must be an int >= 0 or None, got {value!r}")
    _limits[0] = DEFAULT_MAX_BUFFERS if max_buffers is None else max_buffers
    _limits[1] = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    for device in open_devices():
        if device.pool is not None and device.pool.count:
            with device:  # and back to the device in use
                device.pool.trim(*_limits)


def trim_all() -> None:
    """Empty the pools of every open device (their buffers deleted)."""
    for device in open_devices():
        if device.pool is not None and (device.pool.count or device.pool._released):
            with device:  # and back to the device in use
                device.pool.trim()
