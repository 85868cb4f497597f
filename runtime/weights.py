"""Params on disk: .npz only (never pickle), written atomically."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from .errors import DataError, DlcError
from .npzfile import NpzReader, write_npz
from .saved_names import by_param_name

# A checkpoint (runtime/checkpoint.py) is an .npz whose params are `param/NAME` beside `meta`:
# load_npz reads its params as it reads a weights file's.
META = "meta"
PARAM = "param/"


class SaveFailed(DlcError):
    """Nothing could be written: not the file asked for, nor any fallback."""


def save_npz(path, arrays: dict[str, np.ndarray]) -> None:
    write_atomic(path, lambda f: write_npz(f, arrays))


def fallback_paths(path) -> list[str]:
    """Where a file that cannot be written at `path` goes instead: the working folder, then
    the temp folder, under a name that replaces nothing of anyone's (`W.rescued-PID.npz`)."""
    stem, ext = os.path.splitext(os.path.basename(os.fspath(path)))
    name = f"{stem}.rescued-{os.getpid()}{ext}"
    folders = []
    for folder in (os.getcwd, tempfile.gettempdir):
        try:
            folders.append(folder())
        except OSError:  # a working folder since removed; no temp folder takes a file (a full disk)
            pass
    out: list[str] = []
    for folder in folders:
        candidate = os.path.join(folder, name)
        if candidate not in out and os.path.abspath(candidate) != os.path.abspath(path):
            out.append(candidate)
    return out


def save_or_rescue(path, arrays: dict[str, np.ndarray], what: str) -> tuple[str, str | None]:
    """Save `arrays` to `path` (atomically); when that fails (a read-only folder, a full disk,
    the file-size limit), to the first fallback that takes them. Returns (the path written,
    why `path` could not be: None when it was). SaveFailed, naming every path tried and
    `what` was lost, when none could be written."""
    path = os.fspath(path)
    tried: list[tuple[str, OSError]] = []
    for target in [path, *fallback_paths(path)]:
        try:
            save_npz(target, arrays)
        except OSError as e:
            tried.append((target, e))
            continue
        return target, (_reason(tried[0][1]) if tried else None)
    shown = "; ".join(f"{p} ({_reason(e)})" for p, e in tried)
    remedies = dict.fromkeys(_REMEDY.get(e.errno, "fix that") for _, e in tried)
    raise SaveFailed(f"cannot save {what}: every place tried failed: {shown}; {' or '.join(remedies)}")


_REMEDY = {
    errno.ENOSPC: "free space on the disk",
    errno.EDQUOT: "free space within your disk quota",
    errno.EFBIG: "raise the file-size limit (ulimit -f)",
    errno.EACCES: "make the folder writable",
    errno.EPERM: "make the folder writable",
    errno.EROFS: "save to a writable file system",
}


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def write_atomic(path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file through `write(f)` into a temp file beside it, then rename: a reader (or
    a run stopped half-way) never sees a half-written file.

    The data is fsynced before the rename and the folder after it, so a crash leaves the
    old file or the new one, whole. The temp file is removed on every exit path (an
    exception, KeyboardInterrupt); one left by a killed process (kill -9) is named after
    its pid and removed by the next write to the same path."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    _remove_stale_temps(folder, os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(os.path.basename(path), os.getpid()), suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; these are ordinary files
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def _temp_prefix(name: str, pid: int) -> str:
    return f".{name}.{pid}."


def _remove_stale_temps(folder: str, name: str) -> None:
    """Remove temp files of `name` whose writer process is gone."""
    head = f".{name}."
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        if not (entry.startswith(head) and entry.endswith(".tmp")):
            continue
        pid = entry[len(head) :].split(".", 1)[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, entry))


def _process_alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # Windows' os.kill would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # someone else's process, or no way to tell: leave its file alone
    return True


def _fsync_folder(folder: str) -> None:
    """Make the rename durable. Not every system can open or fsync a folder (Windows, some
    network file systems); there the rename is as durable as the system makes it."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_npz(path, shapes: dict | None = None) -> dict[str, np.ndarray]:
    """Params from an .npz (or a checkpoint), read defensively; with `shapes`, checked against the model's
    params. Every refusal is a DataError that names the file."""
    path = os.fspath(path)
    with NpzReader(path) as z:
        # A checkpoint's params are its `param/NAME` arrays (the rest is the run's state).
        checkpoint = META in z.files and any(k.startswith(PARAM) for k in z.files)
        out = {}
        for k in z.files:
            if checkpoint and not k.startswith(PARAM):
                continue
            a = z[k]
            if a.dtype.kind not in "biuf":
                raise DataError(f"{path}: array '{k}' holds {a.dtype} values, not numbers")
            with np.errstate(over="ignore"):
                out[k[len(PARAM) :] if checkpoint else k] = np.asarray(a, dtype=np.float32)
    if shapes is not None:
        out = by_param_name(out, shapes)
        missing = [k for k in shapes if k not in out]
        if missing:
            raise DataError(f"{path}: param '{missing[0]}' is missing")
        try:
            checked_params(out, shapes)
        except DataError as e:
            raise DataError(f"{path}: {e}") from None
    return out


def checked_params(values, shapes) -> dict[str, np.ndarray]:
    """`values` as float32 arrays, refused (DataError) unless each names a param, has its
    shape and is finite. Checked whole before anything is set, so a bad file changes nothing.
    A key that is an imported param's ONNX name (`0.weight`) sets that param (saved_names)."""
    out = {}
    for name, v in by_param_name(values, shapes).items():
        if name not in shapes:
            raise DataError(f"'{name}' is not a param of the model (params: {', '.join(shapes) or 'none'})")
        v = np.asarray(v, dtype=np.float32)
        if v.shape != tuple(shapes[name]):
            raise DataError(f"param '{name}' has shape {list(v.shape)} but the model expects {list(shapes[name])}")
        if not np.all(np.isfinite(v)):
            raise DataError(f"param '{name}' holds NaN or infinite values")
        out[name] = v
    return out
