"""Each sample trains with its documented command (samples/README.md, "Training each one"),
run as written in a temp working folder, to the loss or accuracy that table states."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `(\w+\.dl)` \| `(dlc train [^`]+)` \| (cost|accuracy) ([<>]) ([0-9.]+) \|$")


def documented() -> list[tuple[str, str, str, str, float]]:
    text = (ROOT / "samples" / "README.md").read_text(encoding="utf-8")
    rows = [m.groups() for m in map(ROW.match, text.splitlines()) if m]
    return [(model, command, what, op, float(bound)) for model, command, what, op, bound in rows]


def test_every_sample_model_has_a_command():
    listed = {row[0] for row in documented()}
    assert listed == {p.name for p in (ROOT / "samples").glob("*.dl")}


@pytest.mark.slow
@pytest.mark.parametrize("model, command, what, op, bound", documented(), ids=[r[0] for r in documented()])
def test_sample_trains_to_its_stated_result(tmp_path, model, command, what, op, bound):
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    argv = shlex.split(command)
    p = subprocess.run(
        [sys.executable, "-m", "dlc", *argv[1:]],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    assert (tmp_path / model.replace(".dl", ".weights.npz")).is_file()  # in the working folder
    if what == "cost":
        value = float(re.search(r"at the first step -> (\S+) at the last", p.stdout).group(1))
    else:
        value = float(re.search(r"of the saved params .*, accuracy ([0-9.]+)", p.stdout).group(1))
    assert (value < bound) if op == "<" else (value > bound), f"{model}: {what} {value}, documented {op} {bound}"
