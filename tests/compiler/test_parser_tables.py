"""The shipped LALR tables (grammar/dl_lalr.py) are current and parse as the grammar does.

The parser loads its tables from grammar/dl_lalr.py instead of analysing dl.lark in every
process; these tests check that file against the grammar, that a parser loaded from it and
one built from the grammar agree on every sample, fixture and seeded mutant (statements,
or the located syntax error), and that tables made from another grammar, or damaged ones,
are never used.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from dl_mutations import mutate

from dlc.compiler import parser
from dlc.grammar import dl_lalr
from dlc.runtime.errors import CompileError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("samples/*.dl"), *ROOT.glob("tests/fixtures/**/*.dl")])


@pytest.fixture(scope="module")
def both() -> dict:
    grammar = parser._grammar()
    loaded = parser._load_tables(parser.tables_key(grammar))
    assert loaded is not None, "the shipped tables were not used: run `python -m dlc.compiler.parser`"
    return {"tables": loaded, "grammar": parser.build_lark(grammar)}


def test_tables_are_current():
    grammar = parser._grammar()
    assert dl_lalr.KEY == parser.tables_key(grammar), (
        "grammar/dl_lalr.py was made from another dl.lark: run `python -m dlc.compiler.parser`"
    )
    # (the text itself differs between runs: lark numbers its states in set order)


def _outcome(monkeypatch, lark, text: str):
    """parse() of `text` with `lark` as the parser: its statements (flattened), or the error
    it raised."""
    monkeypatch.setattr(parser, "_lark", lambda: lark)
    try:
        return _flat(parser.parse(text, "m.dl"))
    except CompileError as e:
        return ("error", e.message, e.line, e.column)


def _flat(x) -> list:
    """An AST as a flat list, walked without recursion (a mutant nests 1000 deep)."""
    out, stack = [], [x]
    while stack:
        x = stack.pop()
        if dataclasses.is_dataclass(x):
            out.append(type(x).__name__)
            stack.extend(reversed([getattr(x, f.name) for f in dataclasses.fields(x)]))
        elif isinstance(x, (list, tuple)):
            out.append(len(x))
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out


# Statements continued inside brackets (the post-lexer drops those newlines), and brackets
# that do not balance.
BRACKETS = [
    "input x: [B,\n 3]\nparam W: [3,\n\n 2]\ny = relu(\n  x @ W\n)\n",
    "const c = [[1, 2],\n           [3, 4]]\ny = c * (c +\n (c - 1))\n",
    "input x: [B]\ny = x)\n",
    "input x: [B]\ny = (x\n",
    "input x: [B\ny = x\n",
    "input x: [B]\ny = clip(x,\n low=0, high=\n 1)\n",
]


def _texts() -> list[str]:
    originals = [p.read_text(encoding="utf-8") for p in SOURCES] + BRACKETS
    rng = random.Random(14)
    mutants = [mutate(rng.choice(originals), rng) for _ in range(300)]
    return originals + mutants


def test_loaded_tables_parse_as_the_grammar(both, monkeypatch):
    texts = _texts()
    assert len(SOURCES) >= 20
    errors = 0
    for text in texts:
        want = _outcome(monkeypatch, both["grammar"], text)
        got = _outcome(monkeypatch, both["tables"], text)
        assert got == want, text
        errors += isinstance(want, tuple)
    assert errors >= 30  # the mutants reach the syntax errors, not only the happy path


def test_tables_of_another_grammar_are_ignored(monkeypatch):
    key = parser.tables_key(parser._grammar())
    monkeypatch.setattr(dl_lalr, "KEY", parser.tables_key(parser._grammar() + "\n// changed\n"))
    assert parser._load_tables(key) is None


def test_damaged_tables_are_ignored(monkeypatch):
    key = parser.tables_key(parser._grammar())
    monkeypatch.setattr(dl_lalr, "DATA", {**dl_lalr.DATA, "parser": {"broken": 1}})
    assert parser._load_tables(key) is None
    monkeypatch.setattr(dl_lalr, "DATA", None)
    assert parser._load_tables(key) is None


def test_without_tables_the_grammar_is_used(monkeypatch):
    """Stale tables cost time, never correctness: _lark() builds from dl.lark instead."""
    monkeypatch.setattr(dl_lalr, "KEY", "stale")
    built = []
    build = parser.build_lark
    monkeypatch.setattr(parser, "build_lark", lambda grammar: built.append(1) or build(grammar))
    parser._lark.cache_clear()
    try:
        parser._lark()
        assert built == [1]
        assert [s.name for s in parser.parse("input x: [2]\ny = x * 2\n")] == ["x", "y"]
        with pytest.raises(CompileError, match="syntax error"):
            parser.parse("y = = 2\n")
    finally:
        parser._lark.cache_clear()


def test_tables_key_depends_on_what_they_are_made_of():
    grammar = parser._grammar()
    assert parser.tables_key(grammar) == parser.tables_key(grammar)
    assert parser.tables_key(grammar) != parser.tables_key(grammar + " ")
