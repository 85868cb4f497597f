"""Element types at the runtime's edge: checking integer feeds, and the 32-bit storage.

An i32 tensor lives in GL storage (a float buffer or an R32F texture) as its own 32 bits:
`storage_floats` views an int32 array as float32 for upload, `from_storage` views what comes
back as int32. Kernels move those bits and convert only where an op reads an integer
(compiler/codegen/glsl.py), so ids up to 2^31 - 1 stay exact. Imports neither the compiler
nor GL.
"""

from __future__ import annotations

import numpy as np

from .errors import DataError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def storage_floats(array) -> np.ndarray:
    """`array` as contiguous float32 for GL storage: an int32 array by its bits, any other by
    value (float feeds may be int arrays; an i32 input reaches here already int32)."""
    a = np.asarray(array)
    if a.dtype == np.int32:
        return np.ascontiguousarray(a).view(np.float32)
    return np.ascontiguousarray(a, dtype=np.float32)


def from_storage(floats: np.ndarray, dtype: str) -> np.ndarray:
    """What GL storage gave back, as the tensor's element type ("f32" or "i32")."""
    return np.asarray(floats, dtype=np.float32).view(np.int32) if dtype == "i32" else floats


def to_int32(value, what: str) -> np.ndarray:
    """`value` as an int32 array for an i32 input: any integer dtype in range, or floats that
    are whole numbers in range. Otherwise a DataError naming `what` and the first bad row."""
    a = np.asarray(value)
    if a.dtype == np.int32:
        return a
    if a.dtype == np.bool_:
        return a.astype(np.int32)
    if a.dtype.kind in "iu":
        bad = (a < INT32_MIN) | (a > INT32_MAX)
        if bad.any():
            raise DataError(f"{what} holds {_first(a, bad)}, out of the int32 range (an i32 input)")
        return a.astype(np.int32)
    if a.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(a) & (np.trunc(a) == a)
        if not whole.all():
            raise DataError(f"{what} holds {_first(a, ~whole)}, not an integer (an i32 input)")
        bad = (a < INT32_MIN) | (a > INT32_MAX)
        if bad.any():
            raise DataError(f"{what} holds {_first(a, bad)}, out of the int32 range (an i32 input)")
        return a.astype(np.int32)
    raise DataError(f"{what} holds {a.dtype} values, not integers (an i32 input)")


def _first(a: np.ndarray, bad: np.ndarray) -> str:
    """The first bad value and where: "3.5 at row 2" (row = the first axis)."""
    at = tuple(int(k) for k in np.argwhere(bad)[0])
    where = f" at row {at[0]}" if at else ""
    if len(at) > 1:
        where += f" (position {list(at)})"
    return f"{a[at].item()!r}"[:40] + where
