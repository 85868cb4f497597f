"""Scopes for device arrays: the seeds' `math.scope` / `dl.tidy`, `keep` and live counts.

    with dlc.tidy() as scope:          # a context manager ...
        y = scope.returns(f(x))        # ... y survives and moves to the enclosing scope
    @dlc.tidy                          # ... or a decorator (async functions too): what the
    def step(x): return (x * 2).relu() # function returns survives, in the enclosing scope

Every array made while a scope is open is tracked by the innermost one and disposed when it
closes, unless it is returned (it then belongs to the enclosing scope, or to nobody at the
top) or passed to `dlc.keep` (it is then never disposed automatically). Arrays made outside
any scope belong to nobody: `dispose()` frees them, and so does Python's garbage collector.

The scope stack lives in a context variable, so each asyncio task and thread has its own.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_stack: contextvars.ContextVar[tuple[Scope, ...]] = contextvars.ContextVar("dlc_scopes", default=())

# Live arrays: counted here (not by walking objects) so `memory()` is cheap.
_live_arrays = 0
_live_bytes = 0


class Tracked:
    """What a scope tracks: a device array (`dlc.arrays.Array` derives from it). It has
    `_scope` (the scope tracking it, or None) and `dispose()`."""

    __slots__ = ()


class Scope:
    """One level of tracking. Use through `dlc.tidy()`; see the module doc."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._tracked: dict[int, weakref.ref] = {}
        self._returned: dict[int, Any] = {}
        self._token: contextvars.Token | None = None

    # -- tracking ------------------------------------------------------------------
    def track(self, array: Any) -> Any:
        """Dispose `array` when this scope closes (done for every array made inside it)."""
        self._tracked[id(array)] = weakref.ref(array)
        array._scope = self
        return array

    def untrack(self, array: Any) -> None:
        self._tracked.pop(id(array), None)
        if array._scope is self:
            array._scope = None

    def returns(self, *arrays: Any) -> Any:
        """Let `arrays` (or nested lists/tuples/dicts of them) outlive this scope, as a value
        returned from a tidy function does; gives back its argument (one, or a tuple)."""
        for a in _arrays_in(arrays):
            self._returned[id(a)] = a
        return arrays[0] if len(arrays) == 1 else arrays

    # -- context manager -----------------------------------------------------------
    def __enter__(self) -> Scope:
        if self._token is not None:
            raise RuntimeError("a dlc scope cannot be entered twice; make a new one with dlc.tidy()")
        self._token = _stack.set((*_stack.get(), self))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(keep_returned=exc_type is None)

    def close(self, keep_returned: bool = True) -> None:
        """Dispose what this scope tracks but not what it returns; pop it off the stack."""
        assert self._token is not None, "closing a scope that was never entered"
        _stack.reset(self._token)
        parent = current()
        survivors = self._returned if keep_returned else {}
        for key, ref in list(self._tracked.items()):
            array = ref()
            if array is None:
                continue
            if key in survivors:
                array._scope = None
                if parent is not None:
                    parent.track(array)
            else:
                array.dispose()
        self._tracked.clear()
        self._returned.clear()

    # -- decorator -----------------------------------------------------------------
    def __call__(self, fn: F) -> F:
        """`@dlc.tidy()` decorates like `@dlc.tidy`: a fresh scope for every call."""
        return _wrap(fn, self.name)

    def __repr__(self) -> str:
        return f"Scope({self.name or ''!s}, tracking {len(self._tracked)} arrays)"


def _wrap(fn: F, name: str | None) -> F:
    if inspect.iscoroutinefunction(fn):  # the scope spans the awaits of one call

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            with Scope(name or getattr(fn, "__name__", None)) as scope:
                result = await fn(*args, **kwargs)
                scope.returns(result)
                return result

        return run_async  # type: ignore[return-value]

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with Scope(name or getattr(fn, "__name__", None)) as scope:
            result = fn(*args, **kwargs)
            scope.returns(result)
            return result

    return run  # type: ignore[return-value]


def tidy(fn: F | str | None = None) -> Any:
    """`with dlc.tidy():`, `@dlc.tidy` or `@dlc.tidy()`: dispose every array made inside
    but the returned ones and those passed to `dlc.keep`. A string names the scope.

    >>> with dlc.tidy():
    ...     y = dlc.keep((x @ w).relu())  # the product is freed at the end, y is not
    """
    if fn is None or isinstance(fn, str):
        return Scope(fn)
    if callable(fn):
        return _wrap(fn, None)
    raise TypeError(f"dlc.tidy takes a function, a name or nothing, not {type(fn).__name__}")


def keep(array: Any) -> Any:
    """Never dispose `array` automatically (it is then yours to `dispose()`); returns it.
    Nested lists/tuples/dicts of arrays are kept whole.

    >>> w = dlc.keep(dlc.randn([3, 3]))
    """
    for a in _arrays_in((array,)):
        if a._scope is not None:
            a._scope.untrack(a)
    return array


def current() -> Scope | None:
    """The innermost open scope, or None."""
    stack = _stack.get()
    return stack[-1] if stack else None


def register(array: Any, nbytes: int) -> None:
    """Called by every new array: count it and let the innermost scope track it."""
    global _live_arrays, _live_bytes
    _live_arrays += 1
    _live_bytes += nbytes
    scope = current()
    if scope is not None:
        scope.track(array)


def live() -> tuple[int, int]:
    """(arrays, bytes) live now."""
    return _live_arrays, _live_bytes


def unregister(array: Any, nbytes: int) -> None:
    """Called once when an array's storage is freed (dispose or garbage collection)."""
    global _live_arrays, _live_bytes
    _live_arrays -= 1
    _live_bytes -= nbytes
    scope = array._scope
    if scope is not None:
        scope.untrack(array)


def _arrays_in(value: Any) -> Iterator[Tracked]:
    """The arrays inside `value`: an array, or lists/tuples/dicts (nested) of them."""
    if isinstance(value, Tracked):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _arrays_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _arrays_in(v)
