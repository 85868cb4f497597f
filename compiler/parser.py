"""Parse .dl text with lark into a small AST whose nodes know their position.

Syntax errors become CompileError at the offending token, saying what was
expected in words ("expected a name", ...).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import lark
from lark import Lark, Token, UnexpectedCharacters, UnexpectedInput, UnexpectedToken, v_args
from lark.exceptions import UnexpectedEOF, VisitError
from lark.visitors import Transformer_NonRecursive

from dlc.runtime.errors import CompileError, Loc
from dlc.runtime.optional import available
from dlc.runtime.sizes import MAX_NAME
from dlc.runtime.source_text import decode_source, read_source  # noqa: F401  (the parser's API too)

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
    scope: tuple[str, Loc] | None = None  # `f(x) as NAME`: a def call's param path


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
    kind: str  # input param const state update loss metric assign unpack def for return
    name: str
    loc: Loc
    shape: tuple[tuple[Any, Loc], ...] | None = None  # (int or symbolic name, where)
    value: Expr | None = None
    frozen: bool = False  # `frozen param`
    names: tuple[tuple[str, Loc], ...] = ()  # unpack's targets, a def's arguments
    values: tuple[Expr, ...] = ()  # return's expressions
    body: tuple[Stmt, ...] = ()  # a def's or a for loop's statements
    dtype: tuple[str, Loc] | None = None  # the element type written before the shape (f32, i32)


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


# The parser's options. The LALR analysis of the grammar under them costs ~70 ms a process, so
# its result ships as data in grammar/dl_lalr.py (`python -m dlc.compiler.parser` rewrites it),
# used while the grammar, these options and lark's version are those it was made from.
_OPTIONS = {"parser": "lalr", "lexer": "contextual", "propagate_positions": True, "maybe_placeholders": True}
TABLES_FILE = "dl_lalr.py"  # in the dlc.grammar package


def _grammar() -> str:
    return resources.files("dlc.grammar").joinpath("dl.lark").read_text(encoding="utf-8")


def tables_key(grammar: str) -> str:
    """What the parser tables are made from: the grammar, the options and lark's version."""
    made_of = json.dumps([grammar, _OPTIONS, lark.__version__], sort_keys=True)
    return hashlib.sha256(made_of.encode("utf-8")).hexdigest()


@cache
def _lark() -> Lark:
    grammar = _grammar()
    loaded = _load_tables(tables_key(grammar))
    return loaded if loaded is not None else build_lark(grammar)


def build_lark(grammar: str) -> Lark:
    """The parser made from the grammar's text (the LALR analysis run now)."""
    return Lark(grammar, postlex=_BracketNewlines(), **_OPTIONS)


