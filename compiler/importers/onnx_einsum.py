"""ONNX's Einsum as transposes, reshapes and one matmul (the forms exporters write:
`bhqd,bhkd->bhqk`, `bij,bjk->bik`, `i,j->ij`, `...id,...jd->...ij`).

Two operands: each letter is a batch letter (in both operands and the output), a
contracted one (in both, not in the output), or kept from one side. Letters in one operand
only and not in the output are summed first. Each operand is transposed to [batch, kept,
contracted] (the right one to [batch, contracted, kept]), its groups reshaped to one dim
each, multiplied, and the result unfolded and transposed to the output's order. One
operand: a sum over the letters the output lacks, then a transpose. A letter repeated in
one operand (a diagonal) is refused.
"""

from __future__ import annotations

import string

from . import sym_shapes as sym
from .onnx_converter import fmt_list, fmt_shape
from .onnx_ops import _one_out, _out_shape, handler


def _parse(c, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise c.fail(f"Einsum equation '{equation}' has {len(terms)} operands, the node {len(ranks)}")
    # `...` becomes capital letters the equation does not use (the broadcast batch dims)
    free = [ch for ch in string.ascii_uppercase if ch not in eq]
    width = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t] or [0])
    dots = "".join(free[:width])
    terms = [t.replace("...", dots[width - (r - len(t.replace("...", ""))) :]) for t, r in zip(terms, ranks)]
    if not arrow:  # implicit output: the letters seen once, in order
        letters = "".join(terms)
        out = dots + "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1 and ch not in dots))
    out = out.replace("...", dots)
    for t, r in zip(terms, ranks):
        if len(t) != r or len(set(t)) != len(t):
            raise c.fail(f"Einsum term '{t}' of '{equation}' is not supported (a repeated letter, or rank {r})")
    return terms, out


def _dims(term: str, shape) -> dict:
    return dict(zip(term, shape))


def _sum_out(c, x: str, term: str, keep: set[str]) -> tuple[str, str]:
    axes = [k for k, ch in enumerate(term) if ch not in keep]
    if not axes:
        return x, term
    return f"sum({x}, axis={fmt_list(axes)})", "".join(ch for ch in term if ch in keep)


def _permute(x: str, term: str, order: str) -> str:
    if term == order:
        return x
    return f"transpose({x}, perm={fmt_list([term.index(ch) for ch in order])})"


def _group(dims: dict, letters: str):
    return sym.dl_dim(sym.product(sym.Dim.parse(dims[ch]) for ch in letters))


@handler("Einsum")
def _einsum(c, node, ins, attrs):
    eq = attrs["equation"]
    eq = eq.decode() if isinstance(eq, bytes) else eq
    terms, out_term = _parse(c, eq, [v.rank for v in ins])
    out = _one_out(c, node)
    dims = {}
    for t, v in zip(terms, ins):
        for ch, d in _dims(t, v.shape).items():
            if dims.get(ch, 1) == 1:
                dims[ch] = d
    shape = tuple(dims[ch] for ch in out_term)
    if len(ins) == 1:
        x, t = _sum_out(c, c.data(ins[0]), terms[0], set(out_term))
        c.emit(out, _permute(x, t, out_term), _out_shape(c, out, shape))
        return
    if len(ins) != 2:
        raise c.fail(f"Einsum of {len(ins)} operands is not supported (one or two)")
    (ta, tb), (a, b) = terms, ins
    xa, ta = _sum_out(c, c.data(a), ta, set(tb) | set(out_term))
    xb, tb = _sum_out(c, c.data(b), tb, set(ta) | set(out_term))
    batch = "".join(ch for ch in out_term if ch in ta and ch in tb)
    contract = "".join(ch for ch in ta if ch in tb and ch not in out_term)
    left = "".join(ch for ch in ta if ch not in tb)
    right = "".join(ch for ch in tb if ch not in ta)
    da, db = _dims(ta, a.shape), _dims(tb, b.shape)
    # matmul broadcasts the batch dims (a 1 on one side), so each side keeps its own
    ga = [*(da[ch] for ch in batch), _group(da, left), _group(da, contract)]
    gb = [*(db[ch] for ch in batch), _group(db, contract), _group(db, right)]
    ma = f"reshape({_permute(xa, ta, batch + left + contract)}, {fmt_shape(ga)})"
    mb = f"reshape({_permute(xb, tb, batch + contract + right)}, {fmt_shape(gb)})"
    prod = c.temp(out + "_mm", f"matmul({ma}, {mb})")
    full = [dims[ch] for ch in batch + left + right]
    expr = _permute(f"reshape({prod}, {fmt_shape(full)})", batch + left + right, out_term)
    c.emit(out, expr, _out_shape(c, out, shape))
