"""Shape arithmetic on symbolic dims at import.

Exporters compute shapes at run time: `Shape(x) -> Gather -> Unsqueeze -> Concat ->
Reshape`, `Div(Shape, heads)`, `Expand(x, Where(Equal(shape, -1), 1, shape))`. With a
symbolic batch those shapes hold `B` (or `B*T`), so the reference evaluator cannot fold
them. Here such a shape is a "shape constant": an object array of ints and `Dim`s (a
product of symbolic names times an int), folded node by node like any constant, and
written into the .dl as a dim product (`reshape(x, [B*T, 64])`). A shape constant whose
elements are all ints again becomes an ordinary int64 constant.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dim:
    """coef * the product of names (a name may repeat)."""

    coef: int
    names: tuple[str, ...]

    @staticmethod
    def parse(d) -> int | Dim:
        """A .dl dim (an int, `B`, `B*T`, `4*B`) as an int or a Dim."""
        if isinstance(d, (int, np.integer)):
            return int(d)
        coef, names = 1, []
        for part in str(d).split("*"):
            part = part.strip()
            if part.lstrip("-").isdigit():
                coef *= int(part)
            else:
                names.append(part)
        return Dim(coef, tuple(sorted(names))) if names else coef

    def __str__(self) -> str:
        return "*".join(([str(self.coef)] if self.coef != 1 else []) + list(self.names))


def norm(d):
    """A Dim with no names left is its int."""
    if isinstance(d, Dim) and not d.names:
        return d.coef
    return int(d) if isinstance(d, (int, np.integer, bool, np.bool_)) else d


def mul(a, b):
    a, b = norm(a), norm(b)
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    da = a if isinstance(a, Dim) else Dim(a, ())
    db = b if isinstance(b, Dim) else Dim(b, ())
    return norm(Dim(da.coef * db.coef, tuple(sorted(da.names + db.names))))


def div(a, b):
    """a / b when it divides exactly; None otherwise."""
    a, b = norm(a), norm(b)
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    da = a if isinstance(a, Dim) else Dim(a, ())
    db = b if isinstance(b, Dim) else Dim(b, ())
    left = Counter(da.names)
    left.subtract(db.names)
    if any(n < 0 for n in left.values()) or not db.coef or da.coef % db.coef:
        return None
    return norm(Dim(da.coef // db.coef, tuple(sorted(left.elements()))))


def product(dims):
    out = 1
    for d in dims:
        out = mul(out, d)
    return out


def is_symbolic(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == object and any(isinstance(norm(x), Dim) for x in a.reshape(-1))


def shape_array(dims) -> np.ndarray:
    """A shape (ints and .dl dim strings) as a shape constant (or int64 if all known)."""
    parsed = [Dim.parse(d) for d in dims]
    return settle(np.array(parsed + [None], dtype=object)[:-1])


def settle(a: np.ndarray) -> np.ndarray:
    """An object array with no symbolic element left as int64."""
    a = np.asarray(a, dtype=object)
    flat = [norm(x) for x in a.reshape(-1)]
    if all(isinstance(x, int) for x in flat):
        return np.array(flat, dtype=np.int64).reshape(a.shape)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(a.shape)


def dl_dim(d) -> int | str:
    d = norm(d)
    return d if isinstance(d, int) else str(d)


def dl_shape(a) -> tuple:
    return tuple(dl_dim(d) for d in np.asarray(a, dtype=object).reshape(-1))


def same(a, b) -> bool:
    return norm(a) == norm(b)


def reshape_target(c, x_shape, target, allowzero: bool) -> tuple:
    """ONNX Reshape's output shape (dl dims) from x's shape and a target that may hold
    0 (copy x's dim, unless allowzero) and one -1 (what is left)."""
    dims = [norm(t) for t in np.asarray(target, dtype=object).reshape(-1)]
    out, unknown = [], None
    for k, t in enumerate(dims):
        if isinstance(t, int) and t == 0 and not allowzero:
            if k >= len(x_shape):
                raise c.fail(f"Reshape target {list(map(dl_dim, dims))} copies dim {k} of a rank-{len(x_shape)} tensor")
            t = Dim.parse(x_shape[k])
        elif isinstance(t, int) and t == -1:
            if unknown is not None:
                raise c.fail("Reshape target has more than one -1")
            unknown = k
        elif isinstance(t, int) and t <= 0:
            raise c.fail(f"Reshape target dim {t} is not supported (dlc tensors are never empty)")
        out.append(t)
    total = product(Dim.parse(d) for d in x_shape)
    if unknown is not None:
        known = product(d for k, d in enumerate(out) if k != unknown)
        rest = div(total, known)
        if rest is None:
            raise c.fail(
                f"Reshape of {list(x_shape)} to {list(map(dl_dim, out))}: the -1 is not a whole product of dims"
            )
        out[unknown] = rest
    elif not same(product(out), total):  # an exporter that baked a symbolic dim into a constant
        raise c.fail(
            f"Reshape of {fmt(x_shape)} ({dl_dim(total)} elements) to {fmt(out)} ({dl_dim(product(out))}): "
            "a dim the model computes is a constant in the file (the exporter traced it); import with that dim fixed",
            list_ops=False,
        )
    return tuple(dl_dim(d) for d in out)


def fmt(shape) -> str:
    return "[" + ", ".join(str(dl_dim(Dim.parse(d) if isinstance(d, str) else d)) for d in shape) + "]"


def broadcast(c, *shapes, strict: bool = True) -> tuple | None:
    """NumPy's broadcast of dl shapes (symbolic dims must match or meet a 1); not strict:
    None where two differently named dims meet (ONNX's inferred shape is used then)."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = {dl_dim(Dim.parse(s[k - rank + len(s)])) for s in shapes if k - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            if not strict:
                return None
            raise c.fail(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


# -- folding nodes over shape constants ----------------------------------------------------


def _ints(v, what, c):
    if v is None:
        return None
    if is_symbolic(v):
        raise c.fail(f"{what} must be known ints at import, got {list(map(dl_dim, v.reshape(-1)))}")
    return [int(x) for x in np.asarray(v).reshape(-1)]


def arith(c, op, a, b):
    def one(x, y):
        x, y = norm(x), norm(y)
        if op == "Mul":
            return mul(x, y)
        if op == "Div" and isinstance(x, int) and isinstance(y, int) and y:
            return abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)  # ONNX's: toward zero
        if op == "Div":
            q = div(x, y)
            if q is None:
                raise c.fail(f"cannot divide the dim {dl_dim(x)} by {dl_dim(y)} exactly at import")
            return q
        if isinstance(x, int) and isinstance(y, int):
            return {"Add": x + y, "Sub": x - y, "Max": max(x, y), "Min": min(x, y)}[op]
        if op in ("Add", "Sub") and y == 0:
            return x
        if op == "Add" and x == 0:
            return y
        if x == y and op in ("Max", "Min"):
            return x
        if op in ("Max", "Min") and (isinstance(x, int) and x <= 1 or isinstance(y, int) and y <= 1):
            num, sym = (x, y) if isinstance(x, int) else (y, x)  # a dim is >= 1
            return sym if op == "Max" else num
        raise c.fail(f"{op} of the dims {dl_dim(x)} and {dl_dim(y)} cannot be computed at import")

    return settle(np.frompyfunc(one, 2, 1)(np.asarray(a, dtype=object), np.asarray(b, dtype=object)))


def _compare(c, op, a, b):
    def one(x, y):
        x, y = norm(x), norm(y)
        if isinstance(x, int) and isinstance(y, int):
            return {"Equal": x == y, "Less": x < y, "Greater": x > y}[op]
        if x == y:
            return op == "Equal"
        sym, num = (x, y) if isinstance(x, Dim) else (y, x)
        if isinstance(num, int) and num <= 0 and isinstance(sym, Dim):  # a dim is >= 1
            return {"Equal": False, "Less": sym is y, "Greater": sym is x}[op]
        raise c.fail(f"{op} of the dims {dl_dim(x)} and {dl_dim(y)} is unknown at import")

    return np.frompyfunc(one, 2, 1)(np.asarray(a, dtype=object), np.asarray(b, dtype=object)).astype(bool)


def fold(c, node, ins, attrs) -> list[np.ndarray] | None:
    """The outputs of a node whose inputs are constants, one a shape constant; None if the
    op is not shape arithmetic (the caller then refuses)."""
    op = node.op_type
    vals = [None if v is None else v.const for v in ins]
    x = vals[0]
    if op in ("Identity", "Cast"):
        to = attrs.get("to")
        if op == "Cast" and to in (1, 10, 11, 16):  # a symbolic dim as a float: computed at run time
            return None
        return [x]
    if op in ("Mul", "Div", "Add", "Sub", "Max", "Min"):
        return [arith(c, op, vals[0], vals[1])]
    if op in ("Equal", "Less", "Greater"):
        return [_compare(c, op, vals[0], vals[1])]
    if op == "Where":
        cond = np.asarray(vals[0]).astype(bool)
        a, b = np.asarray(vals[1], dtype=object), np.asarray(vals[2], dtype=object)
        return [settle(np.where(cond, a, b))]
    if op == "Gather":
        idx = np.asarray(vals[1]).astype(np.int64)
        axis = attrs.get("axis", 0)
        n = x.shape[axis]
        return [settle(np.take(x, np.where(idx < 0, idx + n, idx), axis=axis))]
    if op == "Unsqueeze":
        axes = _ints(vals[1], "Unsqueeze's axes", c) if len(vals) > 1 else list(attrs["axes"])
        out = x
        for a in sorted(a % (x.ndim + len(axes)) for a in axes):
            out = np.expand_dims(out, a)
        return [settle(out)]
    if op == "Squeeze":
        axes = _ints(vals[1], "Squeeze's axes", c) if len(vals) > 1 and vals[1] is not None else attrs.get("axes")
        if axes is None:
            axes = [k for k, d in enumerate(x.shape) if d == 1]
        return [settle(np.squeeze(x, axis=tuple(a % x.ndim for a in axes)))]
    if op == "Reshape":
        target = _ints(vals[1], "Reshape's shape (of a shape)", c)
        return [settle(np.reshape(x, [x.shape[k] if t == 0 else t for k, t in enumerate(target)]))]
    if op == "Concat":
        return [settle(np.concatenate([np.asarray(v, dtype=object) for v in vals if v is not None], attrs["axis"]))]
    if op == "Slice":
        starts, ends = _ints(vals[1], "Slice's starts", c), _ints(vals[2], "Slice's ends", c)
        axes = _ints(vals[3], "Slice's axes", c) if len(vals) > 3 and vals[3] is not None else list(range(len(starts)))
        steps = _ints(vals[4], "Slice's steps", c) if len(vals) > 4 and vals[4] is not None else [1] * len(starts)
        index = [slice(None)] * x.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            index[a % x.ndim] = slice(s, e, st)
        return [settle(x[tuple(index)])]
    if op in ("Shape",):
        return [np.array(x.shape, np.int64)]
    if op == "Size":
        return [np.array(math.prod(x.shape), np.int64)]
    return None
