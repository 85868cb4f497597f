"""Comparing golden files: the diff a mismatch shows, and files no case makes any more."""

from __future__ import annotations

import difflib
from pathlib import Path

from . import texts


def unified_diff(expected: str, actual: str, name: str) -> str:
    """`diff -u` of the expected text against what the compiler prints now."""
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True), actual.splitlines(keepends=True), f"expected/{name}", f"now/{name}"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def stale_files() -> list[Path]:
    """Files under expected/ that no (model, stage) makes: a model or stage removed or renamed."""
    wanted = {texts.expected_path(m, n) for m, n in texts.cases()}
    return sorted(p for p in texts.EXPECTED.rglob("*") if p.is_file() and p not in wanted)
