"""Compute-shader programs: compile and link once per source, set uniforms, dispatch.

Linked programs are kept per device (runtime/device.py: a program belongs to one GL context)
in a bounded LRU cache keyed by source text: past its limit
(`runtime/cache_limit.py`: 256, env `DLC_PROGRAM_CACHE`, or `set_program_cache_limit`) the least
recently used program is deleted from GL. Programs a live executor uses are pinned (`pin` /
`unpin`): they count toward the limit but are never evicted, since executors keep their
handles. Whoever keeps a `Program` without pinning it checks `handle` (0 once evicted) and
asks `get_program` again.

A GLSL compile error here is never the user's fault (dlc wrote the shader), so `ShaderError`
says so, names the kernel and shows the driver's log next to the numbered source lines it
points at.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Sequence
from typing import Any

from . import binary_cache, cache_limit
from .device import Device, current_device, open_devices
from .errors import RuntimeFailure
from .gl import DEBUG, GL
from .storage import Buffer

# After a dispatch, later shaders may read what it wrote (SHADER_STORAGE) and later copies,
# uploads and downloads see it (BUFFER_UPDATE).
BARRIER_BITS = GL.GL_SHADER_STORAGE_BARRIER_BIT | GL.GL_BUFFER_UPDATE_BARRIER_BIT

# Programs linked from GLSL source and programs loaded from the on-disk binary cache, in this
# process on every device (tests and benchmarks count them; each Device counts its own too).
link_counts = {"compiled": 0, "from_disk": 0}
# Called with a program's GL handle when it is deleted (GL reuses handle numbers, so caches
# keyed by handle must forget it).
_on_delete: list[Callable[[int], None]] = []

# Where driver logs put the source line: Mesa "0:12(5): error:", NVIDIA "0(12) : error C1008:",
# AMD / Intel / ANGLE "ERROR: 0:12: ".
_LINE_PATTERNS = (
    re.compile(r"^\s*\d+:(\d+)\(\d+\)\s*:\s*error", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^\s*\d+\((\d+)\)\s*:\s*(?:fatal\s+)?error", re.IGNORECASE | re.MULTILINE),
    re.compile(r"ERROR:\s*\d+:(\d+):", re.MULTILINE),
)
_CONTEXT_LINES = 3  # source lines shown either side of the bad one
_MAX_LINES_SHOWN = 80  # when the log names no line


class ShaderError(RuntimeFailure):
    """A generated shader failed to compile or link: an internal dlc error (for a shader read
    from an artifact, runtime/artifact/runner.py says the artifact is at fault instead)."""

    def __init__(self, message: str, name: str, log: str, line: int | None, source: str = ""):
        super().__init__(message)
        self.name = name
        self.log = log
        self.line = line
        self.source = source  # the GLSL text, to tell which file it came from


class Program:
    """A linked compute program. Uniforms are set with glProgramUniform (no binding needed)."""

    __slots__ = ("handle", "name", "source", "local_size", "nbytes", "pins", "device", "_uniforms", "_limits")

    def __init__(self, handle: int, name: str, source: str, device: Device):
        self.device = device  # its context is current: made by get_program
        self.handle = handle
        self.name = name
        self.source = source
        # three ints: the binding's own output holds one value
        size = (ctypes.c_int * 3)()
        GL.glGetProgramiv(handle, GL.GL_COMPUTE_WORK_GROUP_SIZE, size)
        self.local_size: tuple[int, int, int] = (size[0], size[1], size[2])
        self._uniforms: dict[str, int] = {}
        self._limits = device.limits
        self.nbytes = _program_bytes(handle, source)
        self.pins = 0  # live users that keep the handle (see the module doc)

    def __repr__(self) -> str:
        return f"Program({self.name!r}, handle={self.handle}, local_size={self.local_size})"

    def uniform_location(self, name: str) -> int:
        """The uniform's location, or -1 when the program has none by that name."""
        location = self._uniforms.get(name)
        if location is None:
            self.device.activate()
            location = int(GL.glGetUniformLocation(self.handle, name))
            self._uniforms[name] = location
        return location

    def set_int(self, name: str, value: int) -> None:
        """Set an int uniform; a uniform the driver optimized away is ignored, as GL does."""
        location = self.uniform_location(name)
        if location >= 0:
            self.device.activate().fast.program_uniform1i(self.handle, location, int(value))

    def set_float(self, name: str, value: float) -> None:
        location = self.uniform_location(name)
        if location >= 0:
            self.device.activate().fast.program_uniform1f(self.handle, location, float(value))

    def dispatch(self, groups: tuple[int, int, int], buffers: Sequence[Buffer]) -> None:
        """Bind buffer i at storage binding i, run `groups` work groups, then a barrier."""
        x, y, z = groups
        limits = self._limits
        max_count = limits["max_work_group_count"]
        if not (0 <= x <= max_count[0] and 0 <= y <= max_count[1] and 0 <= z <= max_count[2]):
            raise RuntimeFailure(
                f"internal dlc error: kernel '{self.name}' dispatches {tuple(groups)} work "
                f"groups; this GPU allows at most {max_count}"
            )
        if len(buffers) > limits["max_ssbo_bindings"]:
            raise RuntimeFailure(
                f"internal dlc error: kernel '{self.name}' binds {len(buffers)} buffers; this "
                f"GPU allows {limits['max_ssbo_bindings']}"
            )
        fast = self.device.activate().fast
        fast.use_program(self.handle)
        for index, buffer in enumerate(buffers):
            if not buffer.handle:
                raise RuntimeFailure(
                    f"internal dlc error: kernel '{self.name}' got a deleted buffer at binding {index}"
                )
            if buffer.device is not self.device:
                raise RuntimeFailure(
                    f"internal dlc error: kernel '{self.name}' on GL device {self.device.id} got a "
                    f"buffer of GL device {buffer.device.id} at binding {index}"
                )
            if buffer.capacity > limits["max_ssbo_size"]:
                raise RuntimeFailure(
                    f"kernel '{self.name}': buffer {index} holds {buffer.nbytes} bytes, more "
                    f"than this GPU's {limits['max_ssbo_size']}-byte storage block limit"
                )
            fast.bind_buffer_base(index, buffer.handle)
        if x and y and z:
            fast.dispatch(int(x), int(y), int(z))
            fast.memory_barrier(BARRIER_BITS)
        if DEBUG:
            _check_gl_error(f"dispatching kernel '{self.name}'")

    def delete(self) -> None:
        """Free the program and drop it from its device's cache."""
        device = self.device
        if self.handle and not device.closed:
            handle, self.handle = self.handle, 0
            device.activate()
            GL.glDeleteProgram(handle)
            device.uniforms.pop(handle, None)
            for forget in _on_delete:
                forget(handle)
        if device.programs.get(self.source) is self:
            del device.programs[self.source]


