"""Reading `.npz` files as untrusted input: data files and weight files; and writing them
(`write_npz`: np.savez takes its arrays as keywords, so an array named `file` or
`allow_pickle`, a param's name as good as any, made it fail).

np.load trusts what it reads: a header claiming 10^12 elements allocates them
(MemoryError), random bytes are taken for a pickle (and answered with advice to
load them unsafely), a truncated zip raises zipfile's own errors. Here every
member's header is read first and its shape checked against the bytes the
archive can hold, object arrays are refused without unpickling anything, and
every failure is a DataError naming the file (and the array).
"""

from __future__ import annotations

import io
import math
import os
import zipfile

import numpy as np
import numpy.lib.format as npy

from .errors import DataError

# Deflate cannot expand data more than about 1032 times; a member claiming more is lying.
MAX_DEFLATE_RATIO = 1032


class NpzReader:
    """The arrays of an .npz, read one at a time: `files`, `reader[name]`, a context manager
    (np.load's NpzFile interface, so callers can swap one for the other)."""

    def __init__(self, path: str | os.PathLike, data: bytes | None = None):
        """`data`: the file's bytes, already read (the artifact reader confines and bounds
        its reads); else the file at `path` is opened. `path` names it in messages."""
        self.path = os.fspath(path)
        if data is not None:
            size, magic = len(data), data[:4]
        else:
            try:
                size = os.path.getsize(self.path)
                with open(self.path, "rb") as f:
                    magic = f.read(4)
            except FileNotFoundError:
                raise DataError(f"{self.path}: no such file") from None
            except OSError as e:
                raise DataError(f"{self.path}: cannot read the file ({e.strerror or e})") from None
        if magic[:2] != b"PK":
            what = "empty" if not magic else "not a zip archive"
            raise DataError(
                f"{self.path}: not a readable .npz file ({what}; an .npz is a zip "
                "of .npy arrays, as numpy.savez writes)"
            )
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data) if data is not None else self.path)
            infos = self._zip.infolist()
        except Exception as e:  # BadZipFile, NotImplementedError (an unknown zip version), ...
            raise DataError(
                f"{self.path}: not a readable .npz file (a damaged or truncated zip archive: {e})"
            ) from None
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            if info.is_dir():
                continue
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if key in self._members:
                self.close()
                raise DataError(f"{self.path}: array '{key}' appears twice in the archive")
            self._members[key] = info
        self._file_size = size
        self.files = list(self._members)

    def __enter__(self) -> NpzReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "_zip", None) is not None:
            self._zip.close()
            self._zip = None

    def header(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        """Array `key`'s shape and dtype from its .npy header, checked against the bytes its
        member can hold (nothing allocated)."""
        info = self._members[key]
        where = f"{self.path}: array '{key}'"
        try:
            with self._zip.open(info) as f:
                return self._check_header(f, info, where)
        except DataError:
            raise
        except Exception as e:  # zipfile and zlib fail in their own words
            raise DataError(
                f"{where} cannot be read: the file is damaged or truncated ({type(e).__name__}: {e})"
            ) from None

    def __getitem__(self, key: str) -> np.ndarray:
        where = f"{self.path}: array '{key}'"
        _, dtype = self.header(key)
        if dtype.hasobject:
            raise DataError(f"{where} holds Python objects, which would need pickle: dlc never loads pickled data")
        try:
            with self._zip.open(self._members[key]) as f:
                return npy.read_array(f, allow_pickle=False)
        except MemoryError:
            raise DataError(f"{where} is too large to load into memory") from None
        except Exception as e:  # zipfile, zlib and numpy each fail in their own words
            raise DataError(
                f"{where} cannot be read: the file is damaged or truncated ({type(e).__name__}: {e})"
            ) from None

    def _check_header(self, f, info: zipfile.ZipInfo, where: str) -> tuple[tuple[int, ...], np.dtype]:
        """Shape and dtype, refusing shapes the member's bytes cannot hold, before allocating."""
        try:
            version = npy.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = npy.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = npy.read_array_header_2_0(f)
            else:
                shape, _, dtype = npy._read_array_header(f, version)  # 3.0: no public reader
        except ValueError as e:
            raise DataError(f"{where} is not a valid .npy array ({e})") from None
        if any(not isinstance(d, int) or d < 0 for d in shape):
            raise DataError(f"{where} has an invalid shape {shape}")
        need = math.prod(shape) * dtype.itemsize
        # What the member can hold: its declared size, bounded by what its compressed bytes
        # (which must lie inside the file) can expand to.
        stored = min(info.compress_size, self._file_size)
        ratio = 1 if info.compress_type == zipfile.ZIP_STORED else MAX_DEFLATE_RATIO
        holds = min(info.file_size, stored * ratio) - f.tell()
        if need > holds:
            raise DataError(
                f"{where} claims shape {list(shape)} of {dtype} ({need:,} bytes) "
                f"but the file holds at most {max(holds, 0):,} bytes for it: the file "
                "is damaged or truncated"
            )
        return tuple(shape), dtype


def write_npz(file, arrays: dict[str, np.ndarray]) -> None:
    """`arrays` into an uncompressed .npz at `file` (a path or a binary file), one `NAME.npy`
    member each, as np.savez writes them, under any names; never a pickle."""
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                npy.write_array(member, np.asanyarray(value), allow_pickle=False)
