"""A Device: one OpenGL context and everything dlc keeps against it.

GL objects (programs, buffers, uniform values set on a program) belong to the context that
made them, and a handle number means nothing in another context. So the state that used to
be process-wide lives here, one set per context: the linked-program cache (`programs`, an
LRU kept by runtime/program.py), the uniform values last set per program handle (`uniforms`,
kept by runtime/executor.py), the raw ctypes entry points (`fast`), the live-buffer counters
and the driver's limits.

The default device is made on first use from the environment (runtime/context.py's choice);
`open_device()` makes another (a second context on the same EGL display, another EGL device,
or another glfw window) without making it the one in use.

Runtime objects (`Buffer`, `Program`, `Executor`, the leaf store) remember the device they
were made on and make it current before their GL calls. A new leaf store (so a new Session)
goes on the selected device (`selected_device()`: the innermost `with device:` block's on
this thread, else the default); lower-level calls that name no device (`Buffer(n)`,
`get_program`, `get_context`) use the device current on the thread (`current_device()`: the
one used last, which inside an object's operation is the object's).

Switching: before another context is made current on a thread, the one leaving is flushed
(`glFlush`) so its queued commands reach its GPU; no object is shared between contexts, so
nothing needs `glFinish`.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from . import context as _context
from .context import GLContext
from .errors import RuntimeFailure
from .gl import GL, Fast

_lock = threading.Lock()
_default: Device | None = None
_failure: str | None = None  # why the default device could not be made (said once, kept)
_open: list[Device] = []  # devices not closed, default first
_local = threading.local()  # .device: the device used last on this thread
_next_id = 0


class Device:
    """One GL context and its caches and counters. Make one with `default_device()` or
    `open_device()`; `close()` frees everything on it."""

    def __init__(self, ctx: GLContext):
        global _next_id
        self.context = ctx
        self.id = _next_id  # a process-unique number, for messages
        _next_id += 1
        self.closed = False
        self.fast = Fast()  # raw entry points; resolved now: this context is current
        if ctx.has_compute:
            self.fast.resolve()
        # runtime/program.py: source -> Program, least recently used first
        self.programs: dict[str, Any] = {}
        self.evicted = 0  # programs the LRU deleted
        self.link_counts = {"compiled": 0, "from_disk": 0}
        self.parallel_compiles: bool | None = None  # driver compiler threads asked for (program.py)
        # runtime/executor.py: program handle -> the uniform values last set on it
        self.uniforms: dict[int, tuple] = {}
        # runtime/storage.py: buffers not yet deleted (weak: a dropped Buffer leaks as before)
        self.buffers: weakref.WeakSet = weakref.WeakSet()
        self.live_buffers = 0
        self.live_bytes = 0
        self.pool: Any = None  # runtime/buffer_pool.py: freed eager buffers kept for reuse
        self.subnormals: Any = None  # runtime/subnormals.py: kept or flushed, probed on first use
        self._previous: list[Device | None] = []  # `with` blocks: the device to go back to

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.context.renderer
        where = f"EGL device {self.context.device_index}" if self.context.platform == "egl" else "glfw"
        return f"Device({self.id}, {where}, {state})"

    @property
    def limits(self) -> dict[str, Any]:
        return self.context.limits

    # ------------------------------------------------------------ making it current

    def activate(self) -> Device:
        """Make this device's context current on the calling thread (flushing the one that
        was); every GL call on its objects goes after this. Cheap when already current."""
        if getattr(_local, "device", None) is self and self.context._thread == threading.get_ident():
            return self
        if self.closed:
            raise RuntimeFailure(f"GL device {self.id} was closed; its buffers and programs are gone")
        _leave_current()
        try:
            self.context.make_current()
        except RuntimeFailure:
            raise RuntimeFailure(
                f"GL device {self.id} is in use on another thread: call release() on the Session "
                "using it (or on the device, from dlc.gl_devices()) in that thread first (README, "
                '"Several GL devices")'
            ) from None
        _local.device = self
        return self

    def __enter__(self) -> Device:
        self._previous.append(getattr(_local, "device", None))
        _selected().append(self)
        return self.activate()

    def __exit__(self, *exc: object) -> None:
        _selected().pop()
        previous = self._previous.pop()
        if previous is not None and not previous.closed:
            previous.activate()
        elif not self.closed:
            self.release()  # the thread had none: leave it so (another thread may take this one)

    def release(self) -> None:
        """Flush and detach this device's context from the calling thread, so that another
        thread can use the device."""
        if getattr(_local, "device", None) is self:
            _leave_current()
            _local.device = None
        if not self.closed and self.context._thread == threading.get_ident():
            self.context.release_current()

    # ------------------------------------------------------------ freeing it

    def close(self) -> None:
        """Delete every program and buffer made on this device and destroy its context.
        Objects made on it are unusable afterwards; other devices are not touched."""
        global _default
        if self.closed:
            return

        self.activate()
        for program in list(self.programs.values()):
            if program.handle:
                GL.glDeleteProgram(program.handle)
                program.handle = 0
        self.programs.clear()
        self.uniforms.clear()
        if self.pool is not None:  # its buffers are among those deleted below
            self.pool.forget()
            self.pool = None
        for buffer in list(self.buffers):
            buffer.forget_handle(delete=True)
        self.buffers.clear()
        self.live_buffers = self.live_bytes = 0
        GL.glFinish()  # nothing of ours still runs when the context goes
        self.closed = True
        _local.device = None
        self.context.destroy()
        with _lock:
            if self in _open:
                _open.remove(self)
            if _default is self:
                _default = None  # the next default_device() makes a fresh one


def _selected() -> list[Device]:
    """This thread's `with device:` blocks, innermost last."""
    stack = getattr(_local, "selected", None)
    if stack is None:
        stack = _local.selected = []
    return stack


