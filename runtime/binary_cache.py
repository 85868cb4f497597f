"""Linked GL program binaries cached on disk, so a new process skips the GLSL compile.

A binary is keyed by a hash of the shader's code and the driver's vendor, renderer and
version strings (another driver, or another version of it, never sees it). The code is the
source without its `//` comments: a kernel's comments name the model's file and lines, so
moving the model or adding a line to it would otherwise miss every binary of an unchanged
kernel. Files live under
`$DLC_CACHE_DIR`, else `$XDG_CACHE_HOME/dlc`, else `~/.cache/dlc`, in `programs/`;
`DLC_PROGRAM_BINARY_CACHE=0` turns the cache off. The cache dir is untrusted input: a file
is used only when it is a regular file of sane size whose header, length and checksum are
right, and the driver may still refuse it (program.py then compiles from source). Writes
go to a temporary file renamed into place, so a reader never sees half a binary.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import tempfile
from pathlib import Path

_MAGIC = b"DLCPROGBIN1\n"
_HEADER = struct.Struct("<I Q 32s")  # binary format, payload length, sha256 of the payload
_MAX_BYTES = 64 << 20  # no program binary is near this; a bigger file is not ours


def enabled() -> bool:
    return os.environ.get("DLC_PROGRAM_BINARY_CACHE", "1").strip() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """The dlc cache folder (DLC_CACHE_DIR, else XDG_CACHE_HOME/dlc, else ~/.cache/dlc)."""
    explicit = os.environ.get("DLC_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dlc"


_COMMENT = re.compile(r"//[^\n]*")


def code(source: str) -> str:
    """`source` without its `//` comments, which do not change the program. A source with a
    backslash (a line splice can carry a comment onto the next line) or a block comment (a
    `//` inside one is not a comment) is kept whole."""
    if "\\" in source or "/*" in source:
        return source
    return _COMMENT.sub("", source)


def key(source: str, driver: tuple[str, ...]) -> str:
    """The cache key of `source` linked by the driver that `driver` (vendor, renderer,
    version) names: sources differing only in comments share it."""
    h = hashlib.sha256()
    for part in (*driver, code(source)):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def _path(cache_key: str, folder: str) -> Path:
    return cache_dir() / folder / f"{cache_key}.bin"


def load(cache_key: str, folder: str = "programs") -> tuple[int, bytes] | None:
    """(binary format, binary) stored under `cache_key` in `folder` of the cache dir, or None
    when absent or not valid. (compiler/compile_cache.py keeps its files the same way.)"""
    path = _path(cache_key, folder)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_BYTES:
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    head = len(_MAGIC) + _HEADER.size
    if len(data) < head or not data.startswith(_MAGIC):
        return None
    fmt, length, digest = _HEADER.unpack_from(data, len(_MAGIC))
    payload = data[head:]
    if length != len(payload) or length == 0 or hashlib.sha256(payload).digest() != digest:
        return None
    return fmt, payload


def store(cache_key: str, fmt: int, binary: bytes, folder: str = "programs") -> None:
    """Write a binary atomically; a cache that cannot be written is skipped silently (the
    cache is a speed-up, never a reason to fail)."""
    path = _path(cache_key, folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + _HEADER.pack(fmt, len(binary), hashlib.sha256(binary).digest()))
                f.write(binary)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


def forget(cache_key: str, folder: str = "programs") -> None:
    """Remove a binary the driver refused, so later processes do not try it again."""
    try:
        _path(cache_key, folder).unlink()
    except OSError:
        pass
