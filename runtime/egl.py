"""The EGL calls dlc makes, as ctypes functions of libEGL.so.1 (no PyOpenGL).

`load()` gives an `EGL` whose functions return what the C functions return: EGLBoolean and
EGLint as ints, handles (displays, contexts, configs) as ints or None for a null handle.
Nothing raises on EGL's behalf: a caller reads the result and `eglGetError()`, as
runtime/context.py does. The device-platform extensions (EGL_EXT_device_base,
EGL_EXT_platform_base) come through eglGetProcAddress; they are None where this libEGL lacks
them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

_int, _uint, _ptr = ctypes.c_int32, ctypes.c_uint, ctypes.c_void_p

# name -> (restype, argtypes) of libEGL's own exports (EGL 1.4/1.5 core)
_CORE: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "eglGetError": (_int, ()),
    "eglGetProcAddress": (_ptr, (ctypes.c_char_p,)),
    "eglInitialize": (_uint, (_ptr, _ptr, _ptr)),
    "eglTerminate": (_uint, (_ptr,)),
    "eglBindAPI": (_uint, (_uint,)),
    "eglChooseConfig": (_uint, (_ptr, _ptr, _ptr, _int, _ptr)),
    "eglCreateContext": (_ptr, (_ptr, _ptr, _ptr, _ptr)),
    "eglDestroyContext": (_uint, (_ptr, _ptr)),
    "eglMakeCurrent": (_uint, (_ptr, _ptr, _ptr, _ptr)),
    "eglGetCurrentContext": (_ptr, ()),
}
# the EXT entry points, found through eglGetProcAddress
_EXTENSIONS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "eglQueryDevicesEXT": (_uint, (_int, _ptr, _ptr)),
    "eglGetPlatformDisplayEXT": (_ptr, (_uint, _ptr, _ptr)),
}


class EGL:
    """libEGL's functions and the constants dlc uses (names as in the EGL headers)."""

    EGLint = ctypes.c_int32
    EGLConfig = ctypes.c_void_p
    EGLDeviceEXT = ctypes.c_void_p
    EGL_NO_SURFACE = None
    EGL_NO_CONTEXT = None
    EGL_NO_DISPLAY = None
    EGL_SUCCESS = 0x3000
    EGL_NONE = 0x3038
    EGL_SURFACE_TYPE = 0x3033
    EGL_RENDERABLE_TYPE = 0x3040
    EGL_PBUFFER_BIT = 0x0001
    EGL_OPENGL_BIT = 0x0008
    EGL_OPENGL_API = 0x30A2
    EGL_CONTEXT_MAJOR_VERSION = 0x3098
    EGL_CONTEXT_MINOR_VERSION = 0x30FB
    EGL_CONTEXT_OPENGL_PROFILE_MASK = 0x30FD
    EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT = 0x0001
    EGL_PLATFORM_DEVICE_EXT = 0x313F

    eglQueryDevicesEXT: Any
    eglGetPlatformDisplayEXT: Any

    def __init__(self, library: ctypes.CDLL):
        self.library = library
        for name, (restype, argtypes) in _CORE.items():
            setattr(self, name, ctypes.CFUNCTYPE(restype, *argtypes)((name, library)))
        for name, (restype, argtypes) in _EXTENSIONS.items():
            address = self.eglGetProcAddress(name.encode())
            setattr(self, name, ctypes.CFUNCTYPE(restype, *argtypes)(address) if address else None)


def load() -> EGL:
    """libEGL by its soname (a dlopen; `find_library` runs `ldconfig -p` in a subprocess, so
    only for a libEGL known by another name); OSError when there is none."""
    try:
        return EGL(ctypes.CDLL("libEGL.so.1"))
    except OSError:
        name = ctypes.util.find_library("EGL")
        if not name:
            raise
        return EGL(ctypes.CDLL(name))
