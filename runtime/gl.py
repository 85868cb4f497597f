"""dlc's OpenGL binding: the GL functions and constants dlc calls, as ctypes functions.

No PyOpenGL: `GL` holds exactly what dlc uses (the 79 functions of `_FUNCTIONS`, the
constants below), each function resolved on first use from the GL library's exports, else
through the platform's lookup (eglGetProcAddress on EGL, glfw's on a glfw window). Its calls
take and give what PyOpenGL's did at dlc's call sites: handles and enums as ints, strings as
bytes, `glGen*(1)` a handle, `glGet*iv(.., pname)` without an output an int, a shader info log
as bytes, NumPy arrays and ctypes objects where GL takes a pointer. With `DLC_DEBUG=1` each
call is followed by glGetError, and an error raises `GLError` naming the call.

`PYOPENGL_PLATFORM` still says which window system dlc's context uses: set to `egl` here
unless the user set it (a `glx` there rules EGL out), so that PyOpenGL imported later by the
user's code binds to the same one.

`Fast` holds raw ctypes function pointers for the launch loop, called with no argument
conversion at all (DESIGN.md). Each `runtime.device.Device` resolves its own once its context
is current (a pointer may differ between contexts, as on Windows): hot loops take
`device.fast` of the device they run on.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from typing import Any

from dlc.runtime import egl as _egl_binding
from dlc.runtime.context import start_egl_early

DEBUG = os.environ.get("DLC_DEBUG", "") == "1"

EGL: _egl_binding.EGL | None = None
EGL_IMPORT_ERROR: str = ""


def _choose_platform() -> str:
    """Set PYOPENGL_PLATFORM unless the user did; return the platform ('' = none chosen) and
    load libEGL where it is EGL."""
    global EGL, EGL_IMPORT_ERROR
    chosen = os.environ.get("PYOPENGL_PLATFORM")
    wants_glfw = os.environ.get("DLC_GL", "").lower() == "glfw"
    if chosen is None and (wants_glfw or not sys.platform.startswith("linux")):
        EGL_IMPORT_ERROR = "the platform is the window system's, not egl"
        return ""
    if chosen not in (None, "egl"):
        EGL_IMPORT_ERROR = f"PYOPENGL_PLATFORM is {chosen}, not egl"
        return chosen
    try:
        EGL = _egl_binding.load()
    except Exception as exc:  # a broken or missing libEGL: context.py reports it in one line
        EGL_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
        return chosen or ""  # the glfw fallback (GLX on X11) keeps the default platform
    os.environ["PYOPENGL_PLATFORM"] = "egl"
    return "egl"


PYOPENGL_PLATFORM = _choose_platform()
if PYOPENGL_PLATFORM == "egl" and os.environ.get("DLC_GL", "").strip().lower() in ("", "egl"):
    start_egl_early()  # the driver loads while the rest of the runtime imports (runtime/context.py)


class GLError(RuntimeError):
    """A GL call left an error (checked after every call with DLC_DEBUG=1). `err` is the GL
    error code, `baseOperation` the function's name, `pyArgs` its arguments."""

    _NAMES = {
        0x0500: "GL_INVALID_ENUM",
        0x0501: "GL_INVALID_VALUE",
        0x0502: "GL_INVALID_OPERATION",
        0x0503: "GL_STACK_OVERFLOW",
        0x0504: "GL_STACK_UNDERFLOW",
        0x0505: "GL_OUT_OF_MEMORY",
        0x0506: "GL_INVALID_FRAMEBUFFER_OPERATION",
        0x0507: "GL_CONTEXT_LOST",
    }

    def __init__(self, err: int, baseOperation: str, pyArgs: tuple[Any, ...] = ()):
        self.err = err
        self.baseOperation = baseOperation
        self.pyArgs = pyArgs
        self.description = self._NAMES.get(err, "unknown error")
        shown = ", ".join(repr(a) for a in pyArgs)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(f"{baseOperation}({shown}) failed: GL error 0x{err:04x} ({self.description})")


class NullFunctionError(RuntimeError):
    """An entry point this driver does not have."""


# ---------------------------------------------------------------- argument types


