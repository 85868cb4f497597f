"""Element types: `f32` (the default) and `i32` (integer ids, stored exactly).

A leaf's element type is its `dtype` attr (an `input` declared `i32[...]`); every other node's
follows from its inputs by its registry entry's `dtype` rule, so a pass that rebuilds nodes
cannot lose it. A rule returns the node's element type or raises `ElementTypeError` (the
builder locates it). The default rule (`floats`) takes f32 operands only: exp, matmul, the
reductions ... refuse an i32 operand rather than compute on ids. i32 tensors carry no gradient.

On GL an i32 element lives in a 32-bit slot as its own bits (`intBitsToFloat`): kernels only
move those bits, and convert where an op reads an integer (codegen/glsl.py, `Emitter`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .shapes import ShapeError

F32, I32 = "f32", "i32"
DTYPES = (F32, I32)
# The lowering key of an elementwise op's GLSL over i32 operands as ints (all operands i32).
INT_LOWERING = "glsl-i32"


class ElementTypeError(ShapeError):
    """An operand of the wrong element type (the builder adds the source position)."""


def _refuse(op: str, ins: Sequence[str], allowed: tuple[int, ...] = ()) -> None:
    for k, t in enumerate(ins):
        if t != F32 and k not in allowed:
            raise ElementTypeError(
                f"{op} needs f32 operands, but operand {k + 1} is {t} (convert it with float(x))"
                if len(ins) > 1
                else f"{op} needs an f32 operand, got {t} (convert it with float(x))"
            )


def floats(op: str):
    """The default rule: every operand f32, an f32 result."""

    def rule(ins: Sequence[str], attrs) -> str:
        _refuse(op, ins)
        return F32

    return rule


def any_to_f32(op: str):
    """Comparisons, logic, one_hot: operands of either type (an i32 one is compared as f32)."""
    return lambda ins, attrs: F32


def floats_except(*positions: int):
    """Operands at `positions` may be either type (where's condition, take's rows), the rest
    f32; the result is the first f32-only operand's type."""

    def make(op: str):
        def rule(ins: Sequence[str], attrs) -> str:
            _refuse(op, ins, positions)
            return F32

        return rule

    return make


def take_rule(op: str):
    """take(x, rows): the rows of x (of either type) at indices of either type."""
    return lambda ins, attrs: ins[0]


def same_as_input(op: str):
    """Layout ops that move elements: the result has its input's type (all inputs alike)."""

    def rule(ins: Sequence[str], attrs) -> str:
        if len(set(ins)) > 1:
            raise ElementTypeError(f"{op} takes operands of one element type, got {' and '.join(ins)}")
        return ins[0]

    return rule


def integer_at(*positions: int, result: str | None = None):
    """Operands at `positions` must be i32 (indices, labels), the rest f32; the result is
    `result`, or the first operand's type (gather's table)."""

    def make(op: str):
        def rule(ins: Sequence[str], attrs) -> str:
            for k in positions:
                if ins[k] != I32:
                    raise ElementTypeError(f"{op}'s operand {k + 1} holds indices: it must be i32, got {ins[k]}")
            others = [t for k, t in enumerate(ins) if k not in positions]
            if result is not None:
                _refuse(op, ins, positions)
            return result or (others[0] if others else F32)

        return rule

    return make
