"""Plain-text tables and summaries for the command line (aligned columns, no colour).

Plain text so the output of `dlc check` reads the same in a terminal, a pipe
and a test.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from .runtime.errors import format_shape


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; trailing spaces stripped."""
    cells = [list(map(str, header)), *[list(map(str, r)) for r in rows]]
    widths = [max(len(r[k]) for r in cells) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def _init(init) -> str:
    if not init:
        return ""
    kind, *args = init
    if kind == "value":
        return f"{args[0]:g}"
    return f"{kind}({', '.join(f'{a:g}' for a in args)})" if args else kind


def model_table(
    inputs: Mapping[str, tuple],
    params: Mapping[str, tuple],
    tensors: Mapping[str, tuple],
    losses: Sequence[str],
    inits: Mapping[str, tuple] | None = None,
    frozen: Collection[str] = (),
    states: Collection[str] = (),
    metrics: Collection[str] = (),
) -> str:
    """One row per name: kind (input, param, frozen (a param never trained), tensor, state
    (model state: not trained, saved with the params), loss, metric), name, shape, size, init."""
    inits = inits or {}
    rows = [("input", n, format_shape(s), "", "") for n, s in inputs.items()]
    rows += [
        ("frozen" if n in frozen else "param", n, format_shape(s), f"{math.prod(s):,}", _init(inits.get(n)))
        for n, s in params.items()
    ]
    kinds = {**{n: "state" for n in states}, **{n: "metric" for n in metrics}, **{n: "loss" for n in losses}}
    rows += [(kinds.get(n, "tensor"), n, format_shape(s), "", "") for n, s in tensors.items()]
    total = sum(math.prod(s) for s in params.values())
    out = table(("kind", "name", "shape", "size", "init"), rows)
    default = f"; default loss '{losses[0]}'" if losses else "; no loss (cannot be trained)"
    return (
        out + f"\n\n{plural(len(inputs), 'input')}, {plural(len(params), 'param')} "
        f"({plural(total, 'value')}), {plural(len(tensors), 'named tensor')}, "
        f"{plural(len(losses), 'loss', 'losses')}{default}"
    )


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def describe_array(name: str, a: np.ndarray, count: int = 6) -> str:
    """One line: a scalar's value, or shape, dtype, range and the first values."""
    a = np.asarray(a)
    show = str if a.dtype.kind in "iu" else (lambda v: f"{float(v):.6g}")  # i32 ids exactly
    if a.ndim == 0:
        return f"{name} = {show(a[()])}"
    flat = a.reshape(-1)
    first = ", ".join(show(v) for v in flat[:count])
    more = ", ..." if flat.size > count else ""
    rng = f"  min {show(flat.min())}  max {show(flat.max())}" if flat.size else ""
    return f"{name}: {format_shape(a.shape)}{rng}  [{first}{more}]"


def layer_of(param: str) -> str:
    """The layer a param belongs to: its dotted path without the last segment (`h.0.attn.w`
    -> `h.0.attn`, the path a `def` call created it under); '(top level)' for a plain name."""
    return param.rsplit(".", 1)[0] if "." in param else "(top level)"


def param_summary(params: Mapping[str, tuple], frozen: Collection[str] = ()) -> str:
    """Keras's model summary for a .dl model: one row per layer (the dotted path of its
    params) with its params' names and shapes and their count, then the totals."""
    layers: dict[str, list[str]] = {}
    for name in params:
        layers.setdefault(layer_of(name), []).append(name)
    rows = []
    for layer, names in layers.items():
        short = [n[len(layer) + 1 :] if layer != "(top level)" else n for n in names]
        listed = ", ".join(f"{s} {format_shape(params[n])}" for s, n in zip(short, names))
        rows.append((layer, listed, f"{sum(math.prod(params[n]) for n in names):,}"))
    total = sum(math.prod(s) for s in params.values())
    fixed = sum(math.prod(params[n]) for n in params if n in frozen)
    return (
        table(("layer", "params", "count"), rows)
        + f"\n\ntotal: {plural(total, 'param')} in {plural(len(layers), 'layer')} "
        f"({total - fixed:,} trainable, {fixed:,} frozen)"
    )