def get_program(source: str, name: str, device: Device | None = None) -> Program:
    """The linked program for `source` on `device` (default: the current one), compiled on
    first use; `name` labels it in errors. Using it makes it the most recently used; adding
    one may evict the least recently used."""
    device = current_device() if device is None else device.activate()
    cache = device.programs
    program = cache.pop(source, None)
    if program is not None:
        cache[source] = program  # most recently used: dicts keep insertion order
        return program
    (program,) = get_programs([(source, name)], device)
    _evict(device, keep=program)
    return program


def get_programs(kernels: Sequence[tuple[str, str]], device: Device | None = None) -> list[Program]:
    """`get_program` for each (source, name) of `kernels`, with every compile the cache and
    the binary cache miss issued before any status is asked: a driver that compiles in the
    background (GL_KHR_parallel_shader_compile, asked for all its threads) then builds them
    at once instead of one after another (a cold start's cost). The programs are not evicted
    before this returns: the caller pins them."""
    device = current_device() if device is None else device.activate()
    cache = device.programs
    ctx = device.context
    driver = (ctx.vendor, ctx.renderer, ctx.version)
    found: dict[str, Program] = {}
    started: dict[str, tuple[str, Any, int, int]] = {}  # source -> (name, cache key, shader, program)
    for source, name in kernels:
        if source in found or source in started:
            continue
        program = cache.pop(source, None)
        if program is not None:
            cache[source] = program
            found[source] = program
            continue
        key = binary_cache.key(source, driver) if binary_cache.enabled() else None
        cached = binary_cache.load(key) if key is not None else None
        handle = _from_binary(*cached) if cached is not None else 0
        if handle:
            _count_link(device, "from_disk")
            found[source] = cache[source] = Program(handle, name, source, device)
            continue
        if cached is not None:
            binary_cache.forget(key)  # stale or refused: recompile and overwrite
        _parallel_compiles(device)
        started[source] = (name, key, *_start_compile(source, key is not None))
    try:
        for source, (name, key, shader, program) in list(started.items()):
            del started[source]
            handle = _finish_compile(source, name, shader, program)
            _count_link(device, "compiled")
            if key is not None:
                binary = _get_binary(handle)
                if binary is not None:
                    binary_cache.store(key, *binary)
            found[source] = cache[source] = Program(handle, name, source, device)
    finally:
        for _, _, shader, program in started.values():  # a failure left these unfinished
            GL.glDeleteShader(shader)
            GL.glDeleteProgram(program)
    return [found[source] for source, _ in kernels]


