"""Where eager arrays live and their kernels run: the numpy device or the GL device.

A device stores an array's values behind a handle (an np.ndarray on numpy, a GPU Buffer on
GL) and runs an eager call (`dlc.ops.Call`: a small IR graph with this call's numbers and
dims) over handles, giving a new handle; results stay where they are until read.

Which device new arrays use: `set_backend("gl" | "numpy")`, else env `DLC_BACKEND`, else gl
when an OpenGL context can be made (numpy otherwise, said once on stderr). An array keeps the
device it was made on; an op runs on its arguments' device. Eager arrays on gl live on the
default GL device.

GL devices for sessions (`dlc.runtime.device.Device`, one OpenGL context each):
`gl_devices()` lists them, `open_gl_device()` makes another; a Session made inside
`with device:` keeps its params, programs and buffers there.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Protocol

import numpy as np

from dlc.compiler.reference import evaluate
from dlc.runtime import dims as dim_algebra
from dlc.runtime.optional import require

_BACKENDS = ("gl", "numpy")
_devices: dict[str, Device] = {}
# What to forget when the default GL device was closed: the eager kernel cache registers its
# clear_cache here (dlc/eager_kernels.py; it sits above this module).
_on_gl_reset: list = []
_chosen: str | None = None


class Device(Protocol):
    """What a device does for eager arrays."""

    name: str

    def upload(self, value: np.ndarray) -> Any: ...
    def download(self, handle: Any, shape: tuple[int, ...]) -> np.ndarray: ...
    async def read(self, handle: Any, shape: tuple[int, ...]) -> np.ndarray: ...
    def free(self, handle: Any) -> None: ...  # now, on the thread that owns the device
    def release(self, handle: Any) -> None: ...  # from a finalizer: maybe later, on that thread
    def run(self, call: Any, handles: list[Any]) -> Any: ...  # call: a dlc.ops.Call


class NumpyDevice:
    """Handles are float32 np.ndarrays; kernels run through the reference interpreter."""

    name = "numpy"

    def upload(self, value: np.ndarray) -> np.ndarray:
        return np.array(value, dtype=np.float32, copy=True)

    def download(self, handle: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return np.array(handle, dtype=np.float32, copy=True).reshape(shape)

    async def read(self, handle: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        await asyncio.sleep(0)  # still a suspension point, as on the GPU
        return self.download(handle, shape)

    def free(self, handle: np.ndarray) -> None:
        pass  # numpy memory goes with the last reference

    def release(self, handle: np.ndarray) -> None:
        pass

    def run(self, call: Any, handles: list[np.ndarray]) -> np.ndarray:
        leaves = dict(
            zip(
                call.arg_names,
                (h.reshape(_bound(call.graph.node(n).shape, call.dims)) for n, h in zip(call.arg_names, handles)),
            )
        )
        leaves.update((n, np.float32(v)) for n, v in zip(call.scalar_names, call.scalars))
        out = evaluate(call.graph, [call.out], leaves, call.dims, np.float32)[call.out]
        return np.ascontiguousarray(out, dtype=np.float32).reshape(call.shape)


def gl_eager() -> Any:
    """dlc.backends.gl_eager, imported on first use (it imports OpenGL)."""
    return require("dlc.backends.gl_eager")


def gl_devices() -> list:
    """The GL devices open now, the default one first (made here if none is yet);
    RuntimeFailure when no OpenGL context can be made.

    >>> default = dlc.gl_devices()[0]
    """
    return gl_eager().gl_devices()


def open_gl_device(egl_device: int | None = None):
    """A new GL device: its own OpenGL context, program cache and buffers, on EGL device
    `egl_device` (default: the default device's; a second context on one GPU works too).
    Use it with `with device:`; `device.close()` frees all it holds.

    >>> with dlc.open_gl_device():  # arrays made here live on this context (`1`: EGL device 1)
    ...     y = dlc.ones([4]) * 2
    """
    return gl_eager().open_gl_device(egl_device)


def _bound(shape: tuple, dims: dict) -> tuple[int, ...]:
    return dim_algebra.bind(shape, dims)


def set_backend(name: str | None) -> None:
    """Make new arrays on `name` ("gl" or "numpy"); None: back to the default choice.

    >>> dlc.set_backend("numpy")
    """
    global _chosen
    if name is not None and name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}: use 'gl' or 'numpy'")
    if name is not None:
        get_device(name)  # fail now, not at the first array, if gl cannot start
    _chosen = name


def get_backend() -> str:
    """The backend new arrays go to now: "gl" or "numpy".

    >>> dlc.set_backend("numpy"); dlc.get_backend()
    'numpy'
    """
    return get_device().name


def get_device(name: str | None = None) -> Device:
    """The device called `name`, or the current one (see the module doc)."""
    if name is None:
        name = _chosen or os.environ.get("DLC_BACKEND", "").strip().lower() or None
        if name is not None and name not in _BACKENDS:
            raise ValueError(f"DLC_BACKEND={name!r}: use 'gl' or 'numpy'")
    _forget_closed_gl()
    if name is None:
        if "gl" in _devices:
            return _devices["gl"]
        if "auto" not in _devices:
            try:
                _devices["auto"] = _devices["gl"] = gl_eager().GLDevice()
            except Exception as e:  # no context: numpy, saying so once
                print(f"dlc: no OpenGL context ({str(e).splitlines()[0]}); eager arrays use numpy", file=sys.stderr)
                _devices["auto"] = get_device("numpy")
        return _devices["auto"]
    device = _devices.get(name)
    if device is None:
        device = _devices[name] = gl_eager().GLDevice() if name == "gl" else NumpyDevice()
    return device


def _forget_closed_gl() -> None:
    """After the default GL device was closed, eager arrays start again on a new one: its
    compiled ops held buffers of the closed device."""
    device = _devices.get("gl")  # a GLDevice (dlc/backends/gl_eager.py) when there is one
    if device is not None and device.gl_device.closed:
        del _devices["gl"]
        if _devices.get("auto") is device:
            del _devices["auto"]
        for forget in _on_gl_reset:
            forget()


def on_gl_reset(forget) -> None:
    """Call `forget()` when eager arrays move to a new GL device (the old one was closed)."""
    _on_gl_reset.append(forget)


def flush_pending() -> None:
    """Free GPU buffers of arrays the garbage collector let go of."""
    device = _devices.get("gl")
    if device is not None:
        device.flush()


def gl_counts() -> tuple[int | None, int | None]:
    """GPU buffers and bytes held in all (every GL device), when eager arrays use GL."""
    if "gl" not in _devices:
        return None, None
    return gl_eager().live_counts()  # on every GL device