class _Pointer:
    """A `void *` argument: None, an address, bytes, a ctypes object, or a NumPy array."""

    @staticmethod
    def from_param(obj: Any) -> Any:
        interface = getattr(obj, "__array_interface__", None)
        if interface is not None:
            return ctypes.c_void_p(interface["data"][0])
        return ctypes.c_void_p.from_param(obj)


class _Text:
    """A `const char *` argument: str (UTF-8) or bytes."""

    @staticmethod
    def from_param(obj: Any) -> Any:
        return obj.encode() if isinstance(obj, str) else ctypes.c_char_p.from_param(obj)


_u, _i, _f, _z = ctypes.c_uint, ctypes.c_int, ctypes.c_float, ctypes.c_ssize_t  # enum/uint, int, float, size
_p, _s = _Pointer, _Text

# name -> (restype, argtypes): every GL function dlc (and its tests) call through `GL`
_FUNCTIONS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "glActiveTexture": (None, (_u,)),
    "glAttachShader": (None, (_u, _u)),
    "glBeginQuery": (None, (_u, _u)),
    "glBindBuffer": (None, (_u, _u)),
    "glBindBufferBase": (None, (_u, _u, _u)),
    "glBindFramebuffer": (None, (_u, _u)),
    "glBindTexture": (None, (_u, _u)),
    "glBindVertexArray": (None, (_u,)),
    "glBufferData": (None, (_u, _z, _p, _u)),
    "glBufferSubData": (None, (_u, _z, _z, _p)),
    "glCheckFramebufferStatus": (_u, (_u,)),
    "glClearBufferData": (None, (_u, _u, _u, _u, _p)),
    "glClearNamedBufferData": (None, (_u, _u, _u, _u, _p)),
    "glClientWaitSync": (_u, (_p, _u, ctypes.c_uint64)),
    "glCompileShader": (None, (_u,)),
    "glCopyBufferSubData": (None, (_u, _u, _z, _z, _z)),
    "glCopyNamedBufferSubData": (None, (_u, _u, _z, _z, _z)),
    "glCreateBuffers": (None, (_i, _p)),
    "glCreateProgram": (_u, ()),
    "glCreateShader": (_u, (_u,)),
    "glDeleteBuffers": (None, (_i, _p)),
    "glDeleteFramebuffers": (None, (_i, _p)),
    "glDeleteProgram": (None, (_u,)),
    "glDeleteQueries": (None, (_i, _p)),
    "glDeleteShader": (None, (_u,)),
    "glDeleteSync": (None, (_p,)),
    "glDeleteTextures": (None, (_i, _p)),
    "glDetachShader": (None, (_u, _u)),
    "glDisable": (None, (_u,)),
    "glDispatchCompute": (None, (_u, _u, _u)),
    "glDrawArrays": (None, (_u, _i, _i)),
    "glEndQuery": (None, (_u,)),
    "glFenceSync": (ctypes.c_void_p, (_u, _u)),
    "glFinish": (None, ()),
    "glFlush": (None, ()),
    "glFramebufferTexture2D": (None, (_u, _u, _u, _u, _i)),
    "glGenBuffers": (None, (_i, _p)),
    "glGenFramebuffers": (None, (_i, _p)),
    "glGenQueries": (None, (_i, _p)),
    "glGenTextures": (None, (_i, _p)),
    "glGenVertexArrays": (None, (_i, _p)),
    "glGetBufferSubData": (None, (_u, _z, _z, _p)),
    "glGetError": (_u, ()),
    "glGetInteger64v": (None, (_u, _p)),
    "glGetIntegeri_v": (None, (_u, _u, _p)),
    "glGetIntegerv": (None, (_u, _p)),
    "glGetNamedBufferSubData": (None, (_u, _z, _z, _p)),
    "glGetProgramBinary": (None, (_u, _i, _p, _p, _p)),
    "glGetProgramInfoLog": (None, (_u, _i, _p, _p)),
    "glGetProgramiv": (None, (_u, _u, _p)),
    "glGetQueryObjectui64v": (None, (_u, _u, _p)),
    "glGetShaderInfoLog": (None, (_u, _i, _p, _p)),
    "glGetShaderiv": (None, (_u, _u, _p)),
    "glGetString": (ctypes.c_char_p, (_u,)),
    "glGetStringi": (ctypes.c_char_p, (_u, _u)),
    "glGetUniformLocation": (_i, (_u, _s)),
    "glIsProgram": (ctypes.c_ubyte, (_u,)),
    "glLinkProgram": (None, (_u,)),
    "glMapNamedBufferRange": (ctypes.c_void_p, (_u, _z, _z, _u)),
    "glMaxShaderCompilerThreadsARB": (None, (_u,)),
    "glMaxShaderCompilerThreadsKHR": (None, (_u,)),
    "glMemoryBarrier": (None, (_u,)),
    "glNamedBufferData": (None, (_u, _z, _p, _u)),
    "glNamedBufferStorage": (None, (_u, _z, _p, _u)),
    "glNamedBufferSubData": (None, (_u, _z, _z, _p)),
    "glPixelStorei": (None, (_u, _i)),
    "glProgramBinary": (None, (_u, _u, _p, _i)),
    "glProgramParameteri": (None, (_u, _u, _i)),
    "glProgramUniform1f": (None, (_u, _i, _f)),
    "glProgramUniform1i": (None, (_u, _i, _i)),
    "glReadPixels": (None, (_i, _i, _i, _i, _u, _u, _p)),
    "glShaderSource": (None, (_u, _i, _p, _p)),
    "glTexImage2D": (None, (_u, _i, _i, _i, _i, _i, _u, _u, _p)),
    "glTexParameteri": (None, (_u, _u, _i)),
    "glTexSubImage2D": (None, (_u, _i, _i, _i, _i, _i, _u, _u, _p)),
    "glUniform1f": (None, (_i, _f)),
    "glUniform1i": (None, (_i, _i)),
    "glUseProgram": (None, (_u,)),
    "glViewport": (None, (_i, _i, _i, _i)),
}


