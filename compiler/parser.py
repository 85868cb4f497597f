"""Parse .dl text with lark into a small AST whose nodes know their position.

Syntax errors become CompileError at the offending token, saying what was
expected in words ("expected a name", ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from lark import Lark, Token, UnexpectedCharacters, UnexpectedInput, UnexpectedToken, v_args
from lark.exceptions import UnexpectedEOF, VisitError
from lark.visitors import Transformer_NonRecursive

from dlc.runtime.errors import CompileError, Loc

# -- AST -------------------------------------------------------------------------


@dataclass(frozen=True)
class Expr:
    loc: Loc


@dataclass(frozen=True)
class Num(Expr):
    value: float
    text: str


@dataclass(frozen=True)
class Name(Expr):
    name: str


@dataclass(frozen=True)
class Str(Expr):
    value: str


@dataclass(frozen=True)
class ListExpr(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Call(Expr):
    func: str
    args: tuple[Expr, ...]
    kwargs: tuple[tuple[str, Expr, Loc], ...]


@dataclass(frozen=True)
class BinOp(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr


@dataclass(frozen=True)
class Stmt:
    kind: str  # input param const loss assign
    name: str
    loc: Loc
    shape: tuple[tuple[Any, Loc], ...] | None = None  # (int or symbolic name, where)
    value: Expr | None = None


# -- lark ------------------------------------------------------------------------

F32_MAX = 3.4028234663852886e38
BRACKETS_OPEN = {"LPAR", "LSQB"}
BRACKETS_CLOSE = {"RPAR", "RSQB"}


class _BracketNewlines:
    """Post-lexer: a newline inside ( ) or [ ] does not end the statement."""

    always_accept = ("_NL",)

    def process(self, stream):
        depth = 0
        for tok in stream:
            if tok.type in BRACKETS_OPEN:
                depth += 1
            elif tok.type in BRACKETS_CLOSE:
                depth = max(depth - 1, 0)
            elif tok.type == "_NL" and depth:
                continue
            yield tok


@cache
def _lark() -> Lark:
    text = resources.files("dlc.grammar").joinpath("dl.lark").read_text()
    return Lark(
        text,
        parser="lalr",
        lexer="contextual",
        postlex=_BracketNewlines(),
        propagate_positions=True,
        maybe_placeholders=True,
    )


class _ToAst(Transformer_NonRecursive):  # a 1000-term sum is a tree 1000 deep
    def __init__(self, file: str, lines: list[str]):
        super().__init__()
        self.file, self.lines = file, lines

    def _loc(self, x) -> Loc:
        line, col = (x.line, x.column) if isinstance(x, Token) else (x.meta.line, x.meta.column)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return Loc(self.file, line, col, text)

    def _tree_loc(self, meta) -> Loc:
        text = self.lines[meta.line - 1] if 0 < meta.line <= len(self.lines) else ""
        return Loc(self.file, meta.line, meta.column, text)

    # statements
    def start(self, items):
        return [s for s in items if isinstance(s, Stmt)]

    def shape(self, items):
        dims = [d for d in items[1:] if d is not None]
        return tuple((int(d) if d.type == "INT" else str(d), self._loc(d)) for d in dims)

    def input_stmt(self, items):
        name, shape = items
        return Stmt("input", str(name), self._loc(name), shape)

    def param_stmt(self, items):
        name, shape, init = items
        return Stmt("param", str(name), self._loc(name), shape, init)

    def const_stmt(self, items):
        name, shape, value = items
        return Stmt("const", str(name), self._loc(name), shape, value)

    def loss_stmt(self, items):
        name, value = items
        return Stmt("loss", str(name), self._loc(name), None, value)

    def assign_stmt(self, items):
        name, value = items
        return Stmt("assign", str(name), self._loc(name), None, value)

    # expressions
    def number(self, items):
        (t,) = items
        value = float(t)
        if abs(value) > F32_MAX:
            raise CompileError(f"number {t} is beyond float32's range (about 3.4e38)", self._loc(t))
        return Num(self._loc(t), value, str(t))

    def name(self, items):
        (t,) = items
        return Name(self._loc(t), str(t))

    def string(self, items):
        (t,) = items
        return Str(self._loc(t), str(t)[1:-1])

    @v_args(meta=True)
    def list(self, meta, items):
        return ListExpr(self._tree_loc(meta), tuple(i for i in items if i is not None))

    def call(self, items):
        fname, *args = items
        pos, kws = [], []
        for a in args:
            if a is None:
                continue
            if isinstance(a, tuple):
                kws.append(a)
            else:
                pos.append(a)
        return Call(self._loc(fname), str(fname), tuple(pos), tuple(kws))

    def kwarg(self, items):
        key, value = items
        return (str(key), value, self._loc(key))

    def binop(self, items):
        left, op, right = items
        return BinOp(self._loc(op), str(op), left, right)

    compare = binop

    def negate(self, items):
        tok, operand = items
        return Neg(self._loc(tok), operand)


_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "INT": "an integer",
    "STRING": "a string",
    "_NL": "end of line",
    "$END": "end of file",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "COLON": "':'",
    "EQUAL": "'='",
    "ADD_OP": "an operator",
    "MUL_OP": "an operator",
    "POW_OP": "'^'",
    "CMP_OP": "a comparison",
    "NEG": "'-'",
    "DTYPE": "'f32'",
    "INPUT": "'input'",
    "PARAM": "'param'",
    "CONST": "'const'",
    "LOSS": "'loss'",
    "EXPR": "an expression",
}


def _expected(names) -> str:
    names = set(names)
    if {"NAME", "NUMBER", "LPAR"} <= names:  # the start of any expression
        names = (names - {"NAME", "NUMBER", "LPAR", "LSQB", "NEG", "STRING"}) | {"EXPR"}
    words = sorted({_WORDS.get(n, n.lower()) for n in names})
    if "an operator" in words and len(words) > 4:
        words = [w for w in words if w not in ("an operator", "a comparison", "'^'")]
        words.append("an operator")
    if len(words) > 6:
        return ""
    return "expected " + (" or ".join(words) if len(words) <= 2 else ", ".join(words[:-1]) + " or " + words[-1])


def source_lines(text: str) -> list[str]:
    """The lines of `text` as lark numbers them: only "\n" ends a line (a form feed, a lone
    "\r" or U+2028 does not), so an error's line number and echoed text agree."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def parse(text: str, file: str = "<model>") -> list[Stmt]:
    if text.startswith("\ufeff"):  # a UTF-8 byte order mark, as some editors write
        text = text[1:]
    lines = source_lines(text)
    try:
        tree = _lark().parse(text if text.endswith("\n") else text + "\n")
    except UnexpectedInput as e:
        raise _syntax_error(e, file, lines) from None
    try:
        return _ToAst(file, lines).transform(tree)
    except VisitError as e:  # errors raised inside the transformer come wrapped
        raise e.orig_exc from None


def _syntax_error(e: UnexpectedInput, file: str, lines: list[str]) -> CompileError:
    line = getattr(e, "line", None) or len(lines) or 1
    col = getattr(e, "column", None) or 1
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        line = max(len(lines), 1)
        col = len(lines[line - 1]) + 1 if lines else 1
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    loc = Loc(file, line, col, text)
    if isinstance(e, UnexpectedCharacters):
        ch = text[col - 1] if col - 1 < len(text) else "?"
        shown = f"'{ch}'" if ch.isprintable() else f"U+{ord(ch):04X}"
        return CompileError(f"syntax error: unexpected character {shown}", loc)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        what = "end of line" if tok.type == "_NL" else "end of file" if tok.type == "$END" else f"'{tok}'"
        exp = _expected(
            set(getattr(e, "accepts", None) or e.expected) - {"_NL"}
            if tok.type != "_NL"
            else getattr(e, "accepts", None) or e.expected
        )
        return CompileError(f"syntax error: unexpected {what}" + (f", {exp}" if exp else ""), loc)
    return CompileError("syntax error: unexpected end of input", loc)