# The extension a driver offers for background compiles, and its entry point: KHR (Mesa) or
# ARB (NVIDIA's drivers long offered only the ARB one).
_PARALLEL_COMPILE = (("KHR", "glMaxShaderCompilerThreadsKHR"), ("ARB", "glMaxShaderCompilerThreadsARB"))


def _parallel_compiles(device: Device) -> None:
    """Ask the driver for all its compiler threads (GL_KHR_parallel_shader_compile, or the
    ARB one where only that is offered), once."""
    if device.parallel_compiles is None:
        device.parallel_compiles = False
        for vendor, entry in _PARALLEL_COMPILE:
            if f"GL_{vendor}_parallel_shader_compile" not in device.context.extensions:
                continue
            try:
                getattr(GL, entry)(0xFFFFFFFF)
                device.parallel_compiles = True
                return
            except Exception:  # an entry point the driver does not have after all
                while GL.glGetError() != GL.GL_NO_ERROR:
                    pass


def pin(program: Program) -> None:
    """Keep `program` linked until as many `unpin` calls (an executor holds its handle)."""
    program.pins += 1


def unpin(program: Program) -> None:
    program.pins = max(program.pins - 1, 0)
    if not program.device.closed:
        _evict(program.device)


def on_delete(callback: Callable[[int], None]) -> None:
    """Call `callback(handle)` whenever a program is deleted (its device is current)."""
    _on_delete.append(callback)


def program_cache_limit() -> int:
    """How many linked programs the cache keeps besides the pinned ones (those live executors hold)."""
    return cache_limit.limit()


def set_program_cache_limit(limit: int | None) -> None:
    """Keep at most `limit` (>= 1) linked programs, evicting now if over; None: back to the
    default (or env DLC_PROGRAM_CACHE)."""
    cache_limit.set_limit(limit)


def program_cache_stats(device: Device | None = None) -> dict:
    """Linked programs kept now on `device` (default: on every open device), their
    estimated driver bytes, pinned ones, the limit (each device's), and how many were
    evicted so far."""
    devices = open_devices() if device is None else [device]
    kept = [p for d in devices for p in d.programs.values()]
    return {
        "programs": len(kept),
        "bytes": sum(p.nbytes for p in kept),
        "pinned": sum(1 for p in kept if p.pins),
        "limit": program_cache_limit(),
        "evicted": sum(d.evicted for d in devices),
    }


def __getattr__(name: str) -> Any:
    # `_cache`: the current device's program cache (it was this module's, before devices).
    if name == "_cache":
        return current_device().programs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _evict(device: Device, keep: Program | None = None) -> None:
    """Delete `device`'s least recently used unpinned programs while more unpinned ones than
    the limit are kept. Pinned programs (live sessions' executors) do not count: counted,
    they could fill the cache, and every eager op would then be linked anew at each call."""
    limit = program_cache_limit()
    cache = device.programs
    if len(cache) <= limit:  # the common case, checked at every link and unpin
        return
    unpinned = [p for p in cache.values() if not p.pins]  # least recently used first
    over = len(unpinned) - limit
    for program in unpinned:
        if over <= 0:
            break
        if program is keep:
            continue
        program.delete()
        device.evicted += 1
        over -= 1


def _program_bytes(handle: int, source: str) -> int:
    """The driver's size of the linked program (its binary), or the source's when the driver
    gives none: an estimate of what the cache holds."""
    try:
        size = ctypes.c_int(0)
        GL.glGetProgramiv(handle, GL.GL_PROGRAM_BINARY_LENGTH, ctypes.byref(size))
        if size.value > 0:
            return int(size.value)
    except Exception:  # a 4.3 driver without program binaries (DLC_DEBUG=1: GLError)
        pass
    while GL.glGetError() != GL.GL_NO_ERROR:  # the failed query's error
        pass
    return len(source)


def _count_link(device: Device, how: str) -> None:
    link_counts[how] += 1
    device.link_counts[how] += 1


def _from_binary(fmt: int, binary: bytes) -> int:
    """A program made from a cached binary, or 0 when the driver refuses it."""
    program = GL.glCreateProgram()
    try:
        data = ctypes.create_string_buffer(binary, len(binary))
        GL.glProgramBinary(program, fmt, data, len(binary))
        while GL.glGetError() != GL.GL_NO_ERROR:  # e.g. a format this driver no longer has
            pass
        if GL.glGetProgramiv(program, GL.GL_LINK_STATUS):
            return int(program)
    except Exception:  # with DLC_DEBUG=1 the binding raises GLError on a refused binary
        while GL.glGetError() != GL.GL_NO_ERROR:
            pass
    GL.glDeleteProgram(program)
    return 0