# ---------------------------------------------------------------- PyOpenGL's conveniences


def _generator(raw: Callable[..., None]) -> Callable[..., Any]:
    """glGen* / glCreateBuffers: (n, out) as in C; (1) a handle, (n) a list of them."""

    def generate(n: int, out: Any = None) -> Any:
        if out is not None:
            return raw(n, out)
        handles = (ctypes.c_uint * n)()
        raw(n, handles)
        return handles[0] if n == 1 else list(handles)

    return generate


def _deleter(raw: Callable[..., None]) -> Callable[..., None]:
    """glDelete*: (n, pointer) as in C, (n, handles), or (handles) alone."""

    def delete(n: Any, handles: Any = None) -> None:
        if handles is None:
            n, handles = (1, [n]) if isinstance(n, int) else (len(n), n)
        if isinstance(handles, (list, tuple)):
            handles = (ctypes.c_uint * len(handles))(*handles)
        raw(n, handles)

    return delete


def _query(raw: Callable[..., None], kind: Any, before: int) -> Callable[..., Any]:
    """glGet*v: with an output as in C; without one, the (first) value as an int.
    `before`: how many arguments precede the output."""

    def query(*args: Any) -> Any:
        if len(args) > before:
            return raw(*args)
        out = (kind * 16)()  # room for the longest answer of any name
        raw(*args, out)
        return int(out[0])

    return query


def _info_log(raw: Callable[..., None], get_iv: Callable[..., Any]) -> Callable[..., bytes]:
    """glGet*InfoLog: the object's whole log as bytes (the C form with all four arguments)."""

    def info_log(handle: int, *args: Any) -> Any:
        if args:
            return raw(handle, *args)
        size = get_iv(handle, 0x8B84)  # GL_INFO_LOG_LENGTH
        if size <= 0:
            return b""
        buf, length = ctypes.create_string_buffer(size), ctypes.c_int(0)
        raw(handle, size, ctypes.byref(length), buf)
        return buf.raw[: length.value]

    return info_log


def _shader_source(raw: Callable[..., None]) -> Callable[..., None]:
    """glShaderSource(shader, text or texts) (the C form with four arguments too)."""

    def shader_source(shader: int, source: Any, *args: Any) -> None:
        if args:
            return raw(shader, source, *args)
        texts = [source] if isinstance(source, (str, bytes)) else list(source)
        encoded = [t.encode() if isinstance(t, str) else t for t in texts]
        raw(shader, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded), None)

    return shader_source


