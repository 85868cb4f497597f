"""Mutation fuzz of the front end: thousands of seeded mutants of the samples compile or fail
with a located dlc.CompileError, never another exception (compile only: parse, build, shape
checks; no GL)."""

from __future__ import annotations

import random
import traceback
from pathlib import Path

import pytest
from dl_mutations import EDITS, mutate, tokens

import dlc

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted(ROOT.glob("samples/*.dl")) + [ROOT / "tests/fixtures/fuzz/every_feature.dl"]
MUTANTS_PER_SEED = 500


def sources() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in CORPUS]


def outcome(src: str) -> str:
    """ "ok", "error" (a located CompileError), or a description of what went wrong."""
    try:
        dlc.compile(src, name="mutant.dl")
    except dlc.CompileError as e:
        if e.loc is None or not (1 <= e.line <= src.count("\n") + 1) or e.column < 1:
            return f"CompileError without a valid location: {e.format()}"
        return "error"
    except BaseException as e:  # noqa: BLE001 - anything else is the bug this test hunts
        return "".join(traceback.format_exception_only(type(e), e)).strip()[:300]
    return "ok"


def test_corpus_compiles_unmutated():
    assert len(CORPUS) >= 4
    for src in sources():
        assert outcome(src) == "ok"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutants_compile_or_fail_with_a_located_compile_error(seed):
    rng = random.Random(seed)
    srcs = sources()
    seen = {"ok": 0, "error": 0}
    for _ in range(MUTANTS_PER_SEED):
        src = mutate(rng.choice(srcs), rng)
        got = outcome(src)
        assert got in seen, f"mutant:\n{src!r}\n-> {got}"
        seen[got] += 1
    # Both outcomes occur: a fuzzer whose mutants all fail (or all pass) tests little.
    assert seen["ok"] > MUTANTS_PER_SEED // 20 and seen["error"] > MUTANTS_PER_SEED // 4


def test_every_edit_changes_some_source():
    rng = random.Random(0)
    src = sources()[-1]
    for edit in EDITS:
        assert any(edit(src, rng) != src for _ in range(20)), edit.__name__


def test_tokens_cover_the_source():
    for src in sources():
        assert "".join(tokens(src)) == src
