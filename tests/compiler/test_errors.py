"""Every malformed model in tests/fixtures/errors/ fails to compile at the right place.

Each fixture states its expectation in its first comment lines:
  # error: LINE:COL: MESSAGE      the CompileError's line, column, and a part of its message
  # not: TEXT                     (optional, repeatable) text the message must not contain
  # xfail: REASON                 (optional) a known front-end bug, reported to the lead
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dlc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "errors"
HEADER = re.compile(r"^# error: (\d+):(\d+): (.+)$")


def expectation(path: Path) -> tuple[int, int, str, list[str], str | None]:
    lines = path.read_text(encoding="utf-8").splitlines()
    m = HEADER.match(lines[0])
    assert m, f"{path.name}: the first line must be '# error: LINE:COL: MESSAGE'"
    nots = [ln[len("# not: ") :] for ln in lines[1:] if ln.startswith("# not: ")]
    xfail = next((ln[len("# xfail: ") :] for ln in lines[1:] if ln.startswith("# xfail: ")), None)
    return int(m[1]), int(m[2]), m[3], nots, xfail


def cases():
    for path in sorted(FIXTURES.glob("*.dl")):
        xfail = expectation(path)[4]
        marks = [pytest.mark.xfail(reason=xfail, strict=False)] if xfail else []
        yield pytest.param(path, id=path.stem, marks=marks)


def test_there_are_enough_fixtures():
    assert len(list(FIXTURES.glob("*.dl"))) >= 20


@pytest.mark.parametrize("path", cases())
def test_error_is_located(path: Path):
    line, column, message, nots, _ = expectation(path)
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile(path)
    e = info.value
    assert message in e.message
    assert (e.line, e.column) == (line, column), e.format()
    for text in nots:
        assert text not in e.message
    # The printed form: path:line:col: error: message, the source line, a caret under the column.
    printed = e.format().splitlines()
    assert printed[0] == f"{path}:{line}:{column}: error: {e.message}"
    source = path.read_text(encoding="utf-8").splitlines()[line - 1]
    assert printed[1] == "    " + source.expandtabs(4)
    assert printed[2] == "    " + " " * (column - 1) + "^"