def _conveniences(gl: _GL, name: str, raw: Callable[..., Any]) -> Callable[..., Any]:
    if name.startswith("glGen") or name == "glCreateBuffers":
        return _generator(raw)
    if name.startswith("glDelete") and name not in ("glDeleteProgram", "glDeleteShader", "glDeleteSync"):
        return _deleter(raw)
    if name in ("glGetIntegerv", "glGetInteger64v", "glGetIntegeri_v", "glGetProgramiv", "glGetShaderiv"):
        kind = ctypes.c_int64 if name == "glGetInteger64v" else ctypes.c_int
        return _query(raw, kind, 1 if name in ("glGetIntegerv", "glGetInteger64v") else 2)
    if name == "glGetShaderInfoLog":
        return _info_log(raw, gl.glGetShaderiv)
    if name == "glGetProgramInfoLog":
        return _info_log(raw, gl.glGetProgramiv)
    if name == "glShaderSource":
        return _shader_source(raw)
    return raw


def _checked(gl: _GL, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """`call`, then glGetError: a GLError naming `name` (DLC_DEBUG=1)."""

    def checked(*args: Any) -> Any:
        result = call(*args)
        error = gl.glGetError()
        if error:
            raise GLError(int(error), name, args)
        return result

    checked.__name__ = name
    return checked


def _missing(name: str) -> Callable[..., Any]:
    """The stand-in for an entry point the driver lacks: calling it raises."""

    def missing(*args: Any) -> Any:
        raise NullFunctionError(f"OpenGL entry point {name} not found")

    missing.__name__ = name
    return missing


class _GL:
    """The functions of `_FUNCTIONS` (resolved on first use) and GL's constants."""

    GL_NO_ERROR = 0x0
    GL_FALSE = 0x0
    GL_TRUE = 0x1
    GL_TRIANGLES = 0x4
    GL_SYNC_FLUSH_COMMANDS_BIT = 0x1
    GL_BUFFER_UPDATE_BARRIER_BIT = 0x200
    GL_SHADER_STORAGE_BARRIER_BIT = 0x2000
    GL_MAP_READ_BIT = 0x1
    GL_MAP_PERSISTENT_BIT = 0x40
    GL_MAP_COHERENT_BIT = 0x80
    GL_DYNAMIC_STORAGE_BIT = 0x100
    GL_CLIENT_STORAGE_BIT = 0x200
    GL_INVALID_ENUM = 0x500
    GL_INVALID_VALUE = 0x501
    GL_INVALID_OPERATION = 0x502
    GL_OUT_OF_MEMORY = 0x505
    GL_INVALID_FRAMEBUFFER_OPERATION = 0x506
    GL_DEPTH_TEST = 0xB71
    GL_BLEND = 0xBE2
    GL_UNPACK_ALIGNMENT = 0xCF5
    GL_PACK_ALIGNMENT = 0xD05
    GL_MAX_TEXTURE_SIZE = 0xD33
    GL_TEXTURE_2D = 0xDE1
    GL_UNSIGNED_BYTE = 0x1401
    GL_FLOAT = 0x1406
    GL_RED = 0x1903
    GL_RGBA = 0x1908
    GL_VENDOR = 0x1F00
    GL_RENDERER = 0x1F01
    GL_VERSION = 0x1F02
    GL_EXTENSIONS = 0x1F03
    GL_NEAREST = 0x2600
    GL_TEXTURE_MAG_FILTER = 0x2800
    GL_TEXTURE_MIN_FILTER = 0x2801
    GL_MAJOR_VERSION = 0x821B
    GL_MINOR_VERSION = 0x821C
    GL_NUM_EXTENSIONS = 0x821D
    GL_R32F = 0x822E
    GL_R8UI = 0x8232
    GL_PROGRAM_BINARY_RETRIEVABLE_HINT = 0x8257
    GL_MAX_COMPUTE_SHARED_MEMORY_SIZE = 0x8262
    GL_MAX_COMPUTE_UNIFORM_COMPONENTS = 0x8263
    GL_COMPUTE_WORK_GROUP_SIZE = 0x8267
    GL_PROGRAM_BINARY_LENGTH = 0x8741
    GL_RGBA32F = 0x8814
    GL_MAX_DRAW_BUFFERS = 0x8824
    GL_QUERY_RESULT = 0x8866
    GL_MAX_TEXTURE_IMAGE_UNITS = 0x8872
    GL_TIME_ELAPSED = 0x88BF
    GL_DYNAMIC_COPY = 0x88EA
    GL_TEXTURE0 = 0x84C0
    GL_FRAGMENT_SHADER = 0x8B30
    GL_VERTEX_SHADER = 0x8B31
    GL_MAX_FRAGMENT_UNIFORM_COMPONENTS = 0x8B49
    GL_COMPILE_STATUS = 0x8B81
    GL_LINK_STATUS = 0x8B82
    GL_INFO_LOG_LENGTH = 0x8B84
    GL_SHADING_LANGUAGE_VERSION = 0x8B8C
    GL_FRAMEBUFFER_COMPLETE = 0x8CD5
    GL_COLOR_ATTACHMENT0 = 0x8CE0
    GL_FRAMEBUFFER = 0x8D40
    GL_RED_INTEGER = 0x8D94
    GL_COPY_READ_BUFFER = 0x8F36
    GL_COPY_WRITE_BUFFER = 0x8F37
    GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS = 0x90DB
    GL_MAX_SHADER_STORAGE_BUFFER_BINDINGS = 0x90DD
    GL_MAX_SHADER_STORAGE_BLOCK_SIZE = 0x90DE
    GL_SHADER_STORAGE_BUFFER = 0x90D2
    GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS = 0x90EB
    GL_SYNC_GPU_COMMANDS_COMPLETE = 0x9117
    GL_ALREADY_SIGNALED = 0x911A
    GL_CONDITION_SATISFIED = 0x911C
    GL_WAIT_FAILED = 0x911D
    GL_COMPUTE_SHADER = 0x91B9
    GL_MAX_COMPUTE_WORK_GROUP_COUNT = 0x91BE
    GL_MAX_COMPUTE_WORK_GROUP_SIZE = 0x91BF

    def __getattr__(self, name: str) -> Any:
        # Reached once a function: resolved (its context is current), then kept as an attribute.
        signature = _FUNCTIONS.get(name)
        if signature is None:
            raise AttributeError(f"dlc's GL binding has no {name} (add it to runtime/gl.py's _FUNCTIONS)")
        address = _proc_address(name)
        if not address:  # not kept: a later look-up (another context current) may find it
            return _missing(name)
        restype, argtypes = signature
        call = _conveniences(self, name, _FUNCTYPE(restype, *argtypes)(address))
        if DEBUG and name != "glGetError":
            call = _checked(self, name, call)
        setattr(self, name, call)
        return call


_FUNCTYPE = getattr(ctypes, "WINFUNCTYPE", ctypes.CFUNCTYPE)  # GL is stdcall on Windows
GL = _GL()
GL_SHADER_STORAGE_BUFFER = _GL.GL_SHADER_STORAGE_BUFFER


class Fast:
    """Raw ctypes GL entry points for the hot path; no error checking, no argument conversion."""

    # name -> (GL symbol, argument types); all return void.
    _SIGNATURES: dict[str, tuple[str, tuple[Any, ...]]] = {
        "use_program": ("glUseProgram", (ctypes.c_uint,)),
        "_bind_buffer_base": ("glBindBufferBase", (ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)),
        "dispatch": ("glDispatchCompute", (ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)),
        "memory_barrier": ("glMemoryBarrier", (ctypes.c_uint,)),
        "uniform1i": ("glUniform1i", (ctypes.c_int, ctypes.c_int)),
        "uniform1f": ("glUniform1f", (ctypes.c_int, ctypes.c_float)),
        "program_uniform1i": ("glProgramUniform1i", (ctypes.c_uint, ctypes.c_int, ctypes.c_int)),
        "program_uniform1f": (
            "glProgramUniform1f",
            (ctypes.c_uint, ctypes.c_int, ctypes.c_float),
        ),
    }
    # GL 4.5 entry points: None where the driver lacks them (callers then take `GL`'s path).
    _OPTIONAL: dict[str, tuple[str, tuple[Any, ...]]] = {
        # GL 4.4 multi-bind: (target, first binding, count, buffer handles): a kernel's
        # buffers in one call instead of one call each
        "bind_buffers_base": (
            "glBindBuffersBase",
            (ctypes.c_uint, ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)),
        ),
        # (buffer, offset, bytes, host pointer): feeds written and leaves read without
        # `GL`'s argument handling
        "buffer_sub_data": (
            "glNamedBufferSubData",
            (ctypes.c_uint, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_void_p),
        ),
        "get_buffer_sub_data": (
            "glGetNamedBufferSubData",
            (ctypes.c_uint, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_void_p),
        ),
        # (read buffer, write buffer, read offset, write offset, bytes)
        "copy_buffer": (
            "glCopyNamedBufferSubData",
            (ctypes.c_uint, ctypes.c_uint, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_ssize_t),
        ),
    }

    # Entry points whose arguments are all small ints (handles, counts, locations, bits):
    # called without ctypes argument conversion, which costs more than the call itself
    # (0.69 against 0.23 us for three ints, here). ctypes passes a Python int as a C int and
    # a ctypes array as a pointer; every caller passes plain ints below 2**31 (copy_buffer's
    # 64-bit offsets keep their declared types).
    _PLAIN_INTS = frozenset(
        {
            "use_program",
            "_bind_buffer_base",
            "bind_buffers_base",
            "dispatch",
            "memory_barrier",
            "uniform1i",
            "program_uniform1i",
        }
    )

    def __init__(self) -> None:
        self._resolved = False

    def bind_buffer_base(self, index: int, buffer_handle: int) -> None:
        """Bind a buffer at shader-storage binding `index`."""
        self._bind_buffer_base(GL_SHADER_STORAGE_BUFFER, index, buffer_handle)

    def resolve(self) -> None:
        """Look up every entry point; needs a current context on platforms that care."""
        if self._resolved:
            return
        functype = getattr(ctypes, "WINFUNCTYPE", ctypes.CFUNCTYPE)  # GL is stdcall on Windows
        for attr, (symbol, argtypes) in self._SIGNATURES.items():
            address = _proc_address(symbol)
            if not address:
                raise OSError(f"OpenGL entry point {symbol} not found")
            setattr(self, attr, functype(None, *(() if attr in self._PLAIN_INTS else argtypes))(address))
        for attr, (symbol, argtypes) in self._OPTIONAL.items():
            address = _proc_address(symbol)
            plain = attr in self._PLAIN_INTS
            setattr(self, attr, functype(None, *(() if plain else argtypes))(address) if address else None)
        self._resolved = True

    def __getattr__(self, name: str) -> Any:
        # Only reached for entry points not yet resolved (a context without compute resolves
        # none up front): resolve now; its device's context is current.
        if name.startswith("__") or (name not in self._SIGNATURES and name not in self._OPTIONAL):
            raise AttributeError(name)
        self.resolve()
        return object.__getattribute__(self, name)


