"""The process-wide OpenGL context: headless EGL on a device, or a hidden glfw window.

Choice (env `DLC_GL`): `egl` = EGL device platform only; `glfw` = a hidden glfw window only;
unset = EGL first, then glfw if a display exists (`DISPLAY` / `WAYLAND_DISPLAY`).
`DLC_EGL_DEVICE=N` picks EGL device N (and rules out the glfw fallback); by default the first
device that gives an OpenGL >= 4.3 core context wins.

Threads: a GL context is current on at most one thread. The context is made current on the
thread that first calls `get_context()`, and every GL call dlc makes must come from that thread
(asyncio coroutines on it are fine). To move it, call `Session.release()` (or the device's
`release()`) on the old thread, then use it on the new one; if it is still current elsewhere,
that raises (runtime/device.py words the error with that public API).

A process may hold several contexts: each belongs to a `runtime.device.Device`, which owns
what is cached against it. `get_context()` is the current device's context (the default
device's until another is used); `create_context()` makes a new one.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from dlc.runtime.errors import RuntimeFailure
from dlc.runtime.optional import require

MIN_VERSION = (4, 3)  # compute shaders and shader storage buffers (the compute target)
TEXTURE_VERSION = (3, 3)  # fragment shaders over float textures (the texture target)
INSTALL_HINT = "install Debian's libegl1 libegl-mesa0 libgl1-mesa-dri, or a GPU driver"


def _gl():
    """dlc.runtime.gl (dlc's GL binding, with its EGL one), imported on first use."""
    return require("dlc.runtime.gl")


def _glfw():
    """glfw (loads libglfw, absent on many headless machines), imported on first use."""
    return require("glfw")


# EGL display -> contexts alive on it: eglTerminate would end them all, so the last one does it
_display_users: dict[int, int] = {}


@dataclass
class GLContext:
    """A current OpenGL context and what the driver says about itself."""

    vendor: str
    renderer: str
    version: str
    glsl_version: str
    platform: str  # "egl" or "glfw"
    device_index: int | None  # EGL device number; None for glfw
    gl_version: tuple[int, int]
    limits: dict[str, Any]
    extensions: frozenset[str] = field(repr=False)
    device_count: int | None = None
    has_compute: bool = True  # False: only the texture target runs (macOS-like GL)
    _handles: dict[str, Any] = field(default_factory=dict, repr=False)
    _thread: int = field(default=0, repr=False)

    @property
    def has_dsa(self) -> bool:
        """Direct state access (glNamedBuffer*): core in 4.5, an extension before."""
        return self.gl_version >= (4, 5) or "GL_ARB_direct_state_access" in self.extensions

    def make_current(self) -> None:
        """Make this context current on the calling thread."""
        h = self._handles
        if self.platform == "egl":
            EGL = _gl().EGL
            if not EGL.eglMakeCurrent(h["display"], EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, h["context"]):
                raise RuntimeFailure("the OpenGL context is current on another thread")
        else:
            glfw = _glfw()
            glfw.make_context_current(h["window"])
        self._thread = threading.get_ident()

    def destroy(self) -> None:
        """Destroy the context (and everything made in it); it must not be used again."""
        h = self._handles
        if self.platform == "egl":
            EGL = _gl().EGL
            _egl_destroy(EGL, h)
        else:
            glfw = _glfw()
            if _address(glfw.get_current_context()) == _address(h["window"]):
                glfw.make_context_current(None)
            glfw.destroy_window(h["window"])
        self._handles = {}
        self._thread = 0

    def release_current(self) -> None:
        """Detach the context from the calling thread so another thread can take it."""
        h = self._handles
        if self.platform == "egl":
            EGL = _gl().EGL
            EGL.eglMakeCurrent(h["display"], EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, EGL.EGL_NO_CONTEXT)
        else:
            glfw = _glfw()
            glfw.make_context_current(None)
        self._thread = 0


def create_context(egl_device: int | None = None, platform: str | None = None) -> GLContext:
    """A new context, current on the calling thread. By default the platform and EGL device
    follow DLC_GL and DLC_EGL_DEVICE; `platform` ("egl" / "glfw") and `egl_device` pin them
    (a further context of a device already in use)."""
    if platform == "glfw":
        try:
            return _create_glfw()
        except _NoContext as exc:
            raise RuntimeFailure(f"no OpenGL context: {exc}") from None
    if platform == "egl" or egl_device is not None:
        try:
            return _create_egl(egl_device)
        except _NoContext as exc:
            raise RuntimeFailure(f"no OpenGL context: {exc}") from None
    return _create()


def _create() -> GLContext:
    choice = os.environ.get("DLC_GL", "").strip().lower()
    if choice not in ("", "egl", "glfw"):
        raise RuntimeFailure(f"no OpenGL context: DLC_GL={choice} is not one of egl, glfw")
    reasons: list[str] = []
    installable = True
    if choice in ("", "egl"):
        try:
            return _create_egl()
        except _NoContext as exc:
            reasons.append(str(exc))
            installable = exc.installable
    # Windows and macOS always have a window system; Linux needs X11 or Wayland.
    has_display = not sys.platform.startswith("linux") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    explicit_device = "DLC_EGL_DEVICE" in os.environ
    if choice == "glfw" and not has_display:
        reasons.append("DLC_GL=glfw needs a display, but neither DISPLAY nor WAYLAND_DISPLAY is set")
        installable = False
    elif choice == "glfw" or (choice == "" and has_display and not explicit_device):
        try:
            return _create_glfw()
        except _NoContext as exc:
            reasons.append(str(exc))
    message = f"no OpenGL context: {'; '.join(reasons)}"
    if installable:
        message += f" ({INSTALL_HINT}"
        if choice != "glfw" and not has_display:
            message += "; or set DLC_GL=glfw to use a window where a display exists"
        message += ")"
    raise RuntimeFailure(message)


class _NoContext(Exception):
    """One platform could not give a context; the message is a short reason."""

    def __init__(self, reason: str, installable: bool = True):
        super().__init__(reason)
        self.installable = installable  # False when a setting, not a missing package, is at fault


# ---------------------------------------------------------------- EGL device platform


def _query_egl_devices(EGL):
    """The EGL devices (EGLDeviceEXT handles, possibly none)."""
    if EGL.eglQueryDevicesEXT is None or EGL.eglGetPlatformDisplayEXT is None:
        raise _NoContext("EGL lacks the device platform (no eglQueryDevicesEXT or eglGetPlatformDisplayEXT)")
    count = EGL.EGLint(0)
    try:
        if not EGL.eglQueryDevicesEXT(0, None, ctypes.pointer(count)):
            raise _NoContext("eglQueryDevicesEXT failed")
        devices = (EGL.EGLDeviceEXT * max(count.value, 1))()
        if count.value and not EGL.eglQueryDevicesEXT(count.value, devices, ctypes.pointer(count)):
            raise _NoContext("eglQueryDevicesEXT failed")
    except _NoContext:
        raise
    except Exception as exc:  # e.g. the entry point is missing from this libEGL
        raise _NoContext(f"EGL device query failed ({exc})") from exc
    return devices[: count.value]


def egl_device_count() -> int:
    """How many EGL devices this machine has (0 without EGL's device platform); makes no
    context (data-parallel ranks pick theirs from it before any is made, so the display
    `start_egl_early` readied, maybe not the rank's, is let go)."""
    gl = _gl()
    _end_early_display()
    if gl.EGL is None:
        return 0
    try:
        return len(_query_egl_devices(gl.EGL))
    except Exception:
        return 0


def _create_egl(egl_device: int | None = None) -> GLContext:
    gl = _gl()
    _wait_for_early_egl()
    if gl.PYOPENGL_PLATFORM not in ("", "egl"):
        raise _NoContext(
            f"PYOPENGL_PLATFORM={gl.PYOPENGL_PLATFORM} rules out EGL (unset it, or set it to egl)",
            installable=False,
        )
    if gl.EGL is None:
        raise _NoContext(f"EGL is not available ({gl.EGL_IMPORT_ERROR})")
    EGL = gl.EGL
    devices = _query_egl_devices(EGL)
    n = len(devices)
    if n == 0:
        raise _NoContext("EGL found no device")

    wanted = os.environ.get("DLC_EGL_DEVICE", "").strip() if egl_device is None else str(egl_device)
    if wanted:
        if not wanted.isdigit() or int(wanted) >= n:
            raise _NoContext(
                f"{'EGL device ' if egl_device is not None else 'DLC_EGL_DEVICE='}{wanted} but EGL found "
                f"{n} device(s), numbered 0..{n - 1}",
                installable=False,
            )
        candidates = [int(wanted)]
    else:
        candidates = list(range(n))

    reasons = []
    for index in candidates:
        try:
            display = EGL.eglGetPlatformDisplayEXT(EGL.EGL_PLATFORM_DEVICE_EXT, devices[index], None)
            handles = _egl_context_on(EGL, display)
            ctx = _describe("egl", index, handles)
            ctx.device_count = n
            return ctx
        except _NoContext as exc:
            reasons.append(f"EGL device {index}: {exc}")
    raise _NoContext("; ".join(reasons))


def _egl_context_on(EGL: Any, display: Any) -> dict[str, Any]:
    if not display:
        raise _NoContext("eglGetPlatformDisplayEXT gave no display")
    major, minor = EGL.EGLint(), EGL.EGLint()
    if not EGL.eglInitialize(display, ctypes.pointer(major), ctypes.pointer(minor)):
        raise _NoContext(f"eglInitialize failed (error 0x{EGL.eglGetError():x})")
    handles: dict[str, Any] = {"display": display}
    _display_users[_address(display)] = _display_users.get(_address(display), 0) + 1
    try:
        if not EGL.eglBindAPI(EGL.EGL_OPENGL_API):
            raise _NoContext("this EGL has no desktop OpenGL")
        config = _egl_config(EGL, display)
        for want in ((4, 6), (4, 5), MIN_VERSION, TEXTURE_VERSION):
            attribs = (EGL.EGLint * 7)(
                EGL.EGL_CONTEXT_MAJOR_VERSION, want[0],
                EGL.EGL_CONTEXT_MINOR_VERSION, want[1],
                EGL.EGL_CONTEXT_OPENGL_PROFILE_MASK, EGL.EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT,
                EGL.EGL_NONE,
            )  # fmt: skip
            context = EGL.eglCreateContext(display, config, EGL.EGL_NO_CONTEXT, attribs)
            if context:  # None: this version refused
                break
        else:
            raise _NoContext(f"no OpenGL {TEXTURE_VERSION[0]}.{TEXTURE_VERSION[1]} core context")
        handles["context"] = context
        # Surfaceless: compute needs no framebuffer (EGL_KHR_surfaceless_context).
        if not EGL.eglMakeCurrent(display, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, context):
            raise _NoContext(f"eglMakeCurrent without a surface failed (0x{EGL.eglGetError():x})")
    except _NoContext:
        _egl_destroy(EGL, handles)
        raise
    except Exception as exc:  # a driver's or ctypes' error: one line of it
        _egl_destroy(EGL, handles)
        raise _NoContext(f"EGL: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    return handles


def _egl_config(EGL: Any, display: Any) -> Any:
    """A config able to render desktop GL; pbuffer-capable if the device offers one."""
    for surface in (EGL.EGL_PBUFFER_BIT, None):
        attribs = [EGL.EGL_RENDERABLE_TYPE, EGL.EGL_OPENGL_BIT]
        if surface is not None:
            attribs += [EGL.EGL_SURFACE_TYPE, surface]
        attribs.append(EGL.EGL_NONE)
        config = EGL.EGLConfig()
        count = EGL.EGLint(0)
        ok = EGL.eglChooseConfig(
            display,
            (EGL.EGLint * len(attribs))(*attribs),
            ctypes.pointer(config),
            1,
            ctypes.pointer(count),
        )
        if ok and count.value > 0:
            return config
    # EGL_KHR_no_config_context: a context without any config.
    return EGL.EGLConfig()


def _egl_destroy(EGL: Any, handles: dict[str, Any]) -> None:
    """Destroy the context and, when no other context of ours uses it, end the display."""
    try:
        display = handles["display"]
        if handles.get("context"):
            if _address(EGL.eglGetCurrentContext()) == _address(handles["context"]):
                EGL.eglMakeCurrent(display, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, EGL.EGL_NO_CONTEXT)
            EGL.eglDestroyContext(display, handles["context"])
        users = _display_users.get(_address(display), 1) - 1
        _display_users[_address(display)] = users
        if users <= 0:
            del _display_users[_address(display)]
            EGL.eglTerminate(display)
    except Exception:
        pass  # best effort (also while reporting a creation failure)


def _address(handle: Any) -> int:
    """A handle's pointer value (an int, or a ctypes wrapper: glfw makes a new one per call)."""
    if not handle:
        return 0
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


# ---------------------------------------------------------------- EGL's driver, loaded early

_EGL_PLATFORM_DEVICE_EXT = 0x313F
# "thread": the thread loading the driver; "display": (libEGL, the display it initialized)
_early: dict[str, Any] = {}


def start_egl_early() -> None:
    """Load the EGL driver on a background thread while the calling thread imports the runtime:
    the device query and eglInitialize of the display the default context takes
    (DLC_EGL_DEVICE's, else device 0's) cost ~25 ms on Mesa and 20-250 ms on NVIDIA's driver
    (the first process after boot the most). runtime/gl.py calls this once it has loaded
    libEGL; `_create_egl` waits for the thread, and its own eglInitialize of the same display
    then returns at once. Raw ctypes of its own; a failure is silent: the context's creation
    reports what is wrong."""
    wanted = os.environ.get("DLC_EGL_DEVICE", "").strip()
    if _early or not sys.platform.startswith("linux") or (wanted and not wanted.isdigit()):
        return
    # not a daemon: the interpreter's exit waits for it rather than cutting a driver call short
    thread = threading.Thread(target=_load_egl, args=(int(wanted or 0),), name="dlc-egl-start")
    _early["thread"] = thread
    thread.start()


def _load_egl(index: int) -> None:
    try:
        egl = ctypes.CDLL("libEGL.so.1")  # a handle of our own: runtime/egl.py's keeps its own signatures
        proc = egl.eglGetProcAddress
        proc.restype, proc.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
        query_at, display_at = proc(b"eglQueryDevicesEXT"), proc(b"eglGetPlatformDisplayEXT")
        if not (query_at and display_at):
            return
        count_p = ctypes.POINTER(ctypes.c_int)
        query = ctypes.CFUNCTYPE(ctypes.c_uint, ctypes.c_int, ctypes.c_void_p, count_p)(query_at)
        get_display = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p)(display_at)
        count = ctypes.c_int(0)
        if not query(0, None, ctypes.byref(count)) or index >= count.value:
            return
        devices = (ctypes.c_void_p * count.value)()
        if not query(count.value, devices, ctypes.byref(count)) or index >= count.value:
            return
        display = get_display(_EGL_PLATFORM_DEVICE_EXT, devices[index], None)
        initialize = egl.eglInitialize
        initialize.restype, initialize.argtypes = ctypes.c_uint, [ctypes.c_void_p] * 3
        if display and initialize(display, None, None):
            _early["display"] = (egl, display)
    except Exception:
        pass  # no libEGL, no device platform: creating the context says so


def _wait_for_early_egl() -> None:
    thread = _early.get("thread")
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def _end_early_display() -> None:
    """Terminate the display `start_egl_early` initialized if no context of ours uses it."""
    _wait_for_early_egl()
    found = _early.pop("display", None)
    if found is not None and found[1] not in _display_users:
        egl, display = found
        try:
            egl.eglTerminate.argtypes = [ctypes.c_void_p]
            egl.eglTerminate(display)
        except Exception:
            pass


# ---------------------------------------------------------------- glfw hidden window


def _create_glfw() -> GLContext:
    try:
        glfw = _glfw()
    except Exception as exc:
        raise _NoContext(f"glfw is not importable ({exc})") from exc
    gl = _gl()

    try:
        if not glfw.init():
            raise _NoContext("glfw.init failed (no display?)")
        # Match PYOPENGL_PLATFORM: where it is EGL, ask glfw for an EGL context first.
        apis = [glfw.NATIVE_CONTEXT_API]
        if gl.PYOPENGL_PLATFORM == "egl":
            apis.insert(0, glfw.EGL_CONTEXT_API)
        window = None
        for api in apis:
            glfw.default_window_hints()
            glfw.window_hint(glfw.VISIBLE, glfw.FALSE)
            glfw.window_hint(glfw.CONTEXT_CREATION_API, api)
            glfw.window_hint(glfw.CONTEXT_VERSION_MAJOR, MIN_VERSION[0])
            glfw.window_hint(glfw.CONTEXT_VERSION_MINOR, MIN_VERSION[1])
            glfw.window_hint(glfw.OPENGL_PROFILE, glfw.OPENGL_CORE_PROFILE)
            glfw.window_hint(glfw.OPENGL_FORWARD_COMPAT, glfw.TRUE)
            try:
                window = glfw.create_window(16, 16, "dlc", None, None)
            except Exception:
                window = None
            if window:
                break
        if not window:
            raise _NoContext(f"glfw made no OpenGL {MIN_VERSION[0]}.{MIN_VERSION[1]} window")
        glfw.make_context_current(window)
    except _NoContext:
        raise
    except Exception as exc:  # glfw reports errors as exceptions by default
        raise _NoContext(f"glfw: {str(exc).splitlines()[0]}") from exc
    return _describe("glfw", None, {"window": window})


# ---------------------------------------------------------------- what the driver says


def _describe(platform: str, device_index: int | None, handles: dict[str, Any]) -> GLContext:
    GL = _gl().GL

    def text(name: int) -> str:
        value = GL.glGetString(name)
        return value.decode(errors="replace") if value else ""

    version = (int(GL.glGetIntegerv(GL.GL_MAJOR_VERSION)), int(GL.glGetIntegerv(GL.GL_MINOR_VERSION)))
    if version < TEXTURE_VERSION:
        raise _NoContext(
            f"OpenGL {version[0]}.{version[1]} is below {TEXTURE_VERSION[0]}."
            f"{TEXTURE_VERSION[1]} (float textures and fragment shaders)"
        )
    count = int(GL.glGetIntegerv(GL.GL_NUM_EXTENSIONS))
    extensions = frozenset(GL.glGetStringi(GL.GL_EXTENSIONS, i).decode(errors="replace") for i in range(count))
    # Compute needs 4.3 or the extensions (Mesa can be told to drop them, as on macOS).
    compute = version >= MIN_VERSION or {"GL_ARB_compute_shader", "GL_ARB_shader_storage_buffer_object"} <= extensions
    ctx = GLContext(
        vendor=text(GL.GL_VENDOR),
        renderer=text(GL.GL_RENDERER),
        version=text(GL.GL_VERSION),
        glsl_version=text(GL.GL_SHADING_LANGUAGE_VERSION),
        platform=platform,
        device_index=device_index,
        gl_version=version,
        limits=_limits(GL, compute),
        extensions=extensions,
        has_compute=compute,
        _handles=handles,
        _thread=threading.get_ident(),
    )
    return ctx


def _limits(GL: Any, compute: bool = True) -> dict[str, Any]:
    def indexed(name: int) -> tuple[int, int, int]:
        return tuple(GL.glGetIntegeri_v(name, i) for i in range(3))  # type: ignore[return-value]

    def get64(name: int) -> int:
        return GL.glGetInteger64v(name)

    texture = {
        "max_texture_size": int(GL.glGetIntegerv(GL.GL_MAX_TEXTURE_SIZE)),
        "max_texture_units": int(GL.glGetIntegerv(GL.GL_MAX_TEXTURE_IMAGE_UNITS)),
        "max_draw_buffers": int(GL.glGetIntegerv(GL.GL_MAX_DRAW_BUFFERS)),
        "max_fragment_uniform_components": int(GL.glGetIntegerv(GL.GL_MAX_FRAGMENT_UNIFORM_COMPONENTS)),
    }
    if not compute:
        return texture
    return {
        **texture,
        "max_ssbo_size": get64(GL.GL_MAX_SHADER_STORAGE_BLOCK_SIZE),
        "max_ssbo_bindings": int(GL.glGetIntegerv(GL.GL_MAX_SHADER_STORAGE_BUFFER_BINDINGS)),
        "max_compute_ssbo_blocks": int(GL.glGetIntegerv(GL.GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS)),
        "max_work_group_count": indexed(GL.GL_MAX_COMPUTE_WORK_GROUP_COUNT),
        "max_work_group_size": indexed(GL.GL_MAX_COMPUTE_WORK_GROUP_SIZE),
        "max_work_group_invocations": int(GL.glGetIntegerv(GL.GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS)),
        "max_shared_memory": int(GL.glGetIntegerv(GL.GL_MAX_COMPUTE_SHARED_MEMORY_SIZE)),
        "max_compute_uniform_components": int(GL.glGetIntegerv(GL.GL_MAX_COMPUTE_UNIFORM_COMPONENTS)),
    }
