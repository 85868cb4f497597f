"""The one place that imports PyOpenGL, in the order it needs, plus direct ctypes entry points.

Import order matters: PyOpenGL picks its platform (EGL, GLX, ...) from `PYOPENGL_PLATFORM` at
first import, and PyOpenGL 3.1.10's EGL module fails to import once `OpenGL.ERROR_CHECKING` is
False. So: choose the platform, import `OpenGL.EGL`, set error checking (on only when
`DLC_DEBUG=1`), then import `OpenGL.GL`.

`Fast` holds raw ctypes function pointers for the launch loop (a ctypes call costs ~1.3 us
against ~2.4 us through PyOpenGL, DESIGN.md). Each `runtime.device.Device` resolves its own
once its context is current (a pointer may differ between contexts, as on Windows): hot
loops take `device.fast` of the device they run on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from types import ModuleType
from typing import Any

from dlc.runtime.context import start_egl_early
from dlc.runtime.optional import require

DEBUG = os.environ.get("DLC_DEBUG", "") == "1"


def _choose_platform() -> str:
    """Set PYOPENGL_PLATFORM unless the user did; return what PyOpenGL will use ('' = its pick)."""
    if "PYOPENGL_PLATFORM" in os.environ:
        return os.environ["PYOPENGL_PLATFORM"]
    wants_glfw = os.environ.get("DLC_GL", "").lower() == "glfw"
    # EGL only where a libEGL exists: otherwise PyOpenGL's EGL platform cannot even load, and
    # the glfw fallback (GLX on X11) must keep PyOpenGL's default platform.
    if not wants_glfw and sys.platform.startswith("linux") and _find_egl():
        os.environ["PYOPENGL_PLATFORM"] = "egl"
        return "egl"
    return ""


def _find_egl() -> bool:
    try:  # the soname first: a dlopen, where find_library runs `ldconfig -p` in a subprocess
        ctypes.CDLL("libEGL.so.1")
        return True
    except OSError:
        pass
    return bool(ctypes.util.find_library("EGL"))  # a libEGL known by another name


PYOPENGL_PLATFORM = _choose_platform()
if PYOPENGL_PLATFORM == "egl" and os.environ.get("DLC_GL", "").strip().lower() in ("", "egl"):
    start_egl_early()  # the driver loads while PyOpenGL imports (runtime/context.py)

import OpenGL  # noqa: E402

EGL: ModuleType | None
EGL_IMPORT_ERROR: str = ""
if PYOPENGL_PLATFORM == "egl":
    try:
        from OpenGL import EGL as _egl  # noqa: E402  (must precede ERROR_CHECKING = False)

        EGL = _egl
    except Exception as exc:  # a broken or missing libEGL: context.py reports it in one line
        EGL = None
        EGL_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
else:
    EGL = None
    EGL_IMPORT_ERROR = f"PyOpenGL platform is {PYOPENGL_PLATFORM or 'its default'}, not egl"

OpenGL.ERROR_CHECKING = DEBUG
from OpenGL import GL, platform  # noqa: E402
from OpenGL.error import GLError  # noqa: E402  (for modules that must not import OpenGL first)

GL_SHADER_STORAGE_BUFFER = 0x90D2


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
    # GL 4.5 entry points: None where the driver lacks them (callers then take PyOpenGL's path).
    _OPTIONAL: dict[str, tuple[str, tuple[Any, ...]]] = {
        # GL 4.4 multi-bind: (target, first binding, count, buffer handles): a kernel's
        # buffers in one call instead of one call each
        "bind_buffers_base": (
            "glBindBuffersBase",
            (ctypes.c_uint, ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)),
        ),
        # (buffer, offset, bytes, host pointer): feeds written and leaves read without
        # PyOpenGL's argument handling
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


def _proc_address(symbol: str) -> int:
    """Address of a GL function: the GL library's export first, then the platform's lookup."""

    library = getattr(platform.PLATFORM, "GL", None)
    if library is not None:
        try:
            return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value or 0
        except AttributeError:
            pass
    address = platform.PLATFORM.getExtensionProcedure(symbol.encode())
    if address:
        return int(ctypes.cast(address, ctypes.c_void_p).value or 0)
    try:  # a glfw context on a PyOpenGL platform whose lookup missed
        glfw = require("glfw")  # it loads libglfw, absent on headless machines
        return int(glfw.get_proc_address(symbol) or 0)
    except Exception:
        return 0


__all__ = ["DEBUG", "EGL", "EGL_IMPORT_ERROR", "GL", "PYOPENGL_PLATFORM", "Fast", "GLError"]
