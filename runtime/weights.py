"""Params on disk: .npz only (never pickle), written atomically."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from .errors import DataError


def save_npz(path, arrays: dict[str, np.ndarray]) -> None:
    write_atomic(path, lambda f: np.savez(f, **arrays))


def write_atomic(path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file through `write(f)` into a temp file beside it, then rename: a reader (or
    a run stopped half-way) never sees a half-written file."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; these are ordinary files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_npz(path, shapes: dict | None = None) -> dict[str, np.ndarray]:
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: np.asarray(z[k], dtype=np.float32) for k in z.files}
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (ValueError, OSError) as e:
        raise DataError(f"{path}: not a readable .npz file ({e})") from None
    if shapes is not None:
        missing = [k for k in shapes if k not in out]
        if missing:
            raise DataError(f"{path}: param '{missing[0]}' is missing")
    return out


def checked_params(values, shapes) -> dict[str, np.ndarray]:
    """`values` as float32 arrays, refused (DataError) unless each names a param, has its
    shape and is finite. Checked whole before anything is set, so a bad file changes nothing."""
    out = {}
    for name, v in values.items():
        if name not in shapes:
            raise DataError(f"'{name}' is not a param of the model "
                            f"(params: {', '.join(shapes) or 'none'})")
        v = np.asarray(v, dtype=np.float32)
        if v.shape != tuple(shapes[name]):
            raise DataError(f"param '{name}' has shape {list(v.shape)} but the model "
                            f"expects {list(shapes[name])}")
        if not np.all(np.isfinite(v)):
            raise DataError(f"param '{name}' holds NaN or infinite values")
        out[name] = v
    return out