def _load_tables(key: str) -> Lark | None:
    """The parser from the shipped tables, or None when they are missing, were made from
    another grammar, options or lark, or lark cannot load them (its loader is not public API)."""
    dl_lalr = available("dlc.grammar.dl_lalr")
    if dl_lalr is None:
        return None
    if getattr(dl_lalr, "KEY", None) != key:
        return None
    try:
        return Lark._load_from_dict(
            dl_lalr.DATA, dl_lalr.MEMO, postlex=_BracketNewlines(), propagate_positions=_OPTIONS["propagate_positions"]
        )
    except Exception:
        return None


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

    def _name(self, t: Token) -> str:
        """A name token's text, refused at its place when longer than an artifact holds."""
        if len(t) > MAX_NAME:
            raise CompileError(
                f"the name '{t[:24]}...' is {len(t)} characters long; at most {MAX_NAME} are allowed", self._loc(t)
            )
        return str(t)

    # statements
    def start(self, items):
        return [s for s in items if isinstance(s, Stmt)]

    def shape(self, items):
        dims = [d for d in items[1:] if d is not None]
        dtype = (str(items[0]), self._loc(items[0])) if items[0] is not None else None
        return dtype, tuple(d if isinstance(d, tuple) else (self._dim_factor(d), self._loc(d)) for d in dims)

    def _dim_factor(self, t: Token):
        return int(t) if t.type == "INT" else self._name(t)

    def dim_product(self, items):
        # A product of dims (`H*D`, `B*T`): ("*", factors) and the position of its first factor.
        left, op, right = items
        if str(op) != "*":
            msg = f"a dim is a name, an integer or a product of them: '{op}' is not allowed"
            raise CompileError(msg, self._loc(op))
        if isinstance(left, tuple):  # a product already: (("*", factors), loc)
            (_, factors), loc = left
        else:
            factors, loc = (self._dim_factor(left),), self._loc(left)
        return (("*", (*factors, self._dim_factor(right))), loc)

    def input_stmt(self, items):
        name, (dtype, shape) = items
        return Stmt("input", self._name(name), self._loc(name), shape, dtype=dtype)

    def param_stmt(self, items):
        name, (dtype, shape), init = items
        return Stmt("param", self._name(name), self._loc(name), shape, init, dtype=dtype)

    def const_stmt(self, items):
        name, typed, value = items
        dtype, shape = typed if typed is not None else (None, None)
        return Stmt("const", self._name(name), self._loc(name), shape, value, dtype=dtype)

    def frozen_param_stmt(self, items):
        name, (dtype, shape), init = items
        return Stmt("param", str(name), self._loc(name), shape, init, frozen=True, dtype=dtype)

    def state_stmt(self, items):
        name, (dtype, shape), init = items
        return Stmt("state", self._name(name), self._loc(name), shape, init, dtype=dtype)

    def update_stmt(self, items):
        name, value = items
        return Stmt("update", self._name(name), self._loc(name), None, value)

    def unpack_stmt(self, items):
        *names, value = items
        return Stmt("unpack", str(names[0]), self._loc(names[0]), None, value, names=self._names(names))

    def def_stmt(self, items):
        name, *args, body = items
        return Stmt("def", str(name), self._loc(name), names=self._names(args), body=body)

    def for_stmt(self, items):
        var, iterable, body = items
        return Stmt("for", str(var), self._loc(var), None, iterable, body=body)

    @v_args(meta=True)
    def return_stmt(self, meta, items):
        return Stmt("return", "return", self._tree_loc(meta), values=tuple(items))

    def block(self, items):
        return tuple(s for s in items if isinstance(s, Stmt))

    def _names(self, tokens) -> tuple[tuple[str, Loc], ...]:
        return tuple((str(t), self._loc(t)) for t in tokens if t is not None)

    def loss_stmt(self, items):
        name, value = items
        return Stmt("loss", self._name(name), self._loc(name), None, value)

    def metric_stmt(self, items):
        name, value = items
        return Stmt("metric", self._name(name), self._loc(name), None, value)

    def assign_stmt(self, items):
        name, value = items
        return Stmt("assign", self._name(name), self._loc(name), None, value)

    # expressions
    def number(self, items):
        (t,) = items
        value = float(t)
        if abs(value) > F32_MAX:
            raise CompileError(f"number {t} is beyond float32's range (about 3.4e38)", self._loc(t))
        return Num(self._loc(t), value, str(t))

    def name(self, items):
        (t,) = items
        return Name(self._loc(t), self._name(t))

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

    def scoped_call(self, items):
        *call, scope = items
        plain = self.call(call)
        return Call(plain.loc, plain.func, plain.args, plain.kwargs, (str(scope), self._loc(scope)))

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
    "DTYPE": "an element type",
    "INPUT": "'input'",
    "PARAM": "'param'",
    "CONST": "'const'",
    "LOSS": "'loss'",
    "METRIC": "'metric'",
    "FROZEN": "'frozen'",
    "STATE": "'state'",
    "UPDATE": "'update'",
    "DEF": "'def'",
    "FOR": "'for'",
    "IN": "'in'",
    "AS": "'as'",
    "RETURN": "'return'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
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


if __name__ == "__main__":  # `python -m dlc.compiler.parser`: rewrite the tables
    from .parser_tables import main

    main()
