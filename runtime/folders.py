"""Folders written whole or not at all: artifacts and web exports.

A folder is filled beside its destination and moved into place only when everything was
written, so a failed compile or export never leaves half a folder; it replaces an earlier one
of its kind (a folder holding manifest.json) and refuses any other folder with files in it.
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def replaced_folder(out: pathlib.Path, what: str, error: type[Exception] = FileExistsError) -> Iterator[pathlib.Path]:
    """An empty folder beside `out` to fill in the block; when the block ends without an
    error it replaces `out`, else it is removed and `out` is left as it was. `what` names the
    folder's kind in the `error` raised for a destination that is not one."""
    _check(out, what, error)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            _check(out, what, error)  # again: something may have been written there meanwhile
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check(out: pathlib.Path, what: str, error: type[Exception]) -> None:
    if out.exists() and not out.is_dir():
        raise error(f"{out} is a file, not a folder to write {what} into")
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise error(f"{out} exists and is not {what}; not replacing it")
