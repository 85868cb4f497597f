"""How many compiled programs dlc keeps: the bound of the GL program cache and of the eager
op cache (dlc.ops). Kept apart from runtime/program.py so that reading it imports no OpenGL.

The limit is `DEFAULT_CACHE_LIMIT`, or env `DLC_PROGRAM_CACHE` (an int >= 1), or what
`set_limit` was given last.
"""

from __future__ import annotations

import os
from collections.abc import Callable

DEFAULT_CACHE_LIMIT = 256  # llvmpipe holds ~0.3 MiB of machine code for each linked program
CACHE_ENV = "DLC_PROGRAM_CACHE"

_limit: int | None = None  # None: not read from the environment yet
_on_change: list[Callable[[int], None]] = []


def limit() -> int:
    """The cache bound now."""
    global _limit
    if _limit is None:
        _limit = _from_env()
    return _limit


def set_limit(value: int | None) -> None:
    """Keep at most `value` (an int >= 1) programs; None: back to the default (or the env
    var). The caches shrink to it now."""
    global _limit
    if value is None:
        _limit = _from_env()
    elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"the program cache limit must be an int >= 1, got {value!r}")
    else:
        _limit = value
    for shrink in _on_change:
        shrink(_limit)


def on_change(callback: Callable[[int], None]) -> None:
    """Call `callback(limit)` when the limit is set (caches evict down to it)."""
    _on_change.append(callback)


def _from_env() -> int:
    text = os.environ.get(CACHE_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_LIMIT
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{CACHE_ENV}={text!r}: the program cache limit must be an int >= 1")
    return value