# ---------------------------------------------------------------- finding entry points

_library: list[Any] = []  # [the GL library, or None where none loads], once looked for


def _gl_library() -> Any:
    """The GL library whose exports come first: glvnd's libOpenGL on EGL (libGL pulls in
    GLX), libGL on a window system; OpenGL.framework on macOS, opengl32 on Windows."""
    if not _library:
        if sys.platform == "win32":
            names = ["opengl32"]
        elif sys.platform == "darwin":
            names = ["/System/Library/Frameworks/OpenGL.framework/OpenGL"]
        else:
            names = ["libOpenGL.so.0", "libGL.so.1"]
            if PYOPENGL_PLATFORM != "egl":
                names.reverse()
        found = None
        for name in names:
            try:
                found = ctypes.CDLL(name)
                break
            except OSError:
                continue
        _library.append(found)
    return _library[0]


def _proc_address(symbol: str) -> int:
    """Address of a GL function: the GL library's export first, then the platform's lookup."""
    library = _gl_library()
    if library is not None:
        try:
            return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value or 0
        except AttributeError:
            pass
    if EGL is not None:
        address = EGL.eglGetProcAddress(symbol.encode())
        if address:
            return int(address)
    try:  # a glfw context: its own lookup (wglGetProcAddress, glXGetProcAddress, ...)
        glfw = sys.modules.get("glfw")
        return int(ctypes.cast(glfw.get_proc_address(symbol), ctypes.c_void_p).value or 0) if glfw else 0
    except Exception:
        return 0


__all__ = ["DEBUG", "EGL", "EGL_IMPORT_ERROR", "GL", "PYOPENGL_PLATFORM", "Fast", "GLError", "NullFunctionError"]