def _get_binary(handle: int) -> tuple[int, bytes] | None:
    """(format, bytes) of a linked program, or None when the driver gives none."""
    try:
        size = ctypes.c_int(0)
        GL.glGetProgramiv(handle, GL.GL_PROGRAM_BINARY_LENGTH, ctypes.byref(size))
        if size.value <= 0:
            while GL.glGetError() != GL.GL_NO_ERROR:  # the query's error, if it set one
                pass
            return None
        buf = ctypes.create_string_buffer(size.value)
        length, fmt = ctypes.c_int(0), ctypes.c_uint(0)
        GL.glGetProgramBinary(handle, size.value, ctypes.byref(length), ctypes.byref(fmt), buf)
        if length.value <= 0:
            return None
        return int(fmt.value), buf.raw[: length.value]
    except Exception:  # a 4.3 driver without program binaries
        while GL.glGetError() != GL.GL_NO_ERROR:
            pass
        return None


def _start_compile(source: str, retrievable: bool) -> tuple[int, int]:
    """(shader, program): the compile and link issued, no status asked yet (a driver may
    build in the background until then)."""
    shader = GL.glCreateShader(GL.GL_COMPUTE_SHADER)
    GL.glShaderSource(shader, [source])
    GL.glCompileShader(shader)
    program = GL.glCreateProgram()
    GL.glAttachShader(program, shader)
    if retrievable:  # ask the driver to keep a binary glGetProgramBinary can return
        GL.glProgramParameteri(program, GL.GL_PROGRAM_BINARY_RETRIEVABLE_HINT, GL.GL_TRUE)
    GL.glLinkProgram(program)
    return int(shader), int(program)


def _finish_compile(source: str, name: str, shader: int, program: int) -> int:
    """The linked program of `_start_compile` (waits for it), or ShaderError; the shader is
    freed either way, the program on failure."""
    try:
        if not GL.glGetShaderiv(shader, GL.GL_COMPILE_STATUS):
            GL.glDeleteProgram(program)
            raise _shader_error("compile", name, _text(GL.glGetShaderInfoLog(shader)), source)
        GL.glDetachShader(program, shader)
        if not GL.glGetProgramiv(program, GL.GL_LINK_STATUS):
            log = _text(GL.glGetProgramInfoLog(program))
            GL.glDeleteProgram(program)
            raise _shader_error("link", name, log, source)
        return int(program)
    finally:
        GL.glDeleteShader(shader)


def _text(log: bytes | str | None) -> str:
    if not log:
        return ""
    return log.decode(errors="replace") if isinstance(log, bytes) else str(log)


def error_line(log: str) -> int | None:
    """The first source line a driver's error log points at, if it names one."""
    found = [int(m.group(1)) for pattern in _LINE_PATTERNS for m in [pattern.search(log)] if m]
    return min(found) if found else None


def _shader_error(stage: str, name: str, log: str, source: str) -> ShaderError:
    line = error_line(log)
    lines = source.splitlines()
    if line is not None and 1 <= line <= len(lines):
        first, last = max(1, line - _CONTEXT_LINES), min(len(lines), line + _CONTEXT_LINES)
    else:
        first, last = 1, min(len(lines), _MAX_LINES_SHOWN)
    width = len(str(last))
    shown = "\n".join(f"{'>' if i == line else ' '} {i:>{width}} | {lines[i - 1]}" for i in range(first, last + 1))
    if last < len(lines) and line is None:
        shown += f"\n  ... ({len(lines) - last} more lines)"
    message = (
        f"internal dlc error: GLSL kernel '{name}' failed to {stage} (this is a bug in dlc's "
        f"code generator, please report it)\n"
        f"driver log:\n  " + "\n  ".join(log.strip().splitlines() or ["(empty)"]) + "\n"
        f"kernel '{name}'" + (f", line {line}" if line else "") + ":\n" + shown
    )
    return ShaderError(message, name, log, line, source)


def _check_gl_error(doing: str) -> None:
    error = GL.glGetError()
    if error != GL.GL_NO_ERROR:
        raise RuntimeFailure(f"internal dlc error: OpenGL error 0x{int(error):04x} while {doing}")


def _evict_everywhere(_limit: int) -> None:
    for device in open_devices():
        if len(device.programs) > _limit:
            with device:  # and back to the device in use
                _evict(device)


cache_limit.on_change(_evict_everywhere)
