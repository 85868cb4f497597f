"""Checking fed arrays against a model's input shapes and binding symbolic dims.

Shared by every backend and by the artifact runtime, so it imports neither
the compiler nor lark. Shapes are tuples of ints and symbolic names.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import DataError, format_shape


def bind_dims(inputs: Mapping[str, tuple], feeds: Mapping[str, np.ndarray],
              needed: set[str] | None = None, source: str = "") -> dict[str, int]:
    """Check each fed input against its declared shape; return symbolic dim -> size.

    `needed` limits which inputs must be present (those the fetches depend on).
    """
    where = f" in {source}" if source else ""
    unknown = [k for k in feeds if k not in inputs]
    if unknown:
        raise DataError(f"'{unknown[0]}'{where} is not an input of the model "
                        f"(inputs: {', '.join(inputs) or 'none'})")
    dims: dict[str, int] = {}
    first: dict[str, str] = {}
    for name in needed if needed is not None else inputs:
        if name not in feeds:
            raise DataError(f"input '{name}' is missing{where}")
    for name, value in feeds.items():
        want = tuple(inputs[name])
        got = np.shape(value)
        if len(got) != len(want):
            raise DataError(f"input '{name}'{where} has shape {format_shape(got)} but the model expects "
                            f"{format_shape(want)}: rank {len(got)} != {len(want)}")
        for d, g in zip(want, got):
            if isinstance(d, str):
                if d in dims and dims[d] != g:
                    raise DataError(
                        f"input '{name}'{where} has shape {format_shape(got)} but the model expects "
                        f"{format_shape(want)}: {d} = {g} here but {dims[d]} from input '{first[d]}'")
                dims.setdefault(d, g)
                first.setdefault(d, name)
            elif d != g:
                raise DataError(f"input '{name}'{where} has shape {format_shape(got)} but the model "
                                f"expects {format_shape(want)}: {g} != {d}")
    for d, g in dims.items():
        if g == 0:
            raise DataError(f"input '{first[d]}'{where} binds {d} = 0: no examples")
    return dims


def prepare(inputs: Mapping[str, tuple], feeds: Mapping[str, np.ndarray] | None,
            needed: set[str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Feeds as float32 arrays, checked against `inputs`, and the symbolic dims they bind."""
    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in (feeds or {}).items()}
    return arrays, bind_dims(inputs, arrays, needed=needed)