def _leave_current() -> None:
    """Flush the device current on this thread before another context takes its place."""
    previous = getattr(_local, "device", None)
    if previous is not None and not previous.closed and previous.context._thread == threading.get_ident():
        GL.glFlush()


def default_device() -> Device:
    """The process's first device (made on first use from DLC_GL / DLC_EGL_DEVICE);
    RuntimeFailure with a one-line reason when no context can be made (not retried)."""
    global _default, _failure
    device = _default
    if device is not None:
        return device
    with _lock:
        if _default is None:
            if _failure is not None:
                raise RuntimeFailure(_failure)
            _leave_current()
            try:
                ctx = _context.create_context()
            except RuntimeFailure as exc:
                _failure = str(exc)
                raise
            _default = Device(ctx)
            _open.insert(0, _default)
            _local.device = _default
        return _default


def open_device(egl_device: int | None = None) -> Device:
    """A new device with its own context: on EGL device `egl_device` (default: the default
    device's, or the first that works), else a new glfw window where glfw is the platform."""
    if egl_device is not None and (isinstance(egl_device, bool) or not isinstance(egl_device, int)):
        raise TypeError(f"egl_device must be an int, got {type(egl_device).__name__}")
    first = default_device()  # the platform choice and its errors are the default's
    if egl_device is None and first.context.platform == "egl":
        egl_device = first.context.device_index
    previous = getattr(_local, "device", None) or first
    with _lock:
        _leave_current()
        ctx = _context.create_context(egl_device=egl_device, platform=first.context.platform)
        _local.device = device = Device(ctx)
        _open.append(device)
    if not previous.closed:
        previous.activate()  # opening a device does not change which one is in use
    return device


def selected_device() -> Device:
    """The device new sessions go on: the innermost `with device:` block's on this thread,
    else the default one; made current."""
    stack = _selected()
    device = stack[-1] if stack else default_device()
    return device.activate()


def current_device() -> Device:
    """The device used last on this thread (the default one until another is), current."""
    device = getattr(_local, "device", None)
    if device is None or device.closed:
        device = default_device()
    return device.activate()


def get_context() -> GLContext:
    """The current device's GL context, current on the calling thread; RuntimeFailure when
    none can be made."""
    return current_device().context


def has_context() -> bool:
    """True when a GL context can be made (makes it); never raises."""
    try:
        get_context()
        return True
    except Exception:
        return False


def require_default(device: Device, what: str) -> None:
    """Refuse `what` on a device other than the default (code whose GL objects do not yet
    remember their device: made current by someone else, they would use the wrong context)."""
    if device is not _default:
        raise RuntimeFailure(f"{what} runs on the default GL device only, not on GL device {device.id}")


def open_devices() -> list[Device]:
    """Devices made so far and not closed, the default first."""
    return list(_open)


__all__ = [
    "Device",
    "current_device",
    "default_device",
    "open_device",
    "open_devices",
    "require_default",
    "selected_device",
]
