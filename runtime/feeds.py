"""Checking fed arrays against a model's input shapes and binding symbolic dims.

Shared by every backend and by the artifact runtime, so it imports neither
the compiler nor lark. Shapes are tuples of ints and symbolic names.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping

import numpy as np

from . import dims as dim_algebra
from .elements import to_int32
from .errors import DataError, did_you_mean, format_shape


def bind_dims(
    inputs: Mapping[str, tuple], feeds: Mapping[str, np.ndarray], needed: set[str] | None = None, source: str = ""
) -> dict[str, int]:
    """Check each fed input against its declared shape; return symbolic dim -> size.

    `needed` limits which inputs must be present (those the fetches depend on).
    """
    where = f" in {source}" if source else ""
    unknown = [k for k in feeds if k not in inputs]
    if unknown:
        raise DataError(f"'{unknown[0]}'{where} is not an input of the model (inputs: {', '.join(inputs) or 'none'})")
    dims: dict[str, int] = {}
    first: dict[str, str] = {}
    for name in needed if needed is not None else inputs:
        if name not in feeds:
            raise DataError(f"input '{name}' is missing{where}")
    for name, value in feeds.items():
        want = tuple(inputs[name])
        got = np.shape(value)
        if len(got) != len(want):
            raise DataError(
                f"input '{name}'{where} has shape {format_shape(got)} but the model expects "
                f"{format_shape(want)}: rank {len(got)} != {len(want)}"
            )
        for d, g in zip(want, got):
            if isinstance(d, str) and not dim_algebra.is_symbol(d):
                continue  # a product (`B*T`): checked below, once its symbols are bound
            if isinstance(d, str):
                if d in dims and dims[d] != g:
                    raise DataError(
                        f"input '{name}'{where} has shape {format_shape(got)} but the model expects "
                        f"{format_shape(want)}: {d} = {g} here but {dims[d]} from input '{first[d]}'"
                    )
                dims.setdefault(d, g)
                first.setdefault(d, name)
            elif d != g:
                raise DataError(
                    f"input '{name}'{where} has shape {format_shape(got)} but the model "
                    f"expects {format_shape(want)}: {g} != {d}"
                )
    for name, value in feeds.items():
        want, got = tuple(inputs[name]), np.shape(value)
        for d, g in zip(want, got):
            if isinstance(d, str) and not dim_algebra.is_symbol(d) and dim_algebra.value(d, dims) != g:
                raise DataError(
                    f"input '{name}'{where} has shape {format_shape(got)} but the model expects "
                    f"{format_shape(want)}: {d} = {dim_algebra.value(d, dims)} from the other dims, not {g}"
                )
    for d, g in dims.items():
        if g == 0:
            raise DataError(f"input '{first[d]}'{where} binds {d} = 0: no examples")
    return dims


def prepare(
    inputs: Mapping[str, tuple],
    feeds: Mapping[str, np.ndarray] | None,
    needed: set[str] | None = None,
    dtypes: Mapping[str, str] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Feeds as float32 arrays (int32 for an input `dtypes` names i32), checked against
    `inputs`, and the symbolic dims they bind.

    Arrays that feed no input are ignored, with a one-line notice."""
    feeds = feeds or {}
    ignored = ignore_unknown(inputs, feeds, needed)
    check_missing(inputs, feeds, needed, ignored)
    arrays = {k: as_element_type(k, v, (dtypes or {}).get(k)) for k, v in feeds.items() if k not in ignored}
    return arrays, bind_dims(inputs, arrays, needed=needed)


def as_element_type(name: str, value, dtype: str | None, source: str = "") -> np.ndarray:
    """Input `name`'s array as its element type: int32 (checked) for i32, else float32."""
    if dtype == "i32":
        where = f" in {source}" if source else ""
        return to_int32(value, f"input '{name}'{where}")
    return np.asarray(value, dtype=np.float32)


_noticed: set[tuple] = set()  # notices already given: a training loop calling eval says it once


def ignore_unknown(
    inputs: Mapping[str, tuple], names, needed: set[str] | None = None, source: str = "", what: str = "array"
) -> list[str]:
    """The `names` that feed no input of the model. Says once, on stderr, that they are
    ignored, suggesting an input that one of them looks like a misspelling of."""
    unknown = [k for k in names if k not in inputs]
    if unknown:
        key = (tuple(inputs), tuple(unknown), source)
        if key not in _noticed:
            _noticed.add(key)

            absent = [n for n in inputs if n not in names and (needed is None or n in needed)]
            hints = "".join(did_you_mean(k, absent) and f" ('{k}'{did_you_mean(k, absent)})" for k in unknown)
            where = f" in {source}" if source else ""
            plural = "s" if len(unknown) > 1 else ""
            print(
                f"dlc: note: ignoring {what}{plural} {', '.join(repr(k) for k in unknown)}{where}: "
                f"not input{plural} of the model (inputs: {', '.join(inputs) or 'none'})"
                f"{hints}",
                file=sys.stderr,
            )
    return unknown


def check_missing(
    inputs: Mapping[str, tuple], present, needed: set[str] | None, ignored: list[str], source: str = ""
) -> None:
    """Refuse a needed input that is absent, suggesting an ignored name close to it."""
    where = f" in {source}" if source else ""
    for name in needed if needed is not None else inputs:
        if name in inputs and name not in present:
            raise DataError(f"input '{name}' is missing{where}{_suggest(name, ignored)}")


def _suggest(name: str, ignored: list[str]) -> str:
    """ " (the data has 'pixel': a misspelling of it?)" for an ignored name close to `name`."""

    close = difflib.get_close_matches(name, ignored, n=1, cutoff=0.6)
    return f" (the data has '{close[0]}': a misspelling of it?)" if close else ""
