"""Seeded mutations of .dl sources, for the front end's fuzz test.

Each mutation is a small, plausible edit a careless (or hostile) author could
make: a token deleted, duplicated or swapped, a number made huge, negative or
NaN, a name changed, an odd character inserted, the text truncated, a line
duplicated or dropped, an expression nested deeply. The same seed gives the
same mutants.
"""

from __future__ import annotations

import random
import re

TOKEN = re.compile(
    r"""\s+|#[^\n]*|[A-Za-z_][A-Za-z_0-9]*|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?
                      |==|!=|<=|>=|"[^"\n]*"|'[^'\n]*'|.""",
    re.X | re.S,
)

NUMBERS = [
    "0",
    "-0",
    "1e309",
    "-1e309",
    "3.5e38",
    "1e-50",
    "99999999999999999999",
    "-1",
    "-7",
    "nan",
    "inf",
    "0.0",
    "1e38",
    "2147483648",
    "4294967297",
    "65536",
    "1.5",
    ".5",
    "5.",
    "1e",
    "0x10",
    "1_000",
]
NAMES = [
    "x",
    "y",
    "B",
    "W1",
    "nan",
    "inf",
    "true",
    "false",
    "all",
    "none",
    "input",
    "param",
    "const",
    "loss",
    "f32",
    "sum",
    "mean",
    "reshape",
    "matmul",
    "softmax",
    "exp",
    "where",
    "conv2d",
    "one_hot",
    "argmax",
    "clip",
    "transpose",
    "slice",
    "concat",
    "zeros",
    "glorot",
    "normal",
    "uniform",
    "he",
    "_",
    "a" * 300,
    "é",
    "B2",
]
ODD = [
    "\x00",
    "\ufeff",
    "\u2028",
    "\u2029",
    "\x0c",
    "\x0b",
    "\r",
    "\r\n",
    "\t",
    "$",
    "@",
    "é",
    "(",
    ")",
    "[",
    "]",
    ",",
    "=",
    ":",
    "^",
    "#",
    '"',
    "'",
    "\\",
    "-",
    "*",
    "/",
    "\n",
    " ",
    "\x85",
    "\U0001f600",
    "[B]",
    "()",
    "[]",
    "f32",
]
OPERATORS = ["+", "-", "*", "/", "@", "^", "==", "<", ">=", "!="]


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def _is_number(t: str) -> bool:
    return bool(t) and (t[0].isdigit() or (t[0] == "." and len(t) > 1))


def _is_name(t: str) -> bool:
    return bool(t) and (t[0].isalpha() or t[0] == "_")


def mutate(text: str, rng: random.Random) -> str:
    """One mutant of `text`: one to three random edits."""
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        text = rng.choice(EDITS)(text, rng)
    return text


def _token_edit(text: str, rng: random.Random, pick, change) -> str:
    toks = tokens(text)
    where = [i for i, t in enumerate(toks) if pick(t)]
    if not where:
        return text
    i = rng.choice(where)
    toks[i : i + 1] = change(toks, i)
    return "".join(toks)


def delete_token(text, rng):
    return _token_edit(text, rng, lambda t: not t.isspace(), lambda toks, i: [])


def duplicate_token(text, rng):
    return _token_edit(text, rng, lambda t: not t.isspace(), lambda toks, i: [toks[i], " ", toks[i]])


def swap_tokens(text, rng):
    toks = tokens(text)
    solid = [i for i, t in enumerate(toks) if not t.isspace()]
    if len(solid) < 2:
        return text
    k = rng.randrange(len(solid) - 1)
    a, b = solid[k], solid[k + 1] if rng.random() < 0.7 else rng.choice(solid)
    toks[a], toks[b] = toks[b], toks[a]
    return "".join(toks)


def change_number(text, rng):
    return _token_edit(text, rng, _is_number, lambda toks, i: [rng.choice(NUMBERS)])


def change_name(text, rng):
    def change(toks, i):
        others = [t for t in toks if _is_name(t)]
        return [rng.choice(NAMES + others)]

    return _token_edit(text, rng, _is_name, change)


def change_operator(text, rng):
    return _token_edit(
        text, rng, lambda t: t in OPERATORS or t in ",:=()[]", lambda toks, i: [rng.choice(OPERATORS + list(",:=()[]"))]
    )


def insert_odd(text, rng):
    i = rng.randrange(len(text) + 1)
    return text[:i] + rng.choice(ODD) + text[i:]


def truncate(text, rng):
    return text[: rng.randrange(len(text) + 1)]


def duplicate_line(text, rng):
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])
    return "\n".join(lines)


def delete_line(text, rng):
    lines = text.split("\n")
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def swap_lines(text, rng):
    lines = text.split("\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def nest_deeply(text, rng):
    """Wrap a name in hundreds of calls, parens, minus signs or list brackets."""
    depth = rng.choice((50, 300, 1200))
    wrap = rng.choice((("exp(", ")"), ("(", ")"), ("-", ""), ("[", "]"), ("abs(", ")")))
    return _token_edit(text, rng, _is_name, lambda toks, i: [wrap[0] * depth, toks[i], wrap[1] * depth])


def long_sum(text, rng):
    """Turn a name into a flat sum of hundreds of terms."""
    n = rng.choice((10, 400, 1000))
    return _token_edit(text, rng, _is_name, lambda toks, i: [" + ".join([toks[i]] * n)])


EDITS = [
    delete_token,
    duplicate_token,
    swap_tokens,
    change_number,
    change_number,
    change_name,
    change_name,
    change_operator,
    insert_odd,
    insert_odd,
    truncate,
    duplicate_line,
    delete_line,
    swap_lines,
    nest_deeply,
    long_sum,
]
