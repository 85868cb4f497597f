"""Device arrays: the seeds' NDArray. Values live on the GPU (or in numpy) until read.

    a = dlc.array([[1, 2], [3, 4]])       # uploaded once
    b = (a - 1).square().sum()            # kernels run on the GPU; nothing is read back
    b.numpy()                             # blocking read
    await b.data()                        # read without blocking the event loop
    b.dispose()                           # or let dlc.tidy / the garbage collector free it

Every language function is a method (`a.relu()`, `a.sum(axis=0)`) and a function in
`dlc.ops`; Python's + - * / @ ** unary -, < <= > >= work too (== and != stay identity
comparisons so arrays can live in sets and dicts: use `eq` / `ne`).
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.functions import REQUIRED
from dlc.compiler.registry import FUNCTIONS
from dlc.compiler.seed_names import suggest
from dlc.runtime import dims as dim_algebra

from . import debug
from . import eager_kernels as kernels
from . import scope as _scope
from .devices import Device, get_device
from .graph import _call_site, bind_args
from .indexing import getitem
from .runtime.errors import CompileError

ShapeLike = Sequence[int] | int


class Array(_scope.Tracked):
    """An n-dimensional float32 array on a device. Make one with dlc.array / zeros / ones /
    rand / randn, or as the result of an op; every op of `dlc.ops` is also a method.

    >>> a = dlc.array([[1, 2], [3, 4]])
    >>> (a @ a + 1).relu().numpy()
    array([[ 8., 11.],
           [16., 23.]], dtype=float32)
    """

    __slots__ = {
        "_device": None,
        "_handle": None,
        "shape": "The shape, a tuple of ints.\n\n>>> dlc.zeros([2, 3]).shape\n(2, 3)",
        "_nbytes": None,
        "_scope": None,
        "__weakref__": None,
    }

    # numpy's operators defer to ours (np_array + dlc_array gives an Array).
    __array_ufunc__ = None

    def __init__(self, device: Device, handle: Any, shape: tuple[int, ...]):
        self._device = device
        self._handle = handle
        self.shape: tuple[int, ...] = tuple(int(d) for d in shape)
        self._nbytes = 4 * math.prod(self.shape)
        self._scope = None
        _scope.register(self, self._nbytes)

    @classmethod
    def _wrap(cls, device: Device, handle: Any, shape: tuple[int, ...], nbytes: int) -> Array:
        """An op's result: `shape` a tuple of ints already and `nbytes` its size (dlc.ops'
        repeated calls, which know both)."""
        self = cls.__new__(cls)
        self._device = device
        self._handle = handle
        self.shape = shape
        self._nbytes = nbytes
        self._scope = None
        _scope.register(self, nbytes)
        return self

    # -- facts -----------------------------------------------------------------------
    @property
    def size(self) -> int:
        """The number of elements.

        >>> dlc.zeros([2, 3]).size
        6
        """
        return self._nbytes // 4

    @property
    def ndim(self) -> int:
        """The number of dimensions (NumPy's name; `rank` is the seeds').

        >>> dlc.zeros([2, 3]).ndim
        2
        """
        return len(self.shape)

    @property
    def rank(self) -> int:
        """The number of dimensions (the seeds' name; `ndim` is NumPy's).

        >>> dlc.zeros([2, 3]).rank
        2
        """
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """Always float32: device arrays hold f32.

        >>> dlc.zeros([2]).dtype
        dtype('float32')
        """
        return np.dtype(np.float32)

    @property
    def nbytes(self) -> int:
        """The bytes the values take on the device (4 per element).

        >>> dlc.zeros([2, 3]).nbytes
        24
        """
        return self._nbytes

    @property
    def backend(self) -> str:
        """The backend that holds the values: "gl" or "numpy".

        >>> dlc.zeros([2], backend="numpy").backend
        'numpy'
        """
        return self._device.name

    @property
    def is_disposed(self) -> bool:
        """Whether `dispose()` has freed the storage.

        >>> dlc.zeros([2]).is_disposed
        False
        """
        return self._handle is None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __getitem__(self, key: Any) -> Array:
        """NumPy's basic indexing (`a[0]`, `a[1:3]`, `a[:, 2]`, `a[..., ::2]`, `a[None]`),
        computed on the device: a new Array (dlc/indexing.py)."""
        return getitem(self, key, call, zeros)

    # -- reading -----------------------------------------------------------------------
    def _live_handle(self) -> Any:
        if self._handle is None:
            raise ValueError(
                f"this array {list(self.shape)} was disposed (by dispose() or when its "
                "dlc.tidy scope closed); use dlc.keep or return it from the scope"
            )
        return self._handle

    def numpy(self) -> np.ndarray:
        """The values, as a new float32 np.ndarray; blocks until the GPU has computed them.

        >>> dlc.ones([2]).numpy()
        array([1., 1.], dtype=float32)
        """
        return self._device.download(self._live_handle(), self.shape)

    async def data(self) -> np.ndarray:
        """The values, read without blocking: other coroutines run while the GPU works (and
        at least once, as with the seeds' promise, even when the values are ready).

        >>> values = asyncio.run(a.data())  # or `await a.data()` in a coroutine
        """
        handle = self._live_handle()
        await asyncio.sleep(0)
        return await self._device.read(handle, self.shape)

    def item(self) -> float:
        """The value of a one-element array, as a Python float (ValueError otherwise).

        >>> dlc.array([[3]]).item()
        3.0
        """
        if self.size != 1:
            raise ValueError(f"item() needs an array of one element, this one is {list(self.shape)}")
        return float(self.numpy().reshape(()))

    def get(self, *index: int) -> float:
        """One element (the seeds' NDArray.get); reads the array back.

        >>> dlc.array([[1, 2], [3, 4]]).get(1, 0)
        3.0
        """
        return float(self.numpy()[index] if index else self.item())

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __float__(self) -> float:
        return self.item()

    def tolist(self) -> Any:
        """The values as nested Python lists of floats.

        >>> dlc.array([[1, 2], [3, 4]]).tolist()
        [[1.0, 2.0], [3.0, 4.0]]
        """
        return self.numpy().tolist()

    def __repr__(self) -> str:
        if self._handle is None:
            return f"dlc.Array(<disposed>, shape={list(self.shape)})"
        body = np.array2string(self.numpy(), separator=", ", threshold=20, prefix="dlc.array(")
        return f"dlc.array({body}, backend={self.backend!r})"

    # -- memory ------------------------------------------------------------------------
    def dispose(self) -> None:
        """Free the storage now; using the array afterwards is an error. Idempotent.

        >>> a.dispose()
        """
        handle, self._handle = self._handle, None
        if handle is not None:
            self._device.free(handle)
            _scope.unregister(self, self._nbytes)

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is None:
            return
        self._handle = None
        try:
            self._device.release(handle)
            _scope.unregister(self, self._nbytes)
        except Exception:  # interpreter shutdown: modules may be gone
            pass

    def copy(self) -> Array:
        """A new array with the same values, on the same backend.

        >>> b = a.copy()
        """
        return array(self.numpy(), backend=self.backend)

    # -- operators (through dlc.ops) --------------------------------------------------
    def __add__(self, o):
        return _op("add", self, o)

    def __radd__(self, o):
        return _op("add", o, self)

    def __sub__(self, o):
        return _op("sub", self, o)

    def __rsub__(self, o):
        return _op("sub", o, self)

    def __mul__(self, o):
        return _op("mul", self, o)

    def __rmul__(self, o):
        return _op("mul", o, self)

    def __truediv__(self, o):
        return _op("div", self, o)

    def __rtruediv__(self, o):
        return _op("div", o, self)

    def __matmul__(self, o):
        return _op("matmul", self, o)

    def __rmatmul__(self, o):
        return _op("matmul", o, self)

    def __pow__(self, o):
        return _op("pow", self, o)

    def __rpow__(self, o):
        return _op("pow", o, self)

    def __neg__(self):
        return _op("neg", self)

    def __abs__(self):
        return _op("abs", self)

    def __lt__(self, o):
        return _op("lt", self, o)

    def __le__(self, o):
        return _op("le", self, o)

    def __gt__(self, o):
        return _op("gt", self, o)

    def __ge__(self, o):
        return _op("ge", self, o)

    __hash__ = object.__hash__

    @property
    def T(self) -> Array:
        """The transpose (all axes reversed), as `transpose(a)`.

        >>> dlc.array([[1, 2], [3, 4]]).T.tolist()
        [[1.0, 3.0], [2.0, 4.0]]
        """
        return _op("transpose", self)


def _op(name: str, *args: Any) -> Array:
    return call(name, args, {})


# -- running a language function on arrays ----------------------------------------------


def call(fname: str, args: tuple, kwargs: dict) -> Any:
    """Run language function `fname` eagerly; gives a new Array on the arguments' device."""
    if kwargs or debug._enabled or len(args) > kernels._TENSOR_PREFIX.get(fname, -1):
        return _call(fname, args, kwargs)
    # A repeated call: look up what it was worked out to (`kernels._seen`), and run it.
    sig: list = [fname]
    handles: list = []
    scalars: list[float] = []
    device = None
    for v in args:
        if isinstance(v, Array):
            sig.append(v.shape)
            if v._handle is None or (device is not None and v._device is not device):
                return _call(fname, args, kwargs)  # the full path says what is wrong
            device = v._device
            handles.append(v._handle)
        elif isinstance(v, kernels._NUMBERS) and not isinstance(v, bool):
            sig.append(None)
            scalars.append(kernels._to_float(v))
        else:
            return _call(fname, args, kwargs)
    key = tuple(sig)
    seen = kernels._seen.get(key)
    if seen is None or device is None:
        return _call(fname, args, kwargs, key)
    kernel_key, dims, shape, nbytes = seen
    kernel = kernels._cache.get(kernel_key)
    if kernel is None:  # evicted since
        return _call(fname, args, kwargs, key)
    kernels._cache.move_to_end(kernel_key)
    return Array._wrap(device, device.run(kernels.Call(kernel, tuple(scalars), dims, shape), handles), shape, nbytes)


def _call(fname: str, args: tuple, kwargs: dict, sig: tuple | None = None) -> Any:
    """`call` worked out in full; `sig`: the call's key in `kernels._seen`, when it may be kept."""
    if fname not in FUNCTIONS:
        raise ValueError(f"dlc.ops.call: no function '{fname}'{suggest(fname, FUNCTIONS)}")

    try:
        bound = bind_args(fname, args, dict(kwargs), None)
    except CompileError as e:
        raise CompileError(e.message, _call_site()) from None

    arrays: list[Array] = []
    scalars: list[float] = []
    temporaries: list[Array] = []

    def tensor(v: Any) -> Any:
        # An Array becomes an input of the kernel; a number a uniform input; other
        # array-likes are uploaded for this call.
        if kernels._is_number(v):
            scalars.append(kernels._to_float(v))
            return ("s",)
        if not isinstance(v, Array):
            try:
                host = np.asarray(v, dtype=np.float32)
            except (TypeError, ValueError):
                raise CompileError(
                    f"{fname} expects an array or a number, got {type(v).__name__}", _call_site()
                ) from None
            v = array(host, backend=arrays[0].backend if arrays else None)
            temporaries.append(v)
        arrays.append(v)
        return ("a", v.shape)

    parts: list[Any] = []
    for p, v in bound:
        if p.kind == "tensor":
            parts.append(tensor(v))
        elif p.kind == "tensors":
            parts.append(tuple(tensor(t) for t in v))
        else:
            parts.append(kernels._hashable(v))

    try:
        device = kernels._device_of(arrays, fname)
        flat = None if debug.enabled() else kernels._flat_shape(fname, arrays, bound)
        symbolic: dict[tuple, tuple] = {}  # array shape -> the shape the kernel is built for
        dims: dict[str, int] = {}
        if flat is not None:  # every array argument of one shape: key by the flat layout
            count = math.prod(flat)
            vec4 = count % 4 == 0 and fname in kernels.FLAT_FUNCTIONS  # vec4 lanes need [4, N]
            symbolic = {flat: (4, kernels.FLAT_DIM) if vec4 else (kernels.FLAT_DIM,)}
            dims = {kernels.FLAT_DIM: count // 4 if vec4 else count}
        elif not debug.enabled():
            symbolic, dims = kernels._broadcast_dims(fname, arrays)
        parts = [kernels._rename_shapes(x, symbolic) for x in parts]
        key = (fname, *parts)
        kernel = kernels._cache.get(key)
        loc = None
        if kernel is None:
            loc = _call_site()
            kernel = kernels._build(fname, parts, loc)
            kernels._remember(key, kernel)
        else:
            kernels._cache.move_to_end(key)
        if flat is not None and kernels.FLAT_DIM in kernel.shape:  # the arrays' shape, not [4, N]
            shape = flat
        else:
            shape = dim_algebra.bind(kernel.shape, dims)
        run = kernels.Call(kernel, tuple(scalars), dims, tuple(shape))
        handles = [a._live_handle() for a in arrays]
        if debug.enabled():
            handle = debug.run_eager(device, run, handles, loc or _call_site())
        else:
            handle = device.run(run, handles)
        result = Array(device, handle, run.shape)
        if sig is not None and not temporaries:
            if len(kernels._seen) >= kernels._SEEN_LIMIT:
                kernels._seen.clear()
            kernels._seen[sig] = (key, dims, run.shape, result.nbytes)
        return result
    finally:
        for t in temporaries:
            t.dispose()


def op_function(fname: str):
    """`dlc.ops.<fname>`: a function with the language function's signature and a doc."""
    fn = FUNCTIONS[fname]

    def op(*args: Any, **kwargs: Any):
        return call(fname, args, kwargs)

    params = []
    for p in fn.params:
        default = inspect.Parameter.empty if p.default is REQUIRED else p.default
        params.append(inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    op.__signature__ = inspect.Signature(params)
    op.__name__ = op.__qualname__ = fname
    required = [p.name for p in fn.params if p.default is REQUIRED]
    method = f"{required[0]}.{fname}({', '.join(required[1:])})" if fn.params[0].kind == "tensor" else ""
    op.__doc__ = (
        f"{fname}({', '.join(p.name for p in fn.params)}): the language's `{fname}`, "
        "run eagerly on device arrays; gives a new Array.\n\n"
        f">>> y = dlc.ops.{fname}({', '.join(required)})" + (f"  # or {method}" if method else "")
    )
    return op


def split(x: Any, sizes, axis: int = 0) -> tuple:
    """split(x, sizes, axis): the language's `split`, run eagerly: a tuple of Arrays, one
    `slice` each (the language function checks the arguments first, with its errors).

    >>> head, tail = dlc.ops.split(dlc.zeros([5, 2]), [2, 3])
    """
    shape = tuple(np.shape(x))
    b = GraphBuilder()
    FUNCTIONS["split"].impl(b, _call_site(), b.input("x", shape), tuple(sizes), builtins.int(axis))
    ax = builtins.int(axis) % len(shape)
    parts, offset = [], 0
    for s in sizes:
        begin = [offset if k == ax else 0 for k in range(len(shape))]
        size = [builtins.int(s) if k == ax else -1 for k in range(len(shape))]
        parts.append(call("slice", (x, begin, size), {}))
        offset += builtins.int(s)
    return tuple(parts)


def _install_methods() -> None:
    """Every language function whose first parameter is a tensor becomes a method."""
    for name, fn in FUNCTIONS.items():
        if not fn.params or fn.params[0].kind != "tensor" or hasattr(Array, name):
            continue
        setattr(Array, name, _method(name))


def _method(name: str):
    func = split if name == "split" else op_function(name)  # split: several results, each a slice
    if name == "split":

        def method(self, *args, **kwargs):
            return func(self, *args, **kwargs)
    else:

        def method(self, *args, **kwargs):
            return call(name, (self, *args), kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = func.__doc__
    sig = inspect.signature(func)
    method.__signature__ = sig.replace(
        parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY), *list(sig.parameters.values())[1:]]
    )
    return method


# -- making arrays --------------------------------------------------------------------


def _shape(shape: ShapeLike) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ValueError(f"a shape is a list of non-negative ints, got {list(shape)}")
    return tuple(int(d) for d in shape)


def array(value: Any, backend: str | None = None) -> Array:
    """A device array holding `value` (a number, nested lists, an np.ndarray or an Array),
    as float32, on `backend` ("gl", "numpy"; default: dlc.set_backend's choice).

    >>> dlc.array([[1, 2], [3, 4]]).shape
    (2, 2)
    """
    if isinstance(value, Array):
        value = value.numpy()
    host = np.asarray(value, dtype=np.float32)
    device = get_device(backend)
    return Array(device, device.upload(host), host.shape)


def zeros(shape: ShapeLike, backend: str | None = None) -> Array:
    """A device array of zeros (`backend`: "gl", "numpy", or None: the current one).

    >>> float(dlc.zeros([2, 3]).numpy().sum())
    0.0
    """
    return array(np.zeros(_shape(shape), np.float32), backend)


def ones(shape: ShapeLike, backend: str | None = None) -> Array:
    """A device array of ones (`backend`: "gl", "numpy", or None: the current one).

    >>> float(dlc.ones([2, 3]).numpy().sum())
    6.0
    """
    return array(np.ones(_shape(shape), np.float32), backend)


def full(shape: ShapeLike, value: float, backend: str | None = None) -> Array:
    return array(np.full(_shape(shape), value, np.float32), backend)


_rng = np.random.default_rng()


def seed(value: int) -> None:
    """Seed the generator behind rand / randn (each can also take its own `seed`)."""
    global _rng
    _rng = np.random.default_rng(value)


def _gen(seed_value: int | None) -> np.random.Generator:
    return _rng if seed_value is None else np.random.default_rng(seed_value)


def rand(
    shape: ShapeLike, low: float = 0.0, high: float = 1.0, *, seed: int | None = None, backend: str | None = None
) -> Array:
    """Uniform in [low, high) (the seeds' NDArray.randUniform).

    >>> w = dlc.rand([64, 10], low=-0.1, high=0.1, seed=0)
    """
    return array(_gen(seed).uniform(low, high, _shape(shape)), backend)


def randn(
    shape: ShapeLike, mean: float = 0.0, std: float = 1.0, *, seed: int | None = None, backend: str | None = None
) -> Array:
    """Normal with `mean` and `std` (the seeds' NDArray.randNormal).

    >>> w = dlc.randn([64, 10], std=0.02, seed=0)
    """
    return array(_gen(seed).normal(mean, std, _shape(shape)), backend)


_install_methods()
